// Internal: the scale search shared by the K-quant quantizers (256-element super-blocks cut
// into 8 or 16 contiguous sub-blocks, each with a small integer scale under one fp16 super
// scale). Ours, not ggml's iterative search: each sub-block's range is covered exactly, so
// the error bound is simple and holds for every input.
//
// Affine (Q2_K, Q4_K, Q5_K):  y = (d*sc)*q - (dmin*mn),  q in [0, q_max], sc, mn in [0, scale_max]
//   1. lo_j = min(0, min x), hi_j = max x over sub-block j (the offset -dmin*mn is <= 0, so
//      a sub-block's represented range always contains 0).
//   2. dmin = fp16 rounded UP from max_j(-lo_j) / scale_max; mn_j = the smallest code with
//      dmin*mn_j >= -lo_j (so the bottom of the range is covered).
//   3. need_j = (hi_j + dmin*mn_j) / q_max; d = fp16 rounded up from max need_j / scale_max;
//      sc_j = the smallest code with (d*sc_j)*q_max - dmin*mn_j >= hi_j (top covered).
//   4. q = nearest code to (x + m1) / d1 with the fp32 d1 = d*sc_j, m1 = dmin*mn_j.
//   Nothing clips, so |x - y| <= d1/2 <= (need_j + d)/2 (+ fp32 ulps), with
//   need_j <= (hi_j - lo_j + dmin) / q_max. Per type in its file.
//   5. Then smaller scales (up to 12 of them, down to 0.75 sc_j) with mins mn_j - 2 .. mn_j + 1
//      are tried with nearest codes; the smallest squared error among those whose largest
//      error is no worse than step 4's wins (the bound stands; Gaussian RMS error drops by
//      10-25%).
//
// Symmetric (Q3_K, Q6_K):  y = (d*sc)*q,  q in [-(q_max+1), q_max],
//                          sc in [-(scale_max+1), scale_max]
//   s_j = amax_j / q_max; d = fp16 rounded up from max s_j / scale_max; the baseline sc_j =
//   the smallest code with d*sc_j >= s_j, so with codes in [-q_max, q_max] nothing clips and
//   |x - y| <= d1/2 <= (s_j + d)/2. Then integer scales from 0.7x to 1x of the baseline (up
//   to 12 per sign, both signs: the extra code -(q_max+1) makes the sides differ) are tried
//   with nearest codes; the smallest squared error among those whose largest error is no
//   worse than the baseline's wins. So the bound stands and typical data fits better.
//
// Either way, when every x is 0 all codes are 0 and d = dmin = 0: the block decodes to zeros.
#pragma once

#include <cstdint>

namespace kvserve::quant::blocks {

inline constexpr int kSuperBlock = 256;

struct AffineSuperBlock {
  uint16_t d = 0;     // fp16 bits
  uint16_t dmin = 0;  // fp16 bits
  uint8_t sc[16] = {};
  uint8_t mn[16] = {};
  uint8_t q[kSuperBlock] = {};  // element codes, in element order
};

struct SymmetricSuperBlock {
  uint16_t d = 0;              // fp16 bits
  int8_t sc[16] = {};          // in [-(scale_max + 1), scale_max]
  int8_t q[kSuperBlock] = {};  // element codes, in element order
};

// x: 256 finite floats; sub_count * sub_len == 256, sub_count <= 16.
// Q4_K / Q5_K's 12 scale bytes: eight 6-bit (sc, mn) pairs, sub-block j:
//   j < 4:  sc = s[j] & 63,                        mn = s[j+4] & 63
//   j >= 4: sc = (s[j+4] & 15) | (s[j-4] >> 6) << 4, mn = (s[j+4] >> 4) | (s[j] >> 6) << 4
inline void ScaleMinK4(const uint8_t* s, int j, float* sc, float* mn) {
  if (j < 4) {
    *sc = static_cast<float>(s[j] & 63);
    *mn = static_cast<float>(s[j + 4] & 63);
  } else {
    *sc = static_cast<float>((s[j + 4] & 15) | ((s[j - 4] >> 6) << 4));
    *mn = static_cast<float>((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
  }
}
inline void PackScaleMinK4(const AffineSuperBlock& sb, uint8_t* s) {
  for (int j = 0; j < 4; ++j) {
    s[j] = static_cast<uint8_t>(sb.sc[j] | ((sb.sc[j + 4] >> 4) << 6));
    s[j + 4] = static_cast<uint8_t>(sb.mn[j] | ((sb.mn[j + 4] >> 4) << 6));
    s[j + 8] = static_cast<uint8_t>((sb.sc[j + 4] & 15) | ((sb.mn[j + 4] & 15) << 4));
  }
}

void QuantizeAffineSuperBlock(const float* x, int sub_count, int scale_max, int q_max,
                              AffineSuperBlock* out);
void QuantizeSymmetricSuperBlock(const float* x, int sub_count, int scale_max, int q_max,
                                 SymmetricSuperBlock* out);

}  // namespace kvserve::quant::blocks
