// CpuModelRunner: executes StepPlans with the Llama model on the CPU backend.
//
//   StepPlan ──► copies (swap out/in, copy-on-write) on the host KV storages
//            ──► ForwardBatch (tokens, positions, slot mapping, block tables) ──► LlamaModel
//            ──► logits of sampling rows ──► Sampler ──► StepResult
//
// Runner-side state per sequence (engine::RunnerBook, shared with the CUDA runner): its block
// table and token history (sent in full once by the scheduler, then deltas), its grammar state,
// and for compressing sequences their policy state (compression::KvCompressor): rounds run
// right after the forward pass, before the next step reads the KV, and come back as
// StepResult::compactions. Sampling is stateless per token: the RNG of the k-th
// generated token is seeded from (seed, k) and the sample index, so a sequence draws the
// same tokens alone or batched, and after preemption and recompute.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "cache/host_kv_storage.h"
#include "cache/layer_groups.h"
#include "compression/compression_policy.h"
#include "compression/host_kv_access.h"
#include "compression/key_basis.h"
#include "compression/kv_compressor.h"
#include "engine/model_runner.h"
#include "engine/runner_book.h"
#include "lora/active_adapters.h"
#include "lora/lora_step.h"
#include "model/llama_model.h"
#include "model/sampler.h"

namespace kvserve::engine {

class CpuModelRunner final : public ModelRunner {
 public:
  // `swap` may be null (no host swap tier). `compression` may be null: then only `full`
  // sequences run. `demote_tiers`: the demotion tier pools (host memory; tier t + 1 at index
  // t), whose blocks a sequence's table may mix with the pool's (TieredBlock entries).
  // `key_basis`: the low-rank tier's basis (layout.key_rank > 0), required when there is one.
  // `groups`: the hybrid model's layer groups when `storage` holds group_size slot arrays
  // (cache/layer_groups.h); default: one array per layer. All must outlive the runner.
  CpuModelRunner(model::LlamaModel& model, cache::KvStorage& storage, cache::KvStorage* swap,
                 const compression::PolicyContext* compression = nullptr,
                 std::span<cache::KvStorage* const> demote_tiers = {},
                 const compression::PackedKeyBasis* key_basis = nullptr,
                 const cache::LayerGroups& groups = {});

  absl::Status Execute(const scheduler::StepPlan& plan, scheduler::StepResult& result) override;
  int vocab_size() const override { return model_.config().vocab_size; }
  bool verifies_drafts() const override { return true; }
  bool scores_prompts() const override { return true; }
  // LoRA: each scheduled sequence with lora_id >= 0 runs its adapter (table.Get(id)) over the
  // base; at most max_loras distinct adapters per step (the scheduler's bound). `table` must
  // outlive the runner.
  void EnableLora(const lora::ActiveAdapters& table, int max_loras, int max_lora_rank);

 private:
  // Embedding sequences: the prompt rows of this step's chunk (logits rows [row, row + rows)),
  // summed (mean pooling) or the last prompt token's (last pooling), into `out`.
  void PoolPromptRows(const scheduler::ScheduledSeq& q, const RunnerBook::Seq& s, size_t row,
                      size_t rows, std::vector<scheduler::HiddenPart>& out) const;

  model::LlamaModel& model_;
  cache::KvStorage& storage_;
  cache::KvStorage* swap_;
  model::Sampler sampler_;
  std::vector<std::byte*> layer_data_;  // [num_layers]: the layer's slot array
  std::vector<float*> layer_scales_;
  std::vector<int16_t> layer_group_;  // layer groups: [num_layers]; empty without
  // What compaction rewrites: the main table's layers (null for window layers).
  std::vector<std::byte*> compact_data_;
  std::vector<float*> compact_scales_;
  // Demotion tiers: per tier its layer pointer arrays, and the view kernels and rounds read.
  std::vector<std::vector<std::byte*>> tier_data_;
  std::vector<std::vector<float*>> tier_scales_;
  std::vector<kernels::cpu::KvTierStorage> tiers_;
  std::unique_ptr<compression::HostKvAccess> kv_access_;  // compression's view of storage_
  std::unique_ptr<compression::KvCompressor> compressor_;
  std::unique_ptr<RunnerBook> book_;  // per-sequence state (shared with the CUDA runner)

  // LoRA (EnableLora): the engine's adapter table and this step's rows.
  const lora::ActiveAdapters* lora_table_ = nullptr;
  std::unique_ptr<lora::TargetTable> lora_targets_;  // the step refers to it
  std::unique_ptr<lora::LoraStep> lora_step_;

  // Per-step scratch, reused.
  std::vector<float> logits_;
  std::vector<int32_t> prompt_order_;  // prompt logprobs' top-N scratch
};

}  // namespace kvserve::engine
