#include "cuda/cuda_model_runner.h"

#include "base/check.h"

namespace kvserve::cuda {

CudaModelRunner::CudaModelRunner(CudaLlamaModel& model, CudaKvStorage& storage, cache::KvStorage* swap,
                                 const compression::PolicyContext* compression)
    : model_(model),
      storage_(storage),
      swap_(swap),
      sampler_(model.config().vocab_size) {
  KVS_CHECK(model.stream() == storage.stream(), "the CUDA model must run on its KV storage's stream");
  const auto& layout = storage_.layout();
  for (int l = 0; l < layout.num_layers; ++l) {
    layer_data_.push_back(storage_.device_layer_data(l));
    layer_scales_.push_back(storage_.device_layer_scales(l));
  }
  kv_access_ = std::make_unique<CudaKvAccess>(storage_);
  compressor_ = std::make_unique<compression::KvCompressor>(compression, *kv_access_);
  book_ = std::make_unique<engine::RunnerBook>(layout.block_size, *compressor_);
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
  KVS_RETURN_IF_ERROR(engine::ApplyCopies(plan, storage_, swap_));
  KVS_RETURN_IF_ERROR(book_->Begin(plan));

  if (!plan.seqs.empty()) {
    const model::ForwardBatch batch = book_->builder().batch();
    model::KvCacheView view;
    view.layout = storage_.layout();
    view.num_blocks = storage_.num_blocks();
    view.layer_data = layer_data_;
    if (view.layout.has_scales()) view.layer_scales = layer_scales_;
    const model::ForwardObservers* observers = compressor_->PrepareObservers(book_->batch_seqs(), batch.positions);
    KVS_RETURN_IF_ERROR(model_.ForwardDevice(batch, view, observers));
    if (observers != nullptr) compressor_->FinishObservers();

    // Device greedy for every row at once (cheap, one launch), with the grammar masks of the
    // constrained device-greedy rows; host sampling per routed row.
    const std::span<engine::RunnerBook::Seq* const> seqs = book_->sampling_seqs();
    const int rows = static_cast<int>(seqs.size());
    masks_.Reset(rows, model_.mask_words());
    for (int r = 0; r < rows; ++r) {
      const engine::RunnerBook::Seq& s = *seqs[static_cast<size_t>(r)];
      if (model::RouteFor(s.sampling) != model::SampleRoute::kDeviceGreedy) continue;
      const std::span<const uint64_t> allowed = engine::RunnerBook::AllowedFor(s);
      if (s.grammar != nullptr && !allowed.empty()) masks_.Set(r, allowed);
    }
    greedy_tokens_.resize(static_cast<size_t>(rows));
    greedy_logprobs_.resize(static_cast<size_t>(rows));
    KVS_RETURN_IF_ERROR(model_.SampleGreedy(rows, greedy_tokens_, greedy_logprobs_, &masks_));
    size_t row = 0;
    for (const auto& q : plan.seqs) {
      if (!q.sample) continue;
      engine::RunnerBook::Seq& s = *seqs[row];
      scheduler::SampledToken t;
      t.seq = q.seq;
      if (model::RouteFor(s.sampling) == model::SampleRoute::kDeviceGreedy) {
        t.token_id = greedy_tokens_[row];
        // As model::Sampler: the logprob is reported only when asked for.
        t.logprob = s.sampling.logprobs ? greedy_logprobs_[row] : 0.0f;
      } else {
        KVS_RETURN_IF_ERROR(model_.CopyLogitsRow(static_cast<int>(row), row_logits_));
        model::SamplerRng rng = model::TokenRng(s.seed, q.num_generated, s.sample_index);
        model::SampleResult r =
            sampler_.Sample(row_logits_, s.sampling, s.prompt(), s.output(), rng, engine::RunnerBook::AllowedFor(s));
        t.token_id = r.token;
        t.logprob = r.logprob;
        for (const auto& lp : r.top_logprobs) t.top_logprobs.emplace_back(lp.token, lp.logprob);
      }
      engine::RunnerBook::Record(s, t.token_id);
      result.sampled.push_back(std::move(t));
      ++row;
    }
  }
  KVS_RETURN_IF_ERROR(book_->Finish(plan, result));
  // Swap-outs of this step must have landed in host memory before the scheduler reuses the
  // device blocks or reads the host copies.
  return storage_.synchronize();
}

}  // namespace kvserve::cuda
