#include "lora/lora_step.h"

#include <algorithm>

#include "base/check.h"

namespace kvserve::lora {

namespace {

// The projection kind of each forward site (model::LoraSite order).
constexpr ProjectionKind kSiteKinds[model::kLoraSites] = {
    ProjectionKind::kQkv, ProjectionKind::kO, ProjectionKind::kGateUp, ProjectionKind::kDown};
constexpr ProjectionKind kExpertKinds[2] = {ProjectionKind::kExpertGateUp,
                                            ProjectionKind::kExpertDown};

// q | k | v is the widest stack: three modules of at most max_lora_rank each.
int ScratchWidth(int max_lora_rank) { return (3 * max_lora_rank + 7) / 8 * 8; }

}  // namespace

LoraStep::LoraStep(const TargetTable& targets, int max_loras, int max_lora_rank, int64_t max_rows)
    : targets_(targets),
      num_layers_(targets.num_layers()),
      num_experts_(targets.num_experts()),
      max_loras_(max_loras),
      max_rows_(max_rows) {
  KVS_CHECK(max_loras >= 1 && max_loras < 32768 && max_rows >= 1);
  const size_t slots = static_cast<size_t>(max_loras), layers = static_cast<size_t>(num_layers_);
  slots_.assign(slots, nullptr);
  views_.assign(layers * model::kLoraSites * slots, {});
  expert_views_.assign(layers * 2 * static_cast<size_t>(num_experts_) * slots, {});
  row_slots_.reserve(static_cast<size_t>(max_rows));
  scratch_.assign(kernels::cpu::LoraScratchFloats(max_rows, ScratchWidth(max_lora_rank)), 0.0f);
  groups_.Reserve(max_rows, max_loras);
}

void LoraStep::Clear() {
  const size_t stride = static_cast<size_t>(max_loras_);
  for (int s = 0; s < used_; ++s) {
    slots_[static_cast<size_t>(s)] = nullptr;
    for (size_t i = static_cast<size_t>(s); i < views_.size(); i += stride) views_[i] = {};
    for (size_t i = static_cast<size_t>(s); i < expert_views_.size(); i += stride)
      expert_views_[i] = {};
  }
  used_ = 0;
  row_slots_.clear();
}

int LoraStep::SlotFor(const Adapter& adapter) {
  for (int s = 0; s < used_; ++s) {
    if (slots_[static_cast<size_t>(s)] == &adapter) return s;
  }
  if (used_ == max_loras_) return -1;
  KVS_CHECK(adapter.num_targets() == targets_.size(), "adapter loaded for another model");
  const int s = used_++;
  slots_[static_cast<size_t>(s)] = &adapter;
  const size_t slots = static_cast<size_t>(max_loras_);
  auto view = [&](int t) { return t >= 0 ? adapter.view(t) : kernels::cpu::LoraWeightsView{}; };
  for (int layer = 0; layer < num_layers_; ++layer) {
    for (int site = 0; site < model::kLoraSites; ++site) {
      const size_t i =
          (static_cast<size_t>(layer) * model::kLoraSites + static_cast<size_t>(site)) * slots;
      views_[i + static_cast<size_t>(s)] = view(targets_.Index(layer, kSiteKinds[site]));
    }
    if (!adapter.touches_experts()) continue;
    for (int m = 0; m < 2; ++m) {
      for (int e = 0; e < num_experts_; ++e) {
        const size_t i = ((static_cast<size_t>(layer) * 2 + static_cast<size_t>(m)) *
                              static_cast<size_t>(num_experts_) +
                          static_cast<size_t>(e)) *
                         slots;
        expert_views_[i + static_cast<size_t>(s)] = view(targets_.Index(layer, kExpertKinds[m], e));
      }
    }
  }
  return s;
}

void LoraStep::AddRows(int slot, int64_t n) {
  KVS_CHECK(slot >= -1 && slot < used_);
  KVS_CHECK(static_cast<int64_t>(row_slots_.size()) + n <= max_rows_);
  row_slots_.insert(row_slots_.end(), static_cast<size_t>(n), static_cast<int16_t>(slot));
}

const model::LoraRows* LoraStep::Finish() {
  if (used_ == 0) return nullptr;
  groups_.Build(row_slots_, max_loras_);
  if (groups_.empty()) return nullptr;
  rows_.groups = &groups_;
  rows_.row_slots = row_slots_;
  rows_.num_slots = max_loras_;
  rows_.views = views_;
  rows_.expert_views = expert_views_;
  rows_.scratch = scratch_;
  return &rows_;
}

}  // namespace kvserve::lora
