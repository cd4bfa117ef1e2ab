// RoPE frequencies after a config's rope scaling, and the factor the rotated q and k carry
// (cos and sin are both multiplied by it, as Hugging Face's attention_scaling does, so
// every score is scaled by its square):
//
//   kind      inv_freq[f] (f < rotary_dim / 2, b = base^(2f / rotary_dim))     factor
//   none      1 / b                                                              1
//   linear    1 / (factor b)                                                     1
//   llama3    1 / b, wavelengths past original/low_freq_factor divided by       1
//             factor, smooth blend down to original/high_freq_factor
//   yarn      ramp between 1 / (factor b) and 1 / b over the correction range  attention_factor, or
//             of [beta_fast, beta_slow] rotations in the original context      0.1 ln(factor) + 1 (mscale)
//   dynamic   1 / b' with b' = base ((factor L / L0) - (factor - 1))^(d/(d-2))   1
//   longrope  1 / (ext[f] b), ext = long_factor if L > L0 else short_factor     sqrt(1 + ln(s) / ln L0),
//                                                                                s = max_pos / L0
//
// L is the served context (ModelConfig::served_context) and L0 the original context.
// dynamic and longrope change with the sequence length in Hugging Face (the frequencies of
// one forward call depend on its longest sequence, so cached keys and new keys disagree
// once a sequence crosses L0). A paged cache needs one table per model, so both are fixed
// here for the longest sequence the server admits (L): exactly Hugging Face's frequencies
// whenever L <= L0, and the frequencies Hugging Face uses at the full served length
// otherwise. docs/models.md states it.
#pragma once

#include <vector>

#include "model/model_config.h"

namespace kvserve::model {

struct RopeTable {
  std::vector<float> inv_freq;  // [rotary_dim / 2]
  float attention_factor = 1.0f;
};

// The table for `base` (rope_theta, or Gemma 3's rope_local_base_freq with `scaled` false:
// its local layers rotate without the global layers' scaling).
RopeTable ComputeRopeTable(const ModelConfig& config, double base, bool scaled);

}  // namespace kvserve::model
