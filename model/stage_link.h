// StageLink: how a pipeline stage of the model (a contiguous range of decoder layers, the
// rest held by other processes) exchanges activations with its neighbours, without the
// model seeing the transport (parallel/pipeline_link.h implements it over a Communicator).
//
//   stage 0 (rank 0)                         stage P-1 (last)
//   embed → layers [0, b1) ─HandOff──x──▶ ReceiveHidden → layers [b_{P-1}, L) → norm → lm_head
//           logits ◀──────────────────────────────────────────────── (the worker loop sends them)
//
// What crosses a boundary is the residual stream x [T][D] (fp32): this forward pass keeps no
// other residual state between layers, so the last stage's logits are bit-identical to one
// process running every layer. The KV of a layer lives only on the stage that runs it, under
// the block ids of the one block manager (rank 0's).
#pragma once

#include <cstdint>
#include <span>

#include "absl/status/status.h"
#include "cache/cache_types.h"
#include "model/forward_batch.h"

namespace kvserve::model {

class StageLink {
 public:
  virtual ~StageLink() = default;

  // First stage, before the step's Forward (or instead of it when the step runs no rows):
  // the KV moves every stage applies to its own layers first.
  virtual absl::Status BeginStep(int64_t step_id, std::span<const cache::BlockCopy> swap_out,
                                 std::span<const cache::BlockCopy> swap_in,
                                 std::span<const cache::BlockCopy> copies) = 0;
  // A stage that is not the first: its input x [T][D] from the previous stage.
  virtual absl::Status ReceiveHidden(std::span<float> x) = 0;
  // A stage that is not the last, after its layers: hands `x` [T][D] on. On the first stage
  // it also sends the step (batch and moves) first and returns with the last stage's logits
  // rows in `logits` ([R][V]).
  virtual absl::Status HandOff(const ForwardBatch& batch, std::span<const float> x,
                               std::span<float> logits) = 0;
  // First stage, after the step: sends the moves of BeginStep if no Forward carried them.
  virtual absl::Status EndStep() = 0;
};

}  // namespace kvserve::model
