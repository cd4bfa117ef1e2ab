// MXFP4 (OCP microscaling FP4, ggml's layout): 32 elements in 17 bytes.
//
//   offset 0        1                                               17
//          [ e E8M0 | qs[16]: low nibble of qs[j] -> element j,       ]
//                             high nibble       -> element j + 16
//
//   nibble = sign bit (8) | 3-bit E2M1 magnitude; ggml decodes the doubled table
//   {0, 1, 2, 3, 4, 6, 8, 12, -0->0, -1, -2, -3, -4, -6, -8, -12} times 2^(e - 128) (built as
//   float bits: e = 0, 1 give binary32 denormals; e = 255 is 2^127, not NaN). Each product is
//   exact (a power of two times a small integer), so y = 2^(e - 127) * E2M1(q) exactly, or
//   inf where that overflows (e = 255 with |E2M1| >= 2).
//   Note: Hugging Face's gpt-oss checkpoints order the nibbles differently (low = even
//   element); this is ggml's order only.
//
// Quantizer: the digest's rule (ggml's reference): e = floor(log2 amax) - 2 + 127 (clamped to
// 0..254), nearest table entry per element (ties to the smaller magnitude). With
// s = 2^(e-127): the largest magnitude 6s is at least 0.75 amax, the widest gap 2s:
//   |x - y| <= amax / 4 + 2^-126.
#include <algorithm>
#include <bit>
#include <cmath>

#include "quant/blocks/blocks.h"

namespace kvserve::quant::blocks {
namespace {
constexpr int kBlock = 32;
constexpr int kBytes = 17;
constexpr int8_t kDoubled[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// 2^(e - 128) as ggml builds it (its "half" E8M0 scale, for the doubled table).
inline float HalfScale(uint8_t e) {
  const uint32_t bits = e < 2 ? (0x00200000u << e) : (static_cast<uint32_t>(e - 1) << 23);
  return std::bit_cast<float>(bits);
}

// Nearest doubled magnitude code (0..7) of v = |x| / 2^(e-128) (v >= 0).
inline int NearestMagnitude(double v) {
  int code = 0;
  for (int i = 1; i < 8; ++i) {
    code += v > 0.5 * (kDoubled[i - 1] + kDoubled[i]) ? 1 : 0;
  }
  return code;
}
}  // namespace

void DequantizeMXFP4(const std::byte* blocks, float* __restrict out, int64_t n) {
  for (int64_t b = 0; b < n / kBlock; ++b, blocks += kBytes, out += kBlock) {
    const float d = HalfScale(static_cast<uint8_t>(blocks[0]));
    const auto* qs = reinterpret_cast<const uint8_t*>(blocks + 1);
    float v[16];  // the 16 possible outputs (the same fp32 products), then a plain lookup
    for (int k = 0; k < 16; ++k) v[k] = static_cast<float>(kDoubled[k]) * d;
    for (int j = 0; j < 16; ++j) {
      out[j] = v[qs[j] & 15];
      out[j + 16] = v[qs[j] >> 4];
    }
  }
}

void QuantizeMXFP4(const float* in, std::byte* blocks, int64_t n) {
  for (int64_t b = 0; b < n / kBlock; ++b, blocks += kBytes, in += kBlock) {
    float amax = 0.0f;
    for (int j = 0; j < kBlock; ++j) amax = std::max(amax, std::fabs(in[j]));
    // ilogb is exact floor(log2) for finite nonzero values (denormals included).
    const int e = amax > 0.0f ? std::clamp(std::ilogb(amax) - 2 + 127, 0, 254) : 0;
    blocks[0] = static_cast<std::byte>(e);
    auto code = [e](float x) {
      const int mag = NearestMagnitude(std::ldexp(std::fabs(static_cast<double>(x)), 128 - e));
      return mag != 0 && x < 0.0f ? mag | 8 : mag;
    };
    auto* qs = reinterpret_cast<uint8_t*>(blocks + 1);
    for (int j = 0; j < 16; ++j) {
      qs[j] = static_cast<uint8_t>(code(in[j]) | (code(in[j + 16]) << 4));
    }
  }
}

}  // namespace kvserve::quant::blocks
