// The projections of a base model that a LoRA adapter may target, in OUR stacked layout,
// derived from the checkpoint map (model/checkpoint_map.h) so that no architecture is named
// here: every PEFT module is a Hugging Face tensor name without ".weight", and the map says
// which stacked projection it feeds and at which rows.
//
//   target (layer 3, kQkv), in = D, out = q + 2 kv:
//     out rows  [0, q)        module model.layers.3.self_attn.q_proj   (slice 0)
//               [q, q+kv)     module model.layers.3.self_attn.k_proj   (slice 1)
//               [q+kv, out)   module model.layers.3.self_attn.v_proj   (slice 2)
//   Phi-3: one slice model.layers.3.self_attn.qkv_proj covering [0, out), likewise gate_up.
//
// Accepted module names (all architectures kvserve loads): <layer>.self_attn.{q,k,v,o}_proj,
// <layer>.self_attn.qkv_proj (Phi-3), <layer>.mlp.{gate,up,down}_proj, <layer>.mlp.gate_up_proj
// (Phi-3), and per-expert Linear modules: <layer>.block_sparse_moe.experts.<e>.{w1,w3,w2}
// (Mixtral: gate, up, down) and <layer>.mlp.experts.<e>.{gate,up,down}_proj (Qwen3-MoE), where
// <layer> = model.layers.<i>. Not targetable: embeddings, lm_head, routers, norms, and
// gpt-oss's fused 3-D expert tensors (PEFT's target_parameters).
//
// Target order (the index adapters store their weights by):
//   dense layer i:  first(i) + {0: qkv, 1: o, 2: gate_up, 3: down}
//   MoE layer i:    first(i) + {0: qkv, 1: o, 2 + 2e: expert e gate_up, 3 + 2e: expert e down}
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "model/model_config.h"

namespace kvserve::lora {

enum class ProjectionKind : uint8_t { kQkv, kO, kGateUp, kDown, kExpertGateUp, kExpertDown };
std::string_view ProjectionKindName(ProjectionKind k);

struct TargetSlice {
  std::string module;  // PEFT module name, e.g. "model.layers.3.self_attn.k_proj"
  int out_begin = 0;   // first output row of the stacked projection this module writes
  int out_rows = 0;
};

struct Target {
  int layer = 0;
  ProjectionKind kind = ProjectionKind::kQkv;
  int expert = -1;                  // experts only
  int in = 0;                       // input features
  int out = 0;                      // output rows of the stacked projection
  std::vector<TargetSlice> slices;  // in row order, tiling [0, out)
};

class TargetTable {
 public:
  static TargetTable ForModel(const model::ModelConfig& config);

  const std::vector<Target>& targets() const { return targets_; }
  int size() const { return static_cast<int>(targets_.size()); }
  // The target index, or -1 when the layer has no such projection (or it is not targetable).
  int Index(int layer, ProjectionKind kind, int expert = 0) const;
  // (target index, slice index) of a PEFT module name; null when the model has no such
  // targetable module.
  struct ModuleRef {
    int target = -1;
    int slice = -1;
  };
  const ModuleRef* FindModule(std::string_view module) const;
  const std::string& architecture() const { return architecture_; }
  // Experts per mixture-of-experts layer; 0 for a dense model.
  int num_experts() const { return num_experts_; }
  int num_layers() const { return static_cast<int>(layer_first_.size()) - 1; }

 private:
  std::vector<Target> targets_;
  std::vector<int> layer_first_;  // [num_layers + 1]
  std::vector<uint8_t> layer_moe_;
  absl::flat_hash_map<std::string, ModuleRef> modules_;
  std::string architecture_;
  int num_experts_ = 0;
};

}  // namespace kvserve::lora
