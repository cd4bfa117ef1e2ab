#include "model/checkpoint_map.h"

#include <numeric>

#include "absl/strings/str_cat.h"

namespace kvserve::model {

int64_t WeightSpec::rows() const { return std::accumulate(row_counts.begin(), row_counts.end(), int64_t{0}); }

namespace {

WeightSpec Vec(std::string name, int64_t n) { return WeightSpec{{std::move(name)}, {n}, 1}; }
WeightSpec Norm(std::string name, int64_t n) { return WeightSpec{{std::move(name)}, {n}, 1, true}; }
WeightSpec Mat(std::string name, int64_t rows, int64_t cols) { return WeightSpec{{std::move(name)}, {rows}, cols}; }

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
      l.qkv = WeightSpec{{p + "self_attn.q_proj.weight", p + "self_attn.k_proj.weight", p + "self_attn.v_proj.weight"},
                         {q, kv, kv}, d};
    }
    if (c.qkv_bias) {
      l.qkv_bias = WeightSpec{{p + "self_attn.q_proj.bias", p + "self_attn.k_proj.bias", p + "self_attn.v_proj.bias"},
                              {q, kv, kv}, 1};
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
    if (fused) {
      l.gate_up = Mat(p + "mlp.gate_up_proj.weight", 2 * inter, d);
    } else {
      l.gate_up = WeightSpec{{p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"}, {inter, inter}, d};
    }
    l.down = Mat(p + "mlp.down_proj.weight", d, inter);
    m.layers.push_back(std::move(l));
  }
  return m;
}

}  // namespace kvserve::model
