// Where each tensor of a Llama-family model lives inside the device model's one weight
// allocation, in plain C++ (CPU tests check it; cuda/cuda_llama_model.cc follows it).
//
//   [embed fp32 V*D][final_norm fp32 D][lm_head W V*D]
//   per layer: [input_norm fp32 D][qkv W (H+2Hkv)hd*D][qkv_bias fp32?][q_norm fp32 hd?]
//              [k_norm fp32 hd?][sinks fp32 H?][o W D*H hd][o_bias fp32?][post_norm fp32 D]
//              [gate_up W 2I*D]
//              [down W D*I]          (q_norm, k_norm: Qwen3's per-head norms, ModelConfig::qk_norm)
//   a mixture-of-experts layer replaces [gate_up][down] with
//              [router fp32 E*D][E x gate_up W 2Ie*D][E x down W D*Ie]
//   (each expert's matrix starts at a multiple of kDeviceWeightAlign: expert e's gate_up is at
//   expert_gate_up + e * expert_gate_up_stride, likewise down).
//
// W is the projection dtype: bf16 when the checkpoint's projections are bf16 (the upload is
// then exact: LlamaWeights' fp32 copies are widened bf16), else fp32. Matrices are row-major
// [out][in] as in the checkpoint, which cuBLAS reads as a transposed column-major operand.
// The embedding stays fp32 (one row per token is gathered, the CPU model reads fp32 too);
// lm_head always gets its own copy in W, also when tied to the embedding, so the final GEMM
// has one dtype. Every piece starts at a multiple of kDeviceWeightAlign bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "model/model_config.h"

namespace kvserve::model {

enum class DeviceWeightDtype { kFp32, kBf16 };

inline constexpr size_t kDeviceWeightAlign = 256;

inline size_t DeviceWeightDtypeBytes(DeviceWeightDtype d) { return d == DeviceWeightDtype::kBf16 ? 2 : 4; }

// Byte offsets into the allocation; a bias offset is kNoTensor when the model has none.
inline constexpr size_t kNoTensor = static_cast<size_t>(-1);

struct DeviceLayerOffsets {
  size_t input_norm = 0, qkv = 0, qkv_bias = kNoTensor, q_norm = kNoTensor, k_norm = kNoTensor,
         sinks = kNoTensor, o = 0, o_bias = kNoTensor, post_norm = 0, gate_up = kNoTensor, down = kNoTensor;
  // Gemma's sandwich norms (fp32 D each): of the attention output and of the MLP output.
  size_t post_attn_norm = kNoTensor, post_ff_norm = kNoTensor;
  // Mixture-of-experts layers only (gate_up and down are then kNoTensor).
  size_t router = kNoTensor, expert_gate_up = kNoTensor, expert_down = kNoTensor;
  size_t expert_gate_up_stride = 0, expert_down_stride = 0;  // bytes between experts
  // gpt-oss's fp32 biases (MoeConfig::router_bias / expert_bias): [E], E x [2 Ie], E x [D],
  // each expert's at a multiple of kDeviceWeightAlign (strides in bytes).
  size_t router_bias = kNoTensor, expert_gate_up_bias = kNoTensor, expert_down_bias = kNoTensor;
  size_t expert_gate_up_bias_stride = 0, expert_down_bias_stride = 0;
};

struct DeviceWeightLayout {
  DeviceWeightDtype dtype = DeviceWeightDtype::kFp32;
  size_t embed = 0, final_norm = 0, lm_head = 0;
  std::vector<DeviceLayerOffsets> layers;
  size_t total_bytes = 0;
};

DeviceWeightLayout PlanDeviceWeights(const ModelConfig& config, DeviceWeightDtype dtype);

}  // namespace kvserve::model
