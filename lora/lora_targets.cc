#include "lora/lora_targets.h"

#include "absl/strings/match.h"
#include "base/check.h"
#include "model/checkpoint_map.h"

namespace kvserve::lora {

std::string_view ProjectionKindName(ProjectionKind k) {
  switch (k) {
    case ProjectionKind::kQkv:
      return "qkv";
    case ProjectionKind::kO:
      return "o";
    case ProjectionKind::kGateUp:
      return "gate_up";
    case ProjectionKind::kDown:
      return "down";
    case ProjectionKind::kExpertGateUp:
      return "expert gate_up";
    case ProjectionKind::kExpertDown:
      return "expert down";
  }
  return "?";
}

namespace {

// A target from a stacked weight spec; a spec that is absent or a slice of a fused 3-D
// tensor (gpt-oss) yields a target without slices (not targetable).
Target FromSpec(const model::WeightSpec& spec, int layer, ProjectionKind kind, int expert) {
  Target t;
  t.layer = layer;
  t.kind = kind;
  t.expert = expert;
  if (!spec.present() || spec.fused.layout != model::FusedLayout::kNone) return t;
  t.in = static_cast<int>(spec.cols);
  int row = 0;
  for (size_t i = 0; i < spec.names.size(); ++i) {
    std::string module = spec.names[i];
    if (absl::EndsWith(module, ".weight")) module.resize(module.size() - 7);
    const int rows = static_cast<int>(spec.row_counts[i]);
    t.slices.push_back(TargetSlice{std::move(module), row, rows});
    row += rows;
  }
  t.out = row;
  return t;
}

}  // namespace

TargetTable TargetTable::ForModel(const model::ModelConfig& config) {
  TargetTable table;
  table.architecture_ = config.architecture_name;
  table.num_experts_ = config.any_moe_layer() ? config.moe.num_experts : 0;
  const model::CheckpointMap map = model::MapCheckpoint(config);
  for (int layer = 0; layer < static_cast<int>(map.layers.size()); ++layer) {
    const model::LayerWeightSpecs& l = map.layers[static_cast<size_t>(layer)];
    table.layer_first_.push_back(static_cast<int>(table.targets_.size()));
    table.layer_moe_.push_back(l.experts.empty() ? 0 : 1);
    table.targets_.push_back(FromSpec(l.qkv, layer, ProjectionKind::kQkv, -1));
    table.targets_.push_back(FromSpec(l.o, layer, ProjectionKind::kO, -1));
    if (l.experts.empty()) {
      table.targets_.push_back(FromSpec(l.gate_up, layer, ProjectionKind::kGateUp, -1));
      table.targets_.push_back(FromSpec(l.down, layer, ProjectionKind::kDown, -1));
    } else {
      for (int e = 0; e < static_cast<int>(l.experts.size()); ++e) {
        const model::ExpertWeightSpecs& x = l.experts[static_cast<size_t>(e)];
        table.targets_.push_back(FromSpec(x.gate_up, layer, ProjectionKind::kExpertGateUp, e));
        table.targets_.push_back(FromSpec(x.down, layer, ProjectionKind::kExpertDown, e));
      }
    }
  }
  table.layer_first_.push_back(static_cast<int>(table.targets_.size()));
  for (int i = 0; i < table.size(); ++i) {
    const Target& t = table.targets_[static_cast<size_t>(i)];
    for (int s = 0; s < static_cast<int>(t.slices.size()); ++s) {
      table.modules_.emplace(t.slices[static_cast<size_t>(s)].module, ModuleRef{i, s});
    }
  }
  return table;
}

int TargetTable::Index(int layer, ProjectionKind kind, int expert) const {
  if (layer < 0 || layer + 1 >= static_cast<int>(layer_first_.size())) return -1;
  const int first = layer_first_[static_cast<size_t>(layer)];
  const int end = layer_first_[static_cast<size_t>(layer) + 1];
  const bool moe = layer_moe_[static_cast<size_t>(layer)] != 0;
  int i = -1;
  switch (kind) {
    case ProjectionKind::kQkv:
      i = first;
      break;
    case ProjectionKind::kO:
      i = first + 1;
      break;
    case ProjectionKind::kGateUp:
      i = moe ? -1 : first + 2;
      break;
    case ProjectionKind::kDown:
      i = moe ? -1 : first + 3;
      break;
    case ProjectionKind::kExpertGateUp:
      i = moe ? first + 2 + 2 * expert : -1;
      break;
    case ProjectionKind::kExpertDown:
      i = moe ? first + 3 + 2 * expert : -1;
      break;
  }
  if (i < first || i >= end || targets_[static_cast<size_t>(i)].slices.empty()) return -1;
  return i;
}

const TargetTable::ModuleRef* TargetTable::FindModule(std::string_view module) const {
  auto it = modules_.find(absl::string_view(module.data(), module.size()));
  return it == modules_.end() ? nullptr : &it->second;
}

}  // namespace kvserve::lora
