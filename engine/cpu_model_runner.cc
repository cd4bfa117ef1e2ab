#include "engine/cpu_model_runner.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "engine/runner_conversions.h"
#include "structured/compiled_grammar.h"

namespace kvserve::engine {

CpuModelRunner::CpuModelRunner(model::LlamaModel& model, cache::KvStorage& storage,
                               cache::KvStorage* swap, const compression::PolicyContext* compression)
    : model_(model),
      storage_(storage),
      swap_(swap),
      sampler_(model.config().vocab_size),
      builder_(storage.layout().block_size) {
  const auto& layout = storage_.layout();
  KVS_CHECK(storage_.host_addressable(), "the CPU runner needs host-addressable KV storage");
  for (int l = 0; l < layout.num_layers; ++l) {
    layer_data_.push_back(storage_.layer_data(l));
    layer_scales_.push_back(storage_.layer_scales(l));
  }
  kv_access_ = std::make_unique<compression::HostKvAccess>(layout, layer_data_, layer_scales_);
  compressor_ = std::make_unique<compression::KvCompressor>(compression, *kv_access_);
}

absl::Status CpuModelRunner::Execute(const scheduler::StepPlan& plan, scheduler::StepResult& result) {
  result.clear();
  result.step_id = plan.step_id;
  if (!plan.swap_out.empty() || !plan.swap_in.empty()) {
    if (swap_ == nullptr) return absl::InternalError("swap requested but no host swap tier exists");
    // The same two calls for any pair of memory spaces (cache/kv_storage.h).
    KVS_RETURN_IF_ERROR(storage_.copy_blocks_to(*swap_, plan.swap_out));
    KVS_RETURN_IF_ERROR(storage_.copy_blocks_from(*swap_, plan.swap_in));
  }
  KVS_RETURN_IF_ERROR(storage_.copy_blocks(plan.copies));

  for (const auto& n : plan.new_seqs) {
    Seq s;
    s.history = n.history;
    s.num_prompt = n.num_prompt_tokens;
    s.sampling = ToModelParams(n.sampling);
    s.seed = n.sampling.seed.value_or(0);
    s.sample_index = n.sampling.sample_index;
    if (n.sampling.grammar != nullptr) {
      // A resumed sequence (after preemption) replays its generated tokens through the grammar.
      s.grammar = n.sampling.grammar;
      s.grammar_state = s.grammar->start();
      for (size_t i = static_cast<size_t>(s.num_prompt); i < s.history.size(); ++i) {
        s.grammar_state = s.grammar->Advance(s.grammar_state, s.history[i]);
      }
    }
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
    size_t need = static_cast<size_t>(q.table_offset + q.num_new_blocks);
    if (s.table.size() < need) s.table.resize(need);
    for (int i = 0; i < q.num_new_blocks; ++i) {
      s.table[q.table_offset + i] = plan.new_blocks[q.blocks_begin + i].value();
    }
    // New rows append at the sequence's physical end, also after a compaction; positions
    // stay logical.
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
    const int vocab = model_.config().vocab_size;
    logits_.resize(static_cast<size_t>(builder_.num_logits_rows()) * static_cast<size_t>(vocab));
    const model::ForwardBatch batch = builder_.batch();
    model::KvCacheView view;
    view.layout = storage_.layout();
    view.num_blocks = storage_.num_blocks();
    view.layer_data = layer_data_;
    if (view.layout.has_scales()) view.layer_scales = layer_scales_;
    // Side outputs only for the policies that read them (snapkv: queries, h2o: mass).
    const model::ForwardObservers* observers = compressor_->PrepareObservers(batch_seqs_, batch.positions);
    KVS_RETURN_IF_ERROR(model_.Forward(batch, view, logits_, observers));
    if (observers != nullptr) compressor_->FinishObservers();

    size_t row = 0;
    for (const auto& q : plan.seqs) {
      if (!q.sample) continue;
      Seq& s = *sampling_seqs_[row];
      model::SamplerRng rng = model::TokenRng(s.seed, q.num_generated, s.sample_index);
      std::span<const float> logits(logits_.data() + row * static_cast<size_t>(vocab), vocab);
      std::span<const int32_t> prompt(s.history.data(), s.num_prompt);
      std::span<const int32_t> output(s.history.data() + s.num_prompt, s.history.size() - s.num_prompt);
      std::span<const uint64_t> allowed;
      if (s.grammar != nullptr && s.grammar_state != structured::ByteDfa::kDead) {
        allowed = s.grammar->MaskFor(s.grammar_state);
      }
      model::SampleResult r = sampler_.Sample(logits, s.sampling, prompt, output, rng, allowed);
      if (s.grammar != nullptr) s.grammar_state = s.grammar->Advance(s.grammar_state, r.token);
      scheduler::SampledToken t;
      t.seq = q.seq;
      t.token_id = r.token;
      t.logprob = r.logprob;
      for (const auto& lp : r.top_logprobs) t.top_logprobs.emplace_back(lp.token, lp.logprob);
      s.history.push_back(r.token);
      result.sampled.push_back(std::move(t));
      ++row;
    }
  }
  // Compression rounds, after every KV write of the step and before the next step reads.
  for (const auto& q : plan.seqs) {
    if (!compressor_->tracking(q.seq)) continue;
    Seq& s = seqs_.at(q.seq.value());
    const int64_t next_position = q.first_position + q.num_tokens;
    KVS_ASSIGN_OR_RETURN(std::optional<compression::RoundResult> r,
                         compressor_->EndStep(q.seq, next_position, plan.compress_auto, s.table));
    if (r) result.compactions.push_back(ToCompaction(q.seq, next_position, std::move(*r)));
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
  return absl::OkStatus();
}

}  // namespace kvserve::engine
