// One PEFT LoRA adapter loaded for one base model, stored per target of OUR stacked layout
// (lora_targets.h) in the form the grouped kernels read (kernels/cpu/lora_sgmv.h):
//
//   directory:  adapter_config.json       (peft_config.h: refusals, r / alpha / patterns)
//               adapter_model.safetensors keys base_model.model.<module>.lora_{A,B}.weight
//                                         A [r_m][in], B [out_m][r_m] (PyTorch order)
//   per target: a_t [in][round_up(R, 8)]  R = Σ r_m over the target's adapted modules, in row
//                                         order; column block of module m = A_mᵀ, pad = 0
//               per adapted module: b_t [r_m][out_m] = (scale_m · B_m)ᵀ, writing output rows
//                                         [out_begin_m, out_begin_m + out_m) of the target
//   e.g. Llama q_proj + v_proj at r 8: qkv target R = 16, slices {q rows, t[0,8)}, {v rows,
//   t[8,16)}; Phi-3's qkv_proj: one slice over all rows.
//
// A file of BF16 tensors stays bf16 (half the bytes; the kernels widen exactly) and each
// slice carries scale_m (alpha_m / r_m, or / sqrt(r_m) with rsLoRA) apart, applied to the
// shrink result; any other file (F32, F16) is widened to fp32 with scale_m multiplied into B
// once, in double, then rounded to fp32.
//
// Refused at load, naming what is wrong: everything peft_config.h refuses; tensors of DoRA
// (lora_magnitude_vector), a lora_B bias, embedding adapters (lora_embedding_A/B) and
// lm_head / embed_tokens targets ("not supported"); whole-module tensors (modules_to_save);
// modules the base model does not have; A or B without its partner; a shape that disagrees
// with the base or with the configured rank (tensor, expected, got); r > max_lora_rank;
// the pickle adapter_model.bin.
//
// Identity: digest() is SHA-256 over the canonical config text (peft_config.h) and every
// tensor's name, dtype, shape and raw bytes in name order: two adapters with the same
// digest compute the same deltas; a reload of the same name with new weights has a new one
// (prefix-cache keys use it, never the name).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/cpu/lora_sgmv.h"
#include "lora/lora_targets.h"
#include "lora/peft_config.h"

namespace kvserve::lora {

struct AdapterDigest {
  std::array<uint8_t, 32> sha256 = {};
  // The first 8 bytes, little-endian: the 64-bit key the prefix cache mixes in.
  uint64_t key64() const;
  std::string hex() const;
  bool operator==(const AdapterDigest&) const = default;
};

struct AdapterLoadOptions {
  int max_lora_rank = 16;
};

class Adapter {
 public:
  // Loads <dir>/adapter_config.json and <dir>/adapter_model.safetensors for the model whose
  // targets are `targets`.
  static absl::StatusOr<std::shared_ptr<const Adapter>> Load(const std::string& dir,
                                                             const TargetTable& targets,
                                                             const AdapterLoadOptions& options);

  const std::string& dir() const { return dir_; }
  const PeftConfig& config() const { return config_; }
  const AdapterDigest& digest() const { return digest_; }
  // The kernel view of target i (rank 0: the adapter leaves that projection alone).
  const kernels::cpu::LoraWeightsView& view(int target) const {
    return views_[static_cast<size_t>(target)];
  }
  int num_targets() const { return static_cast<int>(views_.size()); }
  // Largest R (Σ module ranks on one target): the width of the kernels' scratch rows.
  int max_target_rank() const { return max_target_rank_; }
  // Largest rank of one module.
  int max_module_rank() const { return max_module_rank_; }
  // Adapts some expert of a mixture-of-experts layer.
  bool touches_experts() const { return touches_experts_; }
  int num_modules() const { return num_modules_; }
  size_t bytes() const {
    return storage_.size() * sizeof(float) + storage16_.size() * sizeof(uint16_t);
  }
  // Weights held as bf16 (the file's tensors are all BF16), else fp32.
  bool bf16() const { return bf16_; }

  Adapter(const Adapter&) = delete;
  Adapter& operator=(const Adapter&) = delete;

 private:
  Adapter() = default;
  std::string dir_;
  PeftConfig config_;
  AdapterDigest digest_;
  std::vector<float> storage_;       // every a_t and b_t (fp32), or
  std::vector<uint16_t> storage16_;  // every a_t and b_t (bf16)
  std::vector<kernels::cpu::LoraSliceWeights> slices_;
  std::vector<kernels::cpu::LoraWeightsView> views_;  // [targets]
  int max_target_rank_ = 0;
  int max_module_rank_ = 0;
  int num_modules_ = 0;
  bool touches_experts_ = false;
  bool bf16_ = false;
};

}  // namespace kvserve::lora
