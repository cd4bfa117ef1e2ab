// The forward pass's two LoRA hooks (forward_batch.h, LoraRows; the adapters themselves live
// in lora/): checking a step's adapter rows against the model, and adding the low-rank delta
// after a projection. Kept out of llama_model.cc so the forward names a site, nothing more.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "model/forward_batch.h"
#include "model/model_config.h"

namespace kvserve::model {

// Shapes of b.lora checked before anything is computed (OK when there is none).
absl::Status ValidateLora(const ModelConfig& c, const ForwardBatch& b);

// y += each adapted row's LoRA delta on one projection (x: the projection's input rows).
void AddLora(const ForwardBatch& b, int layer, LoraSite site, const float* x, int64_t x_stride,
             int in, float* y, int64_t y_stride);

}  // namespace kvserve::model
