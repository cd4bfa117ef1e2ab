#include "cuda/cuda_model_runner.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "engine/draft_verifier.h"

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
    KVS_RETURN_IF_ERROR(model_.ForwardLayers(batch, view, observers));
    PlanRows(plan);
    if (row_allowed_.size() != batch.logits_rows.size()) {
      return absl::InternalError(absl::StrCat("cuda runner: the plan's ", row_allowed_.size(),
                                              " logits rows but the batch's ",
                                              batch.logits_rows.size()));
    }
    KVS_RETURN_IF_ERROR(SampleRows(static_cast<int>(batch.logits_rows.size())));
    VerifyRows(plan, result);
    // After verification: rejected guesses' query rows are not observed (RejectGuesses).
    if (observers != nullptr) compressor_->FinishObservers();
  }
  KVS_RETURN_IF_ERROR(book_->Finish(plan, result));
  // Swap-outs of this step must have landed in host memory before the scheduler reuses the
  // device blocks or reads the host copies.
  return storage_.synchronize();
}

std::span<const int32_t> CudaModelRunner::DraftOf(const scheduler::StepPlan& plan,
                                                  const scheduler::ScheduledSeq& q) {
  return std::span<const int32_t>(plan.token_ids)
      .subspan(static_cast<size_t>(q.token_begin + q.num_tokens - q.num_draft),
               static_cast<size_t>(q.num_draft));
}

void CudaModelRunner::PlanRows(const scheduler::StepPlan& plan) {
  // Logits rows in plan order, as the CPU runner reads them: a sampling sequence's last
  // 1 + num_draft rows are its verify rows.
  size_t total = 0;
  for (size_t i = 0; i < plan.seqs.size(); ++i) total += static_cast<size_t>(book_->logits_rows(i));
  row_allowed_.assign(total, {});
  host_rows_.clear();
  size_t row = 0, seq_index = 0, host_offset = 0;
  const std::span<engine::RunnerBook::Seq* const> seqs = book_->sampling_seqs();
  for (size_t i = 0; i < plan.seqs.size(); ++i) {
    const scheduler::ScheduledSeq& q = plan.seqs[i];
    const size_t all_rows = static_cast<size_t>(book_->logits_rows(i));
    if (q.sample) {
      const engine::RunnerBook::Seq& s = *seqs[seq_index++];
      const size_t rows = 1 + static_cast<size_t>(q.num_draft);
      const size_t first = row + all_rows - rows;
      if (model::RouteFor(s.sampling) == model::SampleRoute::kDeviceGreedy) {
        engine::RunnerBook::DraftMasks(s, DraftOf(plan, q),
                                       std::span(row_allowed_).subspan(first, rows));
      } else {
        host_rows_.push_back({static_cast<int>(first), static_cast<int>(rows), host_offset});
        host_offset += rows;
      }
    }
    row += all_rows;
  }
  host_logits_.resize(host_offset * static_cast<size_t>(model_.config().vocab_size));
}

absl::Status CudaModelRunner::SampleRows(int total) {
  // Device greedy for every row (cheap, one launch per window), with the grammar masks of the
  // constrained device-greedy rows; the host-routed rows' logits come back. Windows of at most
  // max_logits_rows rows: verify rows can outnumber the sequences the device logits are sized for.
  greedy_tokens_.resize(static_cast<size_t>(total));
  greedy_logprobs_.resize(static_cast<size_t>(total));
  const size_t vocab = static_cast<size_t>(model_.config().vocab_size);
  for (int begin = 0; begin < total; begin += model_.max_logits_rows()) {
    const int n = std::min(model_.max_logits_rows(), total - begin);
    KVS_RETURN_IF_ERROR(model_.ComputeLogits(begin, n));
    masks_.Reset(n, model_.mask_words());
    for (int r = 0; r < n; ++r) {
      const std::span<const uint64_t> allowed = row_allowed_[static_cast<size_t>(begin + r)];
      if (!allowed.empty()) masks_.Set(r, allowed);
    }
    KVS_RETURN_IF_ERROR(model_.SampleGreedy(
        n, std::span(greedy_tokens_).subspan(static_cast<size_t>(begin)),
        std::span(greedy_logprobs_).subspan(static_cast<size_t>(begin)), &masks_));
    for (const HostRows& h : host_rows_) {
      const int first = std::max(h.first, begin);
      const int end = std::min(h.first + h.rows, begin + n);
      if (first >= end) continue;
      const size_t at = (h.offset + static_cast<size_t>(first - h.first)) * vocab;
      KVS_RETURN_IF_ERROR(
          model_.CopyLogitsRows(first - begin, end - first, std::span(host_logits_).subspan(at)));
    }
  }
  return absl::OkStatus();
}

void CudaModelRunner::VerifyRows(const scheduler::StepPlan& plan, scheduler::StepResult& result) {
  const int vocab = model_.config().vocab_size;
  const std::span<engine::RunnerBook::Seq* const> seqs = book_->sampling_seqs();
  size_t row = 0, seq_index = 0, host_index = 0;
  for (size_t i = 0; i < plan.seqs.size(); ++i) {
    const scheduler::ScheduledSeq& q = plan.seqs[i];
    const size_t all_rows = static_cast<size_t>(book_->logits_rows(i));
    if (!q.sample) {
      row += all_rows;
      continue;
    }
    engine::RunnerBook::Seq& s = *seqs[seq_index++];
    const size_t rows = 1 + static_cast<size_t>(q.num_draft);
    const size_t first = row + all_rows - rows;
    const std::span<const int32_t> draft = DraftOf(plan, q);
    int32_t accepted = 0;
    if (model::RouteFor(s.sampling) == model::SampleRoute::kDeviceGreedy) {
      accepted = engine::AcceptArgmaxes(
          s, q.seq, std::span<const int32_t>(greedy_tokens_).subspan(first, rows),
          std::span<const float>(greedy_logprobs_).subspan(first, rows), draft, result.sampled);
    } else {
      // The CPU runner's host path (its Sampler and per-token RNG) on the copied rows.
      const HostRows& h = host_rows_[host_index++];
      const std::span<const float> logits =
          std::span<const float>(host_logits_)
              .subspan(h.offset * static_cast<size_t>(vocab), rows * static_cast<size_t>(vocab));
      if (q.num_draft == 0) {
        engine::SampleNext(sampler_, s, q.seq, logits, q.num_generated, result.sampled);
      } else {
        accepted = engine::VerifyDraft(sampler_, s, q.seq, logits, vocab, draft, q.num_generated,
                                       result.sampled);
      }
    }
    if (q.num_draft > 0) book_->RejectGuesses(i, q, q.num_draft - accepted);
    row += all_rows;
  }
}

}  // namespace kvserve::cuda
