// Float64 reference decoders (see reference_decoders.h). Written per element: for element i of
// a block, find its fields from the layout description, then evaluate the value formula with
// R() after each step in ggml's order. Arithmetic (/, %) rather than the library's shifts.
#include "tests/unit/quant/reference_decoders.h"

#include <cmath>
#include <cstring>

namespace kvserve::quant::testing {
namespace {

uint16_t U16(const uint8_t* p) { return static_cast<uint16_t>(p[0] + 256 * p[1]); }
int Low4(uint8_t b) { return b % 16; }
int High4(uint8_t b) { return b / 16; }
int Top2(uint8_t b) { return b / 64; }
int Low6(uint8_t b) { return b % 64; }
// Bit k of a byte (0 or 1).
int Bit(uint8_t b, int k) { return (b >> k) % 2; }

// Q4_K / Q5_K: sub-block j's 6-bit scale and min from the 12 packed bytes.
void ScaleMin6(const uint8_t* s, int j, int* sc, int* mn) {
  if (j < 4) {
    *sc = Low6(s[j]);
    *mn = Low6(s[j + 4]);
  } else {
    *sc = Low4(s[j + 4]) + 16 * Top2(s[j - 4]);
    *mn = High4(s[j + 4]) + 16 * Top2(s[j]);
  }
}

}  // namespace

double RefFp16(uint16_t h) {
  const int sign = h / 32768, e = (h / 1024) % 32, m = h % 1024;
  const double mag = e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25);
  return sign ? -mag : mag;
}

double RefBf16(uint16_t h) {
  const int sign = h / 32768, e = (h / 128) % 256, m = h % 128;
  const double mag = e == 0 ? std::ldexp(m, -133) : std::ldexp(128 + m, e - 134);
  return sign ? -mag : mag;
}

// Q8_0: [d f16 | qs[32] int8]; y = q * d.
void RefDecodeQ8_0(const uint8_t* blk, float* out) {
  const double d = RefFp16(U16(blk));
  for (int i = 0; i < 32; ++i) {
    const int q = blk[2 + i] < 128 ? blk[2 + i] : blk[2 + i] - 256;
    out[i] = R(q * d);
  }
}

// Q4_K: [d | dmin | scales[12] | qs[128]]; y = d1*q - m1, d1 = d*sc, m1 = dmin*mn.
void RefDecodeQ4_K(const uint8_t* blk, float* out) {
  const double d = RefFp16(U16(blk)), dmin = RefFp16(U16(blk + 2));
  const uint8_t* scales = blk + 4;
  const uint8_t* qs = blk + 16;
  for (int i = 0; i < 256; ++i) {
    const int chunk = i / 64, upper = (i % 64) / 32, l = i % 32;
    const uint8_t byte = qs[32 * chunk + l];
    const int q = upper ? High4(byte) : Low4(byte);
    int sc, mn;
    ScaleMin6(scales, 2 * chunk + upper, &sc, &mn);
    const float d1 = R(d * sc), m1 = R(dmin * mn);
    out[i] = R(static_cast<double>(R(static_cast<double>(d1) * q)) - m1);
  }
}

// Q6_K: [ql[128] | qh[64] | scales[16] int8 | d]; y = (d*sc)*q, q = 6-bit code - 32.
void RefDecodeQ6_K(const uint8_t* blk, float* out) {
  const uint8_t* ql = blk;
  const uint8_t* qh = blk + 128;
  const uint8_t* scales = blk + 192;
  const double d = RefFp16(U16(blk + 208));
  for (int i = 0; i < 256; ++i) {
    const int half = i / 128, quarter = (i % 128) / 32, l = i % 32;
    const uint8_t low_byte = ql[64 * half + 32 * (quarter % 2) + l];
    const int low = quarter < 2 ? Low4(low_byte) : High4(low_byte);
    const int high =
        Bit(qh[32 * half + l], 2 * quarter) + 2 * Bit(qh[32 * half + l], 2 * quarter + 1);
    const int q = low + 16 * high - 32;
    const int sc = scales[i / 16] < 128 ? scales[i / 16] : scales[i / 16] - 256;
    out[i] = R(static_cast<double>(R(d * sc)) * q);
  }
}

}  // namespace kvserve::quant::testing
