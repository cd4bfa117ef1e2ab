#include "model/lora_hooks.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/absl_compat.h"
#include "kernels/cpu/lora_sgmv.h"

namespace kvserve::model {
namespace {

absl::Status LoraError(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("forward batch: ", what));
}

}  // namespace

// LoRA rows (forward_batch.h, LoraRows): shapes checked before anything is computed.
absl::Status ValidateLora(const ModelConfig& c, const ForwardBatch& b) {
  if (b.lora == nullptr) return absl::OkStatus();
  const LoraRows& l = *b.lora;
  if (l.groups == nullptr || l.num_slots < 0) return LoraError("lora: no row groups");
  const size_t slots = static_cast<size_t>(l.num_slots);
  const size_t sites = static_cast<size_t>(c.num_layers) * kLoraSites;
  if (l.views.size() != sites * slots) {
    return LoraError(absl::StrCat("lora: ", l.views.size(), " weight views, expected ",
                                  sites * slots, " (layers x sites x slots)"));
  }
  if (l.row_slots.size() != static_cast<size_t>(b.num_tokens())) {
    return LoraError(
        absl::StrCat("lora: ", l.row_slots.size(), " row slots for ", b.num_tokens(), " rows"));
  }
  for (int16_t s : l.row_slots) {
    if (s < -1 || s >= l.num_slots)
      return LoraError(absl::StrCat("lora: row slot ", s, " out of range"));
  }
  const size_t expert_views =
      c.any_moe_layer() ? sites / kLoraSites * 2 * static_cast<size_t>(c.moe.num_experts) * slots
                        : 0;
  if (l.expert_views.size() != expert_views) {
    return LoraError(absl::StrCat("lora: ", l.expert_views.size(),
                                  " expert weight views, expected ", expert_views));
  }
  for (int32_t row : l.groups->rows()) {
    if (row < 0 || row >= b.num_tokens()) {
      return LoraError(absl::StrCat("lora: row ", row, " out of range"));
    }
  }
  for (const auto& seg : l.groups->segments()) {
    if (seg.slot < 0 || seg.slot >= l.num_slots) {
      return LoraError(absl::StrCat("lora: slot ", seg.slot, " out of range"));
    }
  }
  int widest = 0;
  for (size_t i = 0; i < l.views.size(); ++i) {
    const int rank = l.views[i].rank;
    widest = std::max(widest, (rank + 7) / 8 * 8);
    const int layer = static_cast<int>(i / (kLoraSites * slots));
    const auto site = static_cast<LoraSite>(i / slots % kLoraSites);
    const bool mlp = site == LoraSite::kGateUp || site == LoraSite::kDown;
    if (rank > 0 && mlp && c.is_moe_layer(layer)) {
      return LoraError(absl::StrCat("lora: layer ", layer,
                                    " is a mixture-of-experts layer without a dense MLP"));
    }
  }
  if (l.scratch.size() < kernels::cpu::LoraScratchFloats(l.groups->num_rows(), widest)) {
    return LoraError("lora: scratch too small");
  }
  return absl::OkStatus();
}

// y += each adapted row's LoRA delta on one projection (x: the projection's input rows).
void AddLora(const ForwardBatch& b, int layer, LoraSite site, const float* x, int64_t x_stride,
             int in, float* y, int64_t y_stride) {
  const LoraRows* l = b.lora;
  if (l == nullptr || l->groups->empty()) return;
  const size_t slots = static_cast<size_t>(l->num_slots);
  const size_t first =
      (static_cast<size_t>(layer) * kLoraSites + static_cast<size_t>(site)) * slots;
  kernels::cpu::LoraShrinkExpand(*l->groups, l->views.subspan(first, slots), x, x_stride, in, y,
                                 y_stride, l->scratch);
}

}  // namespace kvserve::model
