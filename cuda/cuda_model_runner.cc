#include "cuda/cuda_model_runner.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "engine/runner_conversions.h"
#include "model/device_plan.h"

namespace kvserve::cuda {

CudaModelRunner::CudaModelRunner(CudaLlamaModel& model, CudaKvStorage& storage, cache::KvStorage* swap,
                                 const compression::PolicyContext* compression)
    : model_(model),
      storage_(storage),
      swap_(swap),
      sampler_(model.config().vocab_size),
      builder_(storage.layout().block_size) {
  KVS_CHECK(model.stream() == storage.stream(), "the CUDA model must run on its KV storage's stream");
  const auto& layout = storage_.layout();
  for (int l = 0; l < layout.num_layers; ++l) {
    layer_data_.push_back(storage_.device_layer_data(l));
    layer_scales_.push_back(storage_.device_layer_scales(l));
  }
  kv_access_ = std::make_unique<CudaKvAccess>(storage_);
  compressor_ = std::make_unique<compression::KvCompressor>(compression, *kv_access_);
  row_logits_.resize(static_cast<size_t>(model.config().vocab_size));
}

CudaModelRunner::CudaModelRunner(std::unique_ptr<CudaLlamaModel> model, CudaKvStorage& storage,
                                 cache::KvStorage* swap, const compression::PolicyContext* compression)
    : CudaModelRunner(*model, storage, swap, compression) {
  owned_model_ = std::move(model);
}

absl::Status CudaModelRunner::Execute(const scheduler::StepPlan& plan, scheduler::StepResult& result) {
  result.clear();
  result.step_id = plan.step_id;
  // Copies are queued on the storage's stream, which the forward pass below also runs on.
  if (!plan.swap_out.empty() || !plan.swap_in.empty()) {
    if (swap_ == nullptr) return absl::InternalError("swap requested but no host swap tier exists");
    KVS_RETURN_IF_ERROR(storage_.copy_blocks_to(*swap_, plan.swap_out));
    KVS_RETURN_IF_ERROR(storage_.copy_blocks_from(*swap_, plan.swap_in));
  }
  KVS_RETURN_IF_ERROR(storage_.copy_blocks(plan.copies));

  for (const auto& n : plan.new_seqs) {
    Seq s;
    s.history = n.history;
    s.num_prompt = n.num_prompt_tokens;
    s.sampling = engine::ToModelParams(n.sampling);
    s.seed = n.sampling.seed.value_or(0);
    s.sample_index = n.sampling.sample_index;
    seqs_[n.seq.value()] = std::move(s);
    KVS_RETURN_IF_ERROR(compressor_->Track(n.seq, n.compression, n.compression_auto, n.resume));
  }

  builder_.Clear();
  sampling_seqs_.clear();
  batch_seqs_.clear();
  for (const auto& q : plan.seqs) {
    auto it = seqs_.find(q.seq.value());
    if (it == seqs_.end()) {
      return absl::InternalError(absl::StrCat("sequence ", q.seq.value(), " was never sent to the runner"));
    }
    Seq& s = it->second;
    if (q.table_reset) s.table.clear();
    const size_t need = static_cast<size_t>(q.table_offset + q.num_new_blocks);
    if (s.table.size() < need) s.table.resize(need);
    for (int i = 0; i < q.num_new_blocks; ++i) {
      s.table[static_cast<size_t>(q.table_offset + i)] = plan.new_blocks[static_cast<size_t>(q.blocks_begin + i)].value();
    }
    const int32_t first_row = static_cast<int32_t>(builder_.num_tokens());
    compressor_->BeginStep(q.seq, q.first_position, q.num_tokens, q.kv_len_after);
    batch_seqs_.push_back({q.seq, first_row, q.num_tokens, q.kv_len_after});
    builder_.AddSequence(std::span<const int32_t>(plan.token_ids)
                             .subspan(static_cast<size_t>(q.token_begin), static_cast<size_t>(q.num_tokens)),
                         static_cast<int32_t>(q.first_position), static_cast<int32_t>(q.kv_len_after - q.num_tokens),
                         s.table, q.sample ? model::LogitsWanted::kLast : model::LogitsWanted::kNone);
    if (q.sample) sampling_seqs_.push_back(&s);
  }

  if (!plan.seqs.empty()) {
    const model::ForwardBatch batch = builder_.batch();
    model::KvCacheView view;
    view.layout = storage_.layout();
    view.num_blocks = storage_.num_blocks();
    view.layer_data = layer_data_;
    if (view.layout.has_scales()) view.layer_scales = layer_scales_;
    const model::ForwardObservers* observers = compressor_->PrepareObservers(batch_seqs_, batch.positions);
    KVS_RETURN_IF_ERROR(model_.ForwardDevice(batch, view, observers));
    if (observers != nullptr) compressor_->FinishObservers();

    // Device greedy for every row at once (cheap, one launch); host sampling per routed row.
    const int rows = static_cast<int>(sampling_seqs_.size());
    greedy_tokens_.resize(static_cast<size_t>(rows));
    greedy_logprobs_.resize(static_cast<size_t>(rows));
    KVS_RETURN_IF_ERROR(model_.SampleGreedy(rows, greedy_tokens_, greedy_logprobs_));
    size_t row = 0;
    for (const auto& q : plan.seqs) {
      if (!q.sample) continue;
      Seq& s = *sampling_seqs_[row];
      scheduler::SampledToken t;
      t.seq = q.seq;
      if (model::RouteFor(s.sampling) == model::SampleRoute::kDeviceGreedy) {
        t.token_id = greedy_tokens_[row];
        // As model::Sampler: the logprob is reported only when asked for.
        t.logprob = s.sampling.logprobs ? greedy_logprobs_[row] : 0.0f;
      } else {
        KVS_RETURN_IF_ERROR(model_.CopyLogitsRow(static_cast<int>(row), row_logits_));
        model::SamplerRng rng = model::TokenRng(s.seed, q.num_generated, s.sample_index);
        std::span<const int32_t> prompt(s.history.data(), static_cast<size_t>(s.num_prompt));
        std::span<const int32_t> output(s.history.data() + s.num_prompt, s.history.size() - s.num_prompt);
        model::SampleResult r = sampler_.Sample(row_logits_, s.sampling, prompt, output, rng);
        t.token_id = r.token;
        t.logprob = r.logprob;
        for (const auto& lp : r.top_logprobs) t.top_logprobs.emplace_back(lp.token, lp.logprob);
      }
      s.history.push_back(t.token_id);
      result.sampled.push_back(std::move(t));
      ++row;
    }
  }
  for (const auto& q : plan.seqs) {
    if (!compressor_->tracking(q.seq)) continue;
    Seq& s = seqs_.at(q.seq.value());
    const int64_t next_position = q.first_position + q.num_tokens;
    KVS_ASSIGN_OR_RETURN(std::optional<compression::RoundResult> r,
                         compressor_->EndStep(q.seq, next_position, plan.compress_auto, s.table));
    if (r) result.compactions.push_back(engine::ToCompaction(q.seq, next_position, std::move(*r)));
  }
  for (cache::SeqId id : plan.finished) {
    seqs_.erase(id.value());
    compressor_->Forget(id);
  }
  for (cache::SeqId id : plan.preempted) {
    seqs_.erase(id.value());
    if (std::find(plan.parked.begin(), plan.parked.end(), id) != plan.parked.end()) {
      compressor_->Park(id);
    } else {
      compressor_->Forget(id);
    }
  }
  // Swap-outs of this step must have landed in host memory before the scheduler reuses the
  // device blocks or reads the host copies.
  return storage_.synchronize();
}

}  // namespace kvserve::cuda
