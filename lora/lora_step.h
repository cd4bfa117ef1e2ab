// One step's adapters in the form the forward pass reads (model::LoraRows, forward_batch.h):
//
//   slots:   [0, max_loras)  the distinct adapters of this step, assigned on first use
//   rows:    [T]             each row's slot, -1 = base only, in the batch's row order
//   views:   [layer][site][slot]  the slot's weights on qkv / o / gate_up / down of a layer
//                                 (rank 0 where the adapter leaves a projection alone)
//   scratch: the shrink results, [rows][round_up(3 · max_lora_rank, 8)] at most
//
// The runner builds one per step: Clear, then per sequence SlotFor(adapter) and AddRows in
// the order the sequences' rows are laid out, then Finish. SlotFor refuses (-1) an adapter
// that would be the step's (max_loras + 1)-th: that is the bound the scheduler packs by.
// Every array is sized at construction for max_rows rows, so building a step never
// allocates. The step holds raw Adapter pointers: the caller keeps their handles
// (adapter_registry.h) alive for the step.
//
// Experts: a mixture-of-experts layer's expert views sit in their own table,
// [layer][gate_up | down][expert][slot] (model::LoraRows::expert_views).
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/cpu/lora_sgmv.h"
#include "lora/adapter.h"
#include "lora/lora_targets.h"
#include "model/forward_batch.h"

namespace kvserve::lora {

class LoraStep {
 public:
  // `targets` must outlive the step.
  LoraStep(const TargetTable& targets, int max_loras, int max_lora_rank, int64_t max_rows);

  void Clear();
  // The adapter's slot in this step, assigned on first use; -1 when the step already holds
  // max_loras other adapters.
  int SlotFor(const Adapter& adapter);
  // Appends n rows with slot `slot` (-1: base).
  void AddRows(int slot, int64_t n);
  // The rows for ForwardBatch::lora, valid until the next Clear; null when no row carries an
  // adapter (the step then costs nothing extra).
  const model::LoraRows* Finish();

  int num_slots_used() const { return used_; }
  int max_loras() const { return max_loras_; }

 private:
  const TargetTable& targets_;
  int num_layers_;
  int num_experts_;
  int max_loras_;
  int64_t max_rows_;
  std::vector<const Adapter*> slots_;                        // [max_loras]
  std::vector<kernels::cpu::LoraWeightsView> views_;         // [layers][sites][max_loras]
  std::vector<kernels::cpu::LoraWeightsView> expert_views_;  // [layers][2][experts][max_loras]
  std::vector<int16_t> row_slots_;                           // capacity max_rows
  std::vector<float> scratch_;
  kernels::cpu::LoraRowGroups groups_;
  model::LoraRows rows_;
  int used_ = 0;
};

}  // namespace kvserve::lora
