// The loop of a pipeline worker rank (ranks 1 ... P-1; pipeline_link.h): a stateless executor
// of rank 0's step messages. It holds its stage's layers (LlamaModel loaded with the layer
// range and the link) and their KV pool, sized like rank 0's so that block ids mean the same
// blocks; it keeps no per-sequence state: every step message carries the whole block tables.
//
//   loop: ReceiveStep ─ shutdown ──▶ return OK
//                     ─ forward ──▶ apply swap out, swap in, copies to its pool and swap tier
//                                   ─ rows? ─▶ model.Forward (ReceiveHidden .. its layers ..
//                                              HandOff, or logits on the last stage)
//                                              ─ last stage ─▶ SendLogits
#pragma once

#include "absl/status/status.h"
#include "base/logger.h"
#include "cache/kv_storage.h"
#include "model/llama_model.h"
#include "parallel/pipeline_link.h"

namespace kvserve::parallel {

// Runs until rank 0 sends shutdown (OK) or the link fails (its error). `swap` may be null.
absl::Status RunPipelineWorker(PipelineLink& link, model::LlamaModel& model,
                               cache::KvStorage& storage, cache::KvStorage* swap,
                               const base::Logger& logger);

}  // namespace kvserve::parallel
