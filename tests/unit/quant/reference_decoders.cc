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

// Bit k of the little-endian bit string starting at p.
int BitAt(const uint8_t* p, int k) { return Bit(p[k / 8], k % 8); }

// The 4-bit code of element i (0..31) of a 32-element nibble array: qs[i] low nibble for
// i < 16, qs[i - 16] high nibble otherwise (Q4_0, Q4_1, Q5_*, IQ4_NL, MXFP4, IQ4_XS).
int Nibble32(const uint8_t* qs, int i) { return i < 16 ? Low4(qs[i]) : High4(qs[i - 16]); }

// Q2_K / Q3_K: the 2-bit low code of element i (qs = the 64-byte array).
int Low2K(const uint8_t* qs, int i) {
  const int half = i / 128, j = (i % 128) / 32, s = i % 32;
  return (qs[32 * half + s] >> (2 * j)) % 4;
}

constexpr int kIq4[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

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

int RefSixBitCodes(uint32_t ggml_type_id, const uint8_t* blk, int* codes) {
  switch (ggml_type_id) {
    case 12:    // Q4_K
    case 13: {  // Q5_K
      for (int j = 0; j < 8; ++j) ScaleMin6(blk + 4, j, &codes[j], &codes[8 + j]);
      return 16;
    }
    case 11: {  // Q3_K: low 4 bits from scales[i % 8] (low or high nibble), high 2 bits from
                // scales[8 + i % 4] at bit 2 * (i / 4)
      const uint8_t* s = blk + 96;
      for (int i = 0; i < 16; ++i) {
        codes[i] =
            (i < 8 ? Low4(s[i]) : High4(s[i - 8])) + 16 * ((s[8 + i % 4] >> (2 * (i / 4))) % 4);
      }
      return 16;
    }
    case 23: {  // IQ4_XS
      const int scales_h = U16(blk + 2);
      for (int ib = 0; ib < 8; ++ib) {
        const int low = ib % 2 ? High4(blk[4 + ib / 2]) : Low4(blk[4 + ib / 2]);
        codes[ib] = low + 16 * ((scales_h >> (2 * ib)) % 4);
      }
      return 8;
    }
    default:
      return 0;
  }
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

// Q4_0: [d | qs[16]]; y = (q - 8) * d.
void RefDecodeQ4_0(const uint8_t* blk, float* out) {
  const double d = RefFp16(U16(blk));
  for (int i = 0; i < 32; ++i) out[i] = R((Nibble32(blk + 2, i) - 8) * d);
}

// Q4_1: [d | m | qs[16]]; y = q * d + m.
void RefDecodeQ4_1(const uint8_t* blk, float* out) {
  const double d = RefFp16(U16(blk)), m = RefFp16(U16(blk + 2));
  for (int i = 0; i < 32; ++i) out[i] = R(static_cast<double>(R(Nibble32(blk + 4, i) * d)) + m);
}

// Q5_0: [d | qh u32 | qs[16]]; 5th bit of element i is bit i of qh; y = (q - 16) * d.
void RefDecodeQ5_0(const uint8_t* blk, float* out) {
  const double d = RefFp16(U16(blk));
  for (int i = 0; i < 32; ++i) {
    const int q = Nibble32(blk + 6, i) + 16 * BitAt(blk + 2, i);
    out[i] = R((q - 16) * d);
  }
}

// Q5_1: [d | m | qh u32 | qs[16]]; y = q * d + m.
void RefDecodeQ5_1(const uint8_t* blk, float* out) {
  const double d = RefFp16(U16(blk)), m = RefFp16(U16(blk + 2));
  for (int i = 0; i < 32; ++i) {
    const int q = Nibble32(blk + 8, i) + 16 * BitAt(blk + 4, i);
    out[i] = R(static_cast<double>(R(q * d)) + m);
  }
}

// Q2_K: [scales[16] | qs[64] | d | dmin]; y = dl * q - ml, dl = d * sc, ml = dmin * mn.
void RefDecodeQ2_K(const uint8_t* blk, float* out) {
  const double d = RefFp16(U16(blk + 80)), dmin = RefFp16(U16(blk + 82));
  for (int i = 0; i < 256; ++i) {
    const uint8_t sc = blk[i / 16];
    const float dl = R(d * Low4(sc)), ml = R(dmin * High4(sc));
    out[i] = R(static_cast<double>(R(static_cast<double>(dl) * Low2K(blk + 16, i))) - ml);
  }
}

// Q3_K: [hmask[32] | qs[64] | scales[12] | d]; y = (d * (u - 32)) * q.
void RefDecodeQ3_K(const uint8_t* blk, float* out) {
  const uint8_t* hmask = blk;
  const uint8_t* scales = blk + 96;
  const double d = RefFp16(U16(blk + 108));
  for (int i = 0; i < 256; ++i) {
    const int half = i / 128, j = (i % 128) / 32, s = i % 32;
    const int q = Low2K(blk + 32, i) - (Bit(hmask[s], 4 * half + j) ? 0 : 4);
    const int sub = i / 16;
    const int low = sub < 8 ? Low4(scales[sub]) : High4(scales[sub - 8]);
    int high = scales[8 + sub % 4];
    for (int k = 0; k < sub / 4; ++k) high /= 4;
    const int u = low + 16 * (high % 4);
    out[i] = R(static_cast<double>(R(d * (u - 32))) * q);
  }
}

// Q5_K: [d | dmin | scales[12] | qh[32] | qs[128]]; as Q4_K with a 5th bit from qh.
void RefDecodeQ5_K(const uint8_t* blk, float* out) {
  const double d = RefFp16(U16(blk)), dmin = RefFp16(U16(blk + 2));
  const uint8_t* scales = blk + 4;
  const uint8_t* qh = blk + 16;
  const uint8_t* qs = blk + 48;
  for (int i = 0; i < 256; ++i) {
    const int chunk = i / 64, upper = (i % 64) / 32, l = i % 32;
    const uint8_t byte = qs[32 * chunk + l];
    const int q = (upper ? High4(byte) : Low4(byte)) + 16 * Bit(qh[l], 2 * chunk + upper);
    int sc, mn;
    ScaleMin6(scales, 2 * chunk + upper, &sc, &mn);
    const float d1 = R(d * sc), m1 = R(dmin * mn);
    out[i] = R(static_cast<double>(R(static_cast<double>(d1) * q)) - m1);
  }
}

// IQ4_NL: [d | qs[16]]; y = d * kvalues[q].
void RefDecodeIQ4_NL(const uint8_t* blk, float* out) {
  const double d = RefFp16(U16(blk));
  for (int i = 0; i < 32; ++i) out[i] = R(d * kIq4[Nibble32(blk + 2, i)]);
}

// IQ4_XS: [d | scales_h u16 | scales_l[4] | qs[128]]; y = (d * (ls - 32)) * kvalues[q].
void RefDecodeIQ4_XS(const uint8_t* blk, float* out) {
  const double d = RefFp16(U16(blk));
  const int scales_h = U16(blk + 2);
  for (int i = 0; i < 256; ++i) {
    const int sub = i / 32;
    const int low = sub % 2 ? High4(blk[4 + sub / 2]) : Low4(blk[4 + sub / 2]);
    const int high = (scales_h >> (2 * sub)) % 4;
    const float dl = R(d * (low + 16 * high - 32));
    out[i] = R(static_cast<double>(dl) * kIq4[Nibble32(blk + 8 + 16 * sub, i % 32)]);
  }
}

// MXFP4: [e | qs[16]]; y = 2^(e - 127) * E2M1(q), E2M1 = sign bit 3, magnitudes
// {0, 0.5, 1, 1.5, 2, 3, 4, 6}. Exact in float64; R() rounds (only overflow can happen).
void RefDecodeMXFP4(const uint8_t* blk, float* out) {
  static constexpr double kE2M1[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  const int e = blk[0];
  for (int i = 0; i < 32; ++i) {
    const int code = Nibble32(blk + 1, i);
    const double mag = std::ldexp(kE2M1[code % 8], e - 127);
    out[i] = R(code > 8 ? -mag : mag);  // code 8 is +0 in ggml's integer table
  }
}

namespace {
double F32Field(const uint8_t* p) {
  float f;
  std::memcpy(&f, p, 4);
  return f;
}
}  // namespace

void RefDecodeU4_F32(const uint8_t* blk, float* out) {
  const double a = F32Field(blk), b = F32Field(blk + 4);
  for (int i = 0; i < 32; ++i) out[i] = R(static_cast<double>(R(Nibble32(blk + 8, i) * a)) + b);
}

void RefDecodeU8_F32(const uint8_t* blk, float* out) {
  const double a = F32Field(blk), b = F32Field(blk + 4);
  for (int i = 0; i < 32; ++i) out[i] = R(static_cast<double>(R(blk[8 + i] * a)) + b);
}

}  // namespace kvserve::quant::testing
