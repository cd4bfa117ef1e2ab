#include "model/checkpoint_map.h"

#include <numeric>

#include "absl/strings/str_cat.h"

namespace kvserve::model {

int64_t WeightSpec::rows() const {
  return std::accumulate(row_counts.begin(), row_counts.end(), int64_t{0});
}

namespace {

WeightSpec Vec(std::string name, int64_t n) { return WeightSpec{{std::move(name)}, {n}, 1}; }
WeightSpec Norm(std::string name, int64_t n) { return WeightSpec{{std::move(name)}, {n}, 1, true}; }
WeightSpec Mat(std::string name, int64_t rows, int64_t cols) {
  return WeightSpec{{std::move(name)}, {rows}, cols};
}

// A slice of a fused gpt-oss expert tensor (checkpoint_map.h, FusedLayout).
WeightSpec FusedSlice(std::string name, int64_t rows, int64_t cols, FusedLayout layout, int expert,
                      int experts, bool interleaved) {
  WeightSpec s{{std::move(name)}, {rows}, cols};
  s.fused.layout = layout;
  s.fused.expert = expert;
  s.fused.num_experts = experts;
  s.fused.interleaved_gate_up = interleaved;
  return s;
}

// The router and experts of a mixture-of-experts layer, prefix `p` ("model.layers.<i>.").
void MapExperts(const ModelConfig& c, const std::string& p, LayerWeightSpecs& l) {
  const int64_t d = c.hidden_size, ie = c.moe.intermediate_size;
  const int e = c.moe.num_experts;
  l.experts.resize(static_cast<size_t>(e));
  switch (c.architecture) {
    case Architecture::kMixtral:  // block_sparse_moe: w1 gate, w3 up, w2 down
      l.router = Mat(p + "block_sparse_moe.gate.weight", e, d);
      for (int x = 0; x < e; ++x) {
        const std::string ep = absl::StrCat(p, "block_sparse_moe.experts.", x, ".");
        l.experts[static_cast<size_t>(x)].gate_up =
            WeightSpec{{ep + "w1.weight", ep + "w3.weight"}, {ie, ie}, d};
        l.experts[static_cast<size_t>(x)].down = Mat(ep + "w2.weight", d, ie);
      }
      break;
    case Architecture::kQwen3Moe:
      l.router = Mat(p + "mlp.gate.weight", e, d);
      for (int x = 0; x < e; ++x) {
        const std::string ep = absl::StrCat(p, "mlp.experts.", x, ".");
        l.experts[static_cast<size_t>(x)].gate_up =
            WeightSpec{{ep + "gate_proj.weight", ep + "up_proj.weight"}, {ie, ie}, d};
        l.experts[static_cast<size_t>(x)].down = Mat(ep + "down_proj.weight", d, ie);
      }
      break;
    default: {  // gpt-oss: mlp.router (+ bias), fused experts with biases
      l.router = Mat(p + "mlp.router.weight", e, d);
      l.router_bias = Vec(p + "mlp.router.bias", e);
      if (c.moe.split_experts) {  // GGUF: per-expert gate, up, down and biases
        for (int x = 0; x < e; ++x) {
          const std::string ep = absl::StrCat(p, "mlp.experts.", x, ".");
          ExpertWeightSpecs& s = l.experts[static_cast<size_t>(x)];
          s.gate_up = WeightSpec{{ep + "gate_proj.weight", ep + "up_proj.weight"}, {ie, ie}, d};
          s.down = Mat(ep + "down_proj.weight", d, ie);
          s.gate_up_bias = WeightSpec{{ep + "gate_proj.bias", ep + "up_proj.bias"}, {ie, ie}, 1};
          s.down_bias = Vec(ep + "down_proj.bias", d);
        }
        break;
      }
      const std::string gu = p + "mlp.experts.gate_up_proj", dn = p + "mlp.experts.down_proj";
      for (int x = 0; x < e; ++x) {
        ExpertWeightSpecs& s = l.experts[static_cast<size_t>(x)];
        if (c.moe.mxfp4) {
          s.gate_up = FusedSlice(gu + "_blocks", 2 * ie, d, FusedLayout::kMxfp4, x, e, true);
          s.gate_up.fused.scales_name = gu + "_scales";
          s.down = FusedSlice(dn + "_blocks", d, ie, FusedLayout::kMxfp4, x, e, false);
          s.down.fused.scales_name = dn + "_scales";
        } else {
          s.gate_up = FusedSlice(gu, 2 * ie, d, FusedLayout::kInputMajor, x, e, true);
          s.down = FusedSlice(dn, d, ie, FusedLayout::kInputMajor, x, e, false);
        }
        s.gate_up_bias = FusedSlice(gu + "_bias", 2 * ie, 1, FusedLayout::kVectors, x, e, true);
        s.down_bias = FusedSlice(dn + "_bias", d, 1, FusedLayout::kVectors, x, e, false);
      }
      break;
    }
  }
}

}  // namespace

CheckpointMap MapCheckpoint(const ModelConfig& c) {
  const int64_t d = c.hidden_size, q = c.q_size(), kv = c.kv_size(), inter = c.intermediate_size;
  const int64_t vocab = c.vocab_size, hd = c.head_dim;
  CheckpointMap m;
  m.embed = Mat("model.embed_tokens.weight", vocab, d);
  m.final_norm = Norm("model.norm.weight", d);
  m.lm_head = c.tie_word_embeddings ? m.embed : Mat("lm_head.weight", vocab, d);
  const bool fused = c.architecture == Architecture::kPhi3;  // qkv_proj and gate_up_proj
  for (int i = 0; i < c.num_layers; ++i) {
    const std::string p = absl::StrCat("model.layers.", i, ".");
    LayerWeightSpecs l;
    l.input_norm = Norm(p + "input_layernorm.weight", d);
    if (fused) {
      l.qkv = Mat(p + "self_attn.qkv_proj.weight", q + 2 * kv, d);
    } else {
      l.qkv = WeightSpec{{p + "self_attn.q_proj.weight", p + "self_attn.k_proj.weight",
                          p + "self_attn.v_proj.weight"},
                         {q, kv, kv},
                         d};
    }
    if (c.qkv_bias) {
      l.qkv_bias = WeightSpec{
          {p + "self_attn.q_proj.bias", p + "self_attn.k_proj.bias", p + "self_attn.v_proj.bias"},
          {q, kv, kv},
          1};
    }
    if (c.qk_norm) {
      l.q_norm = Norm(p + "self_attn.q_norm.weight", hd);
      l.k_norm = Norm(p + "self_attn.k_norm.weight", hd);
    }
    l.o = Mat(p + "self_attn.o_proj.weight", d, q);
    if (c.o_bias) l.o_bias = Vec(p + "self_attn.o_proj.bias", d);
    if (c.sandwich_norms) {
      l.post_attn_norm = Norm(p + "post_attention_layernorm.weight", d);
      l.pre_ff_norm = Norm(p + "pre_feedforward_layernorm.weight", d);
      l.post_ff_norm = Norm(p + "post_feedforward_layernorm.weight", d);
    } else {
      l.pre_ff_norm = Norm(p + "post_attention_layernorm.weight", d);
    }
    if (c.attention_sinks) l.sinks = Vec(p + "self_attn.sinks", c.num_heads);
    if (c.is_moe_layer(i)) {
      MapExperts(c, p, l);
    } else if (fused) {
      l.gate_up = Mat(p + "mlp.gate_up_proj.weight", 2 * inter, d);
      l.down = Mat(p + "mlp.down_proj.weight", d, inter);
    } else {
      l.gate_up =
          WeightSpec{{p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"}, {inter, inter}, d};
      l.down = Mat(p + "mlp.down_proj.weight", d, inter);
    }
    m.layers.push_back(std::move(l));
  }
  return m;
}

}  // namespace kvserve::model
