// CudaModelRunner: executes StepPlans with the Llama model on a CUDA device. The same
// contract and per-sequence state as engine::CpuModelRunner (the reference), so the two
// backends emit the same tokens for the same plans:
//
//   StepPlan ──► copies (swap out/in over pinned host memory, copy-on-write) on the storage's stream
//            ──► ForwardBatch (model::BatchBuilder) ──► CudaLlamaModel::ForwardDevice (same stream)
//            ──► sampling rows, routed by model::RouteFor:
//                  device greedy: token + logprob computed on the device, 8 bytes per row come back;
//                    a structured-output row's grammar mask goes up first (only those rows')
//                    and the argmax runs over its allowed tokens
//                  host: the row's logits come back and model::Sampler draws (CPU code and RNG),
//                    with the grammar mask as on the CPU
//            ──► speculative decoding (n-gram drafts, docs/speculative.md "CUDA backend"): a
//                drafting sequence's 1 + k rows all have logits, computed window by window
//                (max_logits_rows at a time); device-greedy rows are masked by the grammar state
//                after the guesses before them (RunnerBook::DraftMasks) and verified by
//                engine::AcceptArgmaxes, host rows by engine::VerifyDraft (the CPU runner's);
//                rejected guesses leave the table and the compressor (RunnerBook::RejectGuesses)
//
// Per-sequence state (tables, histories, grammar states, compression) is engine::RunnerBook,
// the CPU runner's own bookkeeping.
//            ──► compression rounds through CudaKvAccess (host staging) ──► StepResult
//
// What runs on the host: batch building, the RoPE table, non-greedy sampling (temperature,
// top-k/p, min-p, penalties, logit_bias, top-N logprobs), and compression scoring/selection
// and compaction (CudaKvAccess). The side outputs the policies read (pre-RoPE queries,
// attention mass) are computed on the device and copied back once per step.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "cache/kv_storage.h"
#include "compression/compression_policy.h"
#include "compression/kv_compressor.h"
#include "cuda/cuda_kv_access.h"
#include "cuda/cuda_kv_storage.h"
#include "cuda/cuda_llama_model.h"
#include "engine/model_runner.h"
#include "engine/runner_book.h"
#include "model/device_plan.h"
#include "model/sampler.h"

namespace kvserve::cuda {

class CudaModelRunner final : public engine::ModelRunner {
 public:
  // `swap` may be null (no host swap tier); `compression` may be null (only `full`). All must
  // outlive the runner; the model must run on the storage's stream.
  CudaModelRunner(CudaLlamaModel& model, CudaKvStorage& storage, cache::KvStorage* swap,
                  const compression::PolicyContext* compression = nullptr);
  // The same, owning the model (the backend's form: the model goes with the runner).
  CudaModelRunner(std::unique_ptr<CudaLlamaModel> model, CudaKvStorage& storage, cache::KvStorage* swap,
                  const compression::PolicyContext* compression = nullptr);

  absl::Status Execute(const scheduler::StepPlan& plan, scheduler::StepResult& result) override;
  int vocab_size() const override { return model_.config().vocab_size; }
  // n-gram drafts are verified (1 + k logits rows per drafting sequence, see the picture above);
  // the draft model itself is CPU-only (engine_factory refuses method draft on CUDA).
  bool verifies_drafts() const override { return true; }

 private:
  // A host-routed sequence's verify rows: logits rows [first, first + rows) of the step, copied
  // to host_logits_ from row `offset` on.
  struct HostRows {
    int first = 0;
    int rows = 0;
    size_t offset = 0;
  };
  static std::span<const int32_t> DraftOf(const scheduler::StepPlan& plan,
                                          const scheduler::ScheduledSeq& q);
  // Per logits row: the grammar mask of a device-greedy row (row_allowed_), and the host-routed
  // sequences' rows (host_rows_), in plan order.
  void PlanRows(const scheduler::StepPlan& plan);
  // After ForwardLayers: logits of the step's `total` rows window by window, device greedy of
  // every row (greedy_tokens_ / greedy_logprobs_), the host rows' logits copied back.
  absl::Status SampleRows(int total);
  // Emits each sampling sequence's tokens (1 + accepted), verifying drafts as the CPU runner
  // does, and drops rejected guesses (RunnerBook::RejectGuesses).
  void VerifyRows(const scheduler::StepPlan& plan, scheduler::StepResult& result);

  std::unique_ptr<CudaLlamaModel> owned_model_;  // null when the caller owns the model
  CudaLlamaModel& model_;
  CudaKvStorage& storage_;
  cache::KvStorage* swap_;
  model::Sampler sampler_;
  std::vector<std::byte*> layer_data_;  // device pointers
  std::vector<float*> layer_scales_;
  std::unique_ptr<CudaKvAccess> kv_access_;
  std::unique_ptr<compression::KvCompressor> compressor_;
  std::unique_ptr<engine::RunnerBook> book_;  // per-sequence state, shared with the CPU runner

  // Per-step scratch, reused.
  model::DeviceMasks masks_;
  std::vector<int32_t> greedy_tokens_;
  std::vector<float> greedy_logprobs_;
  std::vector<std::span<const uint64_t>> row_allowed_;  // [logits rows]; empty: unconstrained
  std::vector<HostRows> host_rows_;
  std::vector<float> host_logits_;  // host-routed rows, [rows][vocab]
};

}  // namespace kvserve::cuda
