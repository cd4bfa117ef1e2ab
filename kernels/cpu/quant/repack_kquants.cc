// Pack functions of the 256-element types (quantized-weights.md §2.3); block kb of a row is
// sub-block kb % 8 of super-block kb / 8. Q4_K, Q5_K and Q6_K keep their super-block structure
// (unit fields: the f16 d/dmin; per block the source's 6-bit / 8-bit sub-scales as bytes);
// Q2_K, Q3_K and IQ4_XS go to the generic scheme (f32 a and b per 16 elements).
#include <cstring>

#include "kernels/cpu/quant/repack.h"

#include "kernels/cpu/kv_quant.h"  // HalfToFloat

namespace kvserve::kernels::cpu::quant {
namespace {

// Q4_K / Q5_K sub-block j's 6-bit scale and min (get_scale_min_k4).
void ScaleMinK4(int j, const std::byte* q, uint8_t* sc, uint8_t* mn) {
  if (j < 4) {
    *sc = Byte(q, j) & 63;
    *mn = Byte(q, j + 4) & 63;
  } else {
    *sc = static_cast<uint8_t>((Byte(q, j + 4) & 0x0F) | ((Byte(q, j - 4) >> 6) << 4));
    *mn = static_cast<uint8_t>((Byte(q, j + 4) >> 4) | ((Byte(q, j) >> 6) << 4));
  }
}

// Q4_K (hi_bits = false) and Q5_K (true): 144 / 176 bytes per super-block.
void PackK45(const std::byte* row, int64_t kb, int r, uint8_t* code, uint8_t* unit, uint8_t* sc,
             bool hi_bits) {
  const int block_bytes = hi_bits ? 176 : 144;
  const int qs_at = hi_bits ? 48 : 16;
  const std::byte* b = row + (kb / 8) * block_bytes;
  const int sb = static_cast<int>(kb % 8);
  StoreU16(unit, r, LoadU16(b));           // d
  StoreU16(unit + 32, r, LoadU16(b + 2));  // dmin
  ScaleMinK4(sb, b + 4, &sc[r], &sc[16 + r]);
  const int chunk = sb / 2, shift = 4 * (sb % 2);
  for (int l = 0; l < 32; ++l) {
    uint8_t v = static_cast<uint8_t>((Byte(b, qs_at + 32 * chunk + l) >> shift) & 15);
    if (hi_bits) v = static_cast<uint8_t>(v | ((Byte(b, 16 + l) >> sb) & 1) << 4);
    code[l] = v;
  }
}

// Q3_K's 6-bit scale i (0..15), minus 32.
int ScaleQ3K(int i, const std::byte* s) {
  const int low = i < 8 ? Byte(s, i) & 15 : Byte(s, i - 8) >> 4;
  const int high = (Byte(s, 8 + i % 4) >> (2 * (i / 4))) & 3;
  return (low | high << 4) - 32;
}

// The generic scheme's scale fields for row r: a and b per 16-element half h.
void PutGeneric(uint8_t* sc, int r, int h, float a, float b) {
  StoreF32(sc, 16 * h + r, a);
  StoreF32(sc, 32 + 16 * h + r, b);
}

}  // namespace

void PackQ4_K(const std::byte* row, int64_t kb, int r, uint8_t* code, uint8_t* unit, uint8_t* sc) {
  PackK45(row, kb, r, code, unit, sc, false);
}
void PackQ5_K(const std::byte* row, int64_t kb, int r, uint8_t* code, uint8_t* unit, uint8_t* sc) {
  PackK45(row, kb, r, code, unit, sc, true);
}

// Q6_K: 210 bytes: ql[128] | qh[64] | scales[16] (s8) | d. Sub-block sb = 4h + quarter.
void PackQ6_K(const std::byte* row, int64_t kb, int r, uint8_t* code, uint8_t* unit, uint8_t* sc) {
  const std::byte* b = row + (kb / 8) * 210;
  const int sb = static_cast<int>(kb % 8);
  StoreU16(unit, r, LoadU16(b + 208));
  const int h = sb / 4, quarter = sb % 4;
  sc[r] = Byte(b, 192 + 8 * h + 2 * quarter);
  sc[16 + r] = Byte(b, 192 + 8 * h + 1 + 2 * quarter);
  for (int l = 0; l < 32; ++l) {
    const uint8_t ql = Byte(b, 64 * h + 32 * (quarter % 2) + l);
    const int low = quarter < 2 ? ql & 15 : ql >> 4;
    const int high = (Byte(b, 128 + 32 * h + l) >> (2 * quarter)) & 3;
    code[l] = static_cast<uint8_t>(low | high << 4);
  }
}

// Q2_K: 84 bytes: scales[16] | qs[64] | d | dmin. Element 128n + 32j + l (l < 32) is
// (qs[32n + l] >> 2j) & 3 with scale byte scales[8n + 2j + l/16]; code = q, a = d*(sc&15),
// b = -(dmin*(sc>>4)).
void PackQ2_K(const std::byte* row, int64_t kb, int r, uint8_t* code, uint8_t*, uint8_t* sc) {
  const std::byte* b = row + (kb / 8) * 84;
  const int sb = static_cast<int>(kb % 8);
  const float d = HalfToFloat(LoadU16(b + 80)), dmin = HalfToFloat(LoadU16(b + 82));
  const int n = sb / 4, j = sb % 4;
  for (int l = 0; l < 32; ++l)
    code[l] = static_cast<uint8_t>((Byte(b, 16 + 32 * n + l) >> (2 * j)) & 3);
  for (int h = 0; h < 2; ++h) {
    const uint8_t s = Byte(b, 8 * n + 2 * j + h);
    PutGeneric(sc, r, h, d * static_cast<float>(s & 15), -(dmin * static_cast<float>(s >> 4)));
  }
}

// Q3_K: 110 bytes: hmask[32] | qs[64] | scales[12] | d. q = low2 - (hbit ? 0 : 4) in -4..3;
// code = q + 4, a = d*(sc-32), b = -4a.
void PackQ3_K(const std::byte* row, int64_t kb, int r, uint8_t* code, uint8_t*, uint8_t* sc) {
  const std::byte* b = row + (kb / 8) * 110;
  const int sb = static_cast<int>(kb % 8);
  const float d = HalfToFloat(LoadU16(b + 108));
  const int n = sb / 4, j = sb % 4;
  for (int l = 0; l < 32; ++l) {
    const int low = (Byte(b, 32 + 32 * n + l) >> (2 * j)) & 3;
    const int hbit = (Byte(b, l) >> (4 * n + j)) & 1;
    code[l] = static_cast<uint8_t>(low - (hbit ? 0 : 4) + 4);
  }
  for (int h = 0; h < 2; ++h) {
    const float a = d * static_cast<float>(ScaleQ3K(8 * n + 2 * j + h, b + 96));
    PutGeneric(sc, r, h, a, -4.0f * a);
  }
}

// IQ4_XS: 136 bytes: d | scales_h u16 | scales_l[4] | qs[128]; code = value + 128, a = d*(ls-32),
// b = -128a.
void PackIq4Xs(const std::byte* row, int64_t kb, int r, uint8_t* code, uint8_t*, uint8_t* sc) {
  const std::byte* b = row + (kb / 8) * 136;
  const int ib = static_cast<int>(kb % 8);
  const float d = HalfToFloat(LoadU16(b));
  const uint16_t scales_h = LoadU16(b + 2);
  const int ls =
      ((Byte(b, 4 + ib / 2) >> (4 * (ib % 2))) & 15) | (((scales_h >> (2 * ib)) & 3) << 4);
  const float a = d * static_cast<float>(ls - 32);
  for (int j = 0; j < 16; ++j) {
    const uint8_t q = Byte(b, 8 + 16 * ib + j);
    code[j] = static_cast<uint8_t>(kIq4Values[q & 15] + 128);
    code[16 + j] = static_cast<uint8_t>(kIq4Values[q >> 4] + 128);
  }
  for (int h = 0; h < 2; ++h) PutGeneric(sc, r, h, a, -128.0f * a);
}

}  // namespace kvserve::kernels::cpu::quant
