// RoPE inverse frequencies and the attention factor (the multiplier HF applies to cos and
// sin) for one layer type and one forward of `seq_len` tokens, in double precision. Each
// type follows transformers' modeling_rope_utils.py (v5 semantics):
//   default   θ_i = b^(-2i/d)
//   linear    θ_i / factor
//   dynamic   b' = b·(factor·L/M − (factor − 1))^(d/(d−2)) when L = seq_len > M =
//             max_position_embeddings, else b (the no-cache forward: HF recomputes the base
//             from max(position_ids) + 1 each forward)
//   llama3    wavelength bands around L0/low_freq_factor and L0/high_freq_factor
//   yarn      ramp between β_fast and β_slow correction dims (floored/ceiled if truncate),
//             θ_i·γ + θ_i/factor·(1 − γ); attention factor 0.1·ln(factor) + 1, or
//             m(mscale)/m(mscale_all_dim), or an explicit attention_factor (arXiv 2309.00071)
//   longrope  θ_i / ext_i with ext = long_factor if seq_len > L0 else short_factor;
//             attention factor sqrt(1 + ln(s)/ln(L0)), s = factor (default max_pos / L0)
#pragma once

#include <cstdint>
#include <vector>

#include "tests/support/hf_models/reference_config.h"

namespace kvserve::testing::hf {

struct RopeTable {
  std::vector<double> inv_freq;  // rotary_dim / 2
  double attention_factor = 1.0;
};

RopeTable ComputeRope(const RopeParams& p, int64_t seq_len);

}  // namespace kvserve::testing::hf
