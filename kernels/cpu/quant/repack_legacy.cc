// Pack functions of the 32-element types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, MXFP4): block
// kb of a row is the source block kb. Element order from quantized-weights.md §2.2: byte
// qs[j] holds element j (low nibble) and j + 16 (high nibble); Q5's fifth bit of element i is
// bit i of the little-endian u32 qh.
#include <cstring>

#include "kernels/cpu/quant/repack.h"

namespace kvserve::kernels::cpu::quant {
namespace {

// Nibble codes of a 16-byte qs field into code[0..31].
void Nibbles(const std::byte* qs, uint8_t* code) {
  for (int j = 0; j < 16; ++j) {
    code[j] = Byte(qs, j) & 15;
    code[j + 16] = Byte(qs, j) >> 4;
  }
}

void AddHighBits(const std::byte* qh_field, uint8_t* code) {
  uint32_t qh;
  std::memcpy(&qh, qh_field, 4);
  for (int i = 0; i < 32; ++i) code[i] = static_cast<uint8_t>(code[i] | ((qh >> i) & 1) << 4);
}

}  // namespace

void PackQ4_0(const std::byte* row, int64_t kb, int r, uint8_t* code, uint8_t*, uint8_t* sc) {
  const std::byte* b = row + kb * 18;
  StoreU16(sc, r, LoadU16(b));
  Nibbles(b + 2, code);
}

void PackQ4_1(const std::byte* row, int64_t kb, int r, uint8_t* code, uint8_t*, uint8_t* sc) {
  const std::byte* b = row + kb * 20;
  StoreU16(sc, r, LoadU16(b));
  StoreU16(sc + 32, r, LoadU16(b + 2));
  Nibbles(b + 4, code);
}

void PackQ5_0(const std::byte* row, int64_t kb, int r, uint8_t* code, uint8_t*, uint8_t* sc) {
  const std::byte* b = row + kb * 22;
  StoreU16(sc, r, LoadU16(b));
  Nibbles(b + 6, code);
  AddHighBits(b + 2, code);
}

void PackQ5_1(const std::byte* row, int64_t kb, int r, uint8_t* code, uint8_t*, uint8_t* sc) {
  const std::byte* b = row + kb * 24;
  StoreU16(sc, r, LoadU16(b));
  StoreU16(sc + 32, r, LoadU16(b + 2));
  Nibbles(b + 8, code);
  AddHighBits(b + 4, code);
}

// Q8_0: code = q + 128 (unsigned for vpdpbusd), b = -128 d.
void PackQ8_0(const std::byte* row, int64_t kb, int r, uint8_t* code, uint8_t*, uint8_t* sc) {
  const std::byte* b = row + kb * 34;
  StoreU16(sc, r, LoadU16(b));
  for (int i = 0; i < 32; ++i) code[i] = static_cast<uint8_t>(Byte(b, 2 + i) ^ 0x80);
}

// IQ4_NL: code = kIq4Values[n] + 128, b = -128 d.
void PackIq4Nl(const std::byte* row, int64_t kb, int r, uint8_t* code, uint8_t*, uint8_t* sc) {
  const std::byte* b = row + kb * 18;
  StoreU16(sc, r, LoadU16(b));
  uint8_t n[32];
  Nibbles(b + 2, n);
  for (int i = 0; i < 32; ++i) code[i] = static_cast<uint8_t>(kIq4Values[n[i]] + 128);
}

// MXFP4 (generic scheme): code = doubled E2M1 value + 12 in 0..24, a = 2^(e-128) built as
// ggml builds it (float bits; e = 0, 1 are subnormals), b = -12 a.
void PackMxfp4(const std::byte* row, int64_t kb, int r, uint8_t* code, uint8_t*, uint8_t* sc) {
  static constexpr int8_t kValues[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
  const std::byte* b = row + kb * 17;
  const uint32_t e = Byte(b, 0);
  const uint32_t bits = e < 2 ? 0x00200000u << e : (e - 1) << 23;
  float a;
  std::memcpy(&a, &bits, 4);
  uint8_t n[32];
  Nibbles(b + 1, n);
  for (int i = 0; i < 32; ++i) code[i] = static_cast<uint8_t>(kValues[n[i]] + 12);
  for (int h = 0; h < 2; ++h) {
    StoreF32(sc, 16 * h + r, a);
    StoreF32(sc, 32 + 16 * h + r, -12.0f * a);
  }
}

}  // namespace kvserve::kernels::cpu::quant
