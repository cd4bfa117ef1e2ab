#include "model/device_weight_layout.h"

namespace kvserve::model {

DeviceWeightLayout PlanDeviceWeights(const ModelConfig& c, DeviceWeightDtype dtype) {
  DeviceWeightLayout w;
  w.dtype = dtype;
  const size_t wb = DeviceWeightDtypeBytes(dtype);
  size_t at = 0;
  auto take = [&at](size_t bytes) {
    const size_t off = at;
    at = (at + bytes + kDeviceWeightAlign - 1) / kDeviceWeightAlign * kDeviceWeightAlign;
    return off;
  };
  const auto d = static_cast<size_t>(c.hidden_size);
  const auto v = static_cast<size_t>(c.vocab_size);
  const auto inter = static_cast<size_t>(c.intermediate_size);
  const auto qkv_rows = static_cast<size_t>(c.q_size() + 2 * c.kv_size());
  const auto q = static_cast<size_t>(c.q_size());
  w.embed = take(v * d * sizeof(float));
  w.final_norm = take(d * sizeof(float));
  w.lm_head = take(v * d * wb);
  w.layers.resize(static_cast<size_t>(c.num_layers));
  auto aligned = [](size_t bytes) {
    return (bytes + kDeviceWeightAlign - 1) / kDeviceWeightAlign * kDeviceWeightAlign;
  };
  for (size_t i = 0; i < w.layers.size(); ++i) {
    DeviceLayerOffsets& l = w.layers[i];
    l.input_norm = take(d * sizeof(float));
    l.qkv = take(qkv_rows * d * wb);
    if (c.qkv_bias) l.qkv_bias = take(qkv_rows * sizeof(float));
    if (c.qk_norm) {
      l.q_norm = take(static_cast<size_t>(c.head_dim) * sizeof(float));
      l.k_norm = take(static_cast<size_t>(c.head_dim) * sizeof(float));
    }
    if (c.attention_sinks) l.sinks = take(static_cast<size_t>(c.num_heads) * sizeof(float));
    l.o = take(d * q * wb);
    if (c.o_bias) l.o_bias = take(d * sizeof(float));
    l.post_norm = take(d * sizeof(float));
    if (c.sandwich_norms) {
      l.post_attn_norm = take(d * sizeof(float));
      l.post_ff_norm = take(d * sizeof(float));
    }
    if (!c.is_moe_layer(static_cast<int>(i))) {
      l.gate_up = take(2 * inter * d * wb);
      l.down = take(d * inter * wb);
      continue;
    }
    const auto experts = static_cast<size_t>(c.moe.num_experts);
    const auto ie = static_cast<size_t>(c.moe.intermediate_size);
    l.router = take(experts * d * sizeof(float));  // fp32: routing as the CPU computes it
    l.expert_gate_up_stride = aligned(2 * ie * d * wb);
    l.expert_gate_up = take(experts * l.expert_gate_up_stride);
    l.expert_down_stride = aligned(d * ie * wb);
    l.expert_down = take(experts * l.expert_down_stride);
    if (c.moe.router_bias) l.router_bias = take(experts * sizeof(float));
    if (c.moe.expert_bias) {
      l.expert_gate_up_bias_stride = aligned(2 * ie * sizeof(float));
      l.expert_gate_up_bias = take(experts * l.expert_gate_up_bias_stride);
      l.expert_down_bias_stride = aligned(d * sizeof(float));
      l.expert_down_bias = take(experts * l.expert_down_bias_stride);
    }
  }
  w.total_bytes = at;
  return w;
}

}  // namespace kvserve::model
