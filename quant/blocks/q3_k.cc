// Q3_K: 256 elements in 110 bytes; sixteen sub-blocks of 16, each with a signed 6-bit scale.
//
//   offset 0           32        96           108     110
//          [ hmask[32] | qs[64]  | scales[12] | d f16 ]
//
//   Element e = 128n + 32j + s (n = 0, 1; j = 0..3; s = 0..31):
//     low 2 bits  = bits 2j, 2j+1 of qs[32n + s]       (as Q2_K)
//     high bit    = bit 4n + j of hmask[s]
//     q = low2 - (high ? 0 : 4), in -4..3
//   Scale of sub-block i (elements 16i .. 16i+15), 6 bits u, value u - 32:
//     low 4 bits  = scales[i] & 15 (i < 8), scales[i - 8] >> 4 (i >= 8)
//     high 2 bits = (scales[8 + i % 4] >> 2 * (i / 4)) & 3
//   y = dl * q with dl = d * (u - 32) rounded to fp32 (ggml's order).
//
// Quantizer: the symmetric scale search of k_quant_scales.h (q in -4..3, u - 32 in -32..31).
// Per sub-block i with a_i = max |x| over its 16 elements:
//   |x - y| <= a_i / 6 + amax / 180 + 2^-24   (amax over the whole super-block).
#include "quant/blocks/blocks.h"
#include "quant/blocks/k_quant_scales.h"
#include "quant/fp16.h"

namespace kvserve::quant::blocks {
namespace {
constexpr int kBytes = 110;

inline int ScaleCode(const uint8_t* s, int i) {
  const int low = i < 8 ? (s[i] & 15) : (s[i - 8] >> 4);
  const int high = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
  return low | (high << 4);
}
}  // namespace

void DequantizeQ3_K(const std::byte* blocks, float* __restrict out, int64_t n) {
  for (int64_t b = 0; b < n / kSuperBlock; ++b, blocks += kBytes, out += kSuperBlock) {
    const auto* hmask = reinterpret_cast<const uint8_t*>(blocks);
    const auto* qs = reinterpret_cast<const uint8_t*>(blocks + 32);
    const auto* scales = reinterpret_cast<const uint8_t*>(blocks + 96);
    const float d = Fp16ToFloat(LoadU16(blocks + 108));
    for (int i = 0; i < 16; ++i) {
      const float dl = d * static_cast<float>(ScaleCode(scales, i) - 32);
      const int half = i / 8, j = (i % 8) / 2, s0 = 16 * (i % 2);
      const uint8_t* q = qs + 32 * half + s0;
      const uint8_t* h = hmask + s0;
      const int shift = 2 * j, hbit = 4 * half + j;
      float* y = out + 16 * i;
      for (int l = 0; l < 16; ++l) {
        const int v = ((q[l] >> shift) & 3) - (((h[l] >> hbit) & 1) ? 0 : 4);
        y[l] = dl * static_cast<float>(v);
      }
    }
  }
}

void QuantizeQ3_K(const float* in, std::byte* blocks, int64_t n) {
  SymmetricSuperBlock sb;
  for (int64_t b = 0; b < n / kSuperBlock; ++b, blocks += kBytes, in += kSuperBlock) {
    QuantizeSymmetricSuperBlock(in, 16, 31, 3, &sb);
    auto* hmask = reinterpret_cast<uint8_t*>(blocks);
    auto* qs = reinterpret_cast<uint8_t*>(blocks + 32);
    auto* scales = reinterpret_cast<uint8_t*>(blocks + 96);
    for (int k = 0; k < 96; ++k) hmask[k] = 0;  // hmask and qs
    for (int e = 0; e < kSuperBlock; ++e) {
      const int half = e / 128, j = (e % 128) / 32, s = e % 32;
      const int q = sb.q[e];
      const int low = q >= 0 ? q : q + 4;
      qs[32 * half + s] |= static_cast<uint8_t>(low << (2 * j));
      if (q >= 0) hmask[s] |= static_cast<uint8_t>(1 << (4 * half + j));
    }
    for (int k = 0; k < 12; ++k) scales[k] = 0;
    for (int i = 0; i < 16; ++i) {
      const int u = sb.sc[i] + 32;
      scales[i % 8] |= static_cast<uint8_t>((u & 15) << (i < 8 ? 0 : 4));
      scales[8 + i % 4] |= static_cast<uint8_t>((u >> 4) << (2 * (i / 4)));
    }
    StoreU16(blocks + 108, sb.d);
  }
}

}  // namespace kvserve::quant::blocks
