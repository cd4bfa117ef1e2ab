// StepCost: what one forward pass of a model costs on this machine, as a fixed part (streaming
// the weights, the per-layer overheads) and a part per row, measured once at start-up. The
// adaptive draft length (draft_length.h) needs both in units of the target's fixed part: a
// verify row's cost c = row / fixed, and a draft model's guess g = (its fixed + row) / the
// target's fixed. A constant cannot serve every model: c is 0.11 for the 124.7 M fp32 bench
// model and 0.35 for kvs-tiny on the same CPU (docs/benchmarks.md).
//
//   scratch pool (fp32, a few blocks) ── prompt of kContext tokens (not timed)
//     ├─ 1 row at kv_len kContext    ─┐ each the fastest of `reps` (a shared machine only
//     └─ R rows at kv_len kContext   ─┘ ever adds time); truncated back after each; every
//                                       row's logits, as a verify step computes them
//   row = (t_R - t_1) / (R - 1),  fixed = t_1 - row
//
// CPU backend only (the model's packed host weights).
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "base/clock.h"
#include "model/llama_model.h"

namespace kvserve::speculative {

struct StepCost {
  double fixed_s = 0.0;  // a forward pass of one row, less one row's share
  double row_s = 0.0;    // each further row

  // One row's compute relative to the fixed part (DraftLength's c), clamped to [0.01, 4].
  double row_cost() const;
  // A one-row forward of `draft` in units of this model's fixed part (DraftLength's g).
  double guess_cost(const StepCost& draft) const;
};

// A private fp32 KV pool of `kv_bytes` (the draft model's own, the measurement's scratch):
// no prefix caching, no layer groups, no swap or host tier.
config::CacheConfig PrivatePoolConfig(int block_size, uint64_t kv_bytes);

struct StepCostOptions {
  int rows = 8;  // R
  int reps = 3;  // each shape timed this many times, the fastest kept
  int block_size = 16;
};

// Times `model` on a scratch KV pool of its own (the serving pools are untouched).
absl::StatusOr<StepCost> MeasureStepCost(model::LlamaModel& model, const base::Clock& clock,
                                         const StepCostOptions& options = {});

}  // namespace kvserve::speculative
