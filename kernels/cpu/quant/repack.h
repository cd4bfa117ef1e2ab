// The kernels' type table: for each ggml block type, the panel format its weights are
// repacked into (panel_format.h) and the function that repacks one block of a row. Adding a type =
// a pack function (repack_*.cc) + one line in type_table.cc.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/quant/panel_format.h"
#include "quant/block_type.h"

namespace kvserve::kernels::cpu::quant {

// Repacks 32-element block `kb` of one source row, which is row r (0..15) of its panel:
// writes the 32 codes, the row's scale fields of the block (at `scales`, ScaleBytes) and, for
// kK/kQ6, the row's unit fields (at `unit`; each block of a unit writes the same values).
// Padding rows and padding blocks are left zero by the caller (they contribute 0).
using PackBlockFn = void (*)(const std::byte* row, int64_t kb, int r, uint8_t* code, uint8_t* unit,
                             uint8_t* scales);

struct TypeEntry {
  kvserve::quant::BlockType type;
  const char* name;
  int block_elements;
  int block_bytes;
  PanelFormat format;
  PackBlockFn pack;  // nullptr: a dense type (F32/F16/BF16) run by packed_linear
  bool generic;      // true: a slower path (byte codes: 8.5-12 bits per weight streamed)
};

// nullptr for a type no kernel runs.
const TypeEntry* FindTypeEntry(kvserve::quant::BlockType type);

// ---- helpers for pack functions ----
inline uint16_t LoadU16(const std::byte* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
inline void StoreU16(uint8_t* dst, int i, uint16_t v) { std::memcpy(dst + 2 * i, &v, 2); }
inline void StoreF32(uint8_t* dst, int i, float v) { std::memcpy(dst + 4 * i, &v, 4); }
inline uint8_t Byte(const std::byte* p, int i) { return static_cast<uint8_t>(p[i]); }

// ggml's IQ4_NL / IQ4_XS non-linear code values.
inline constexpr int8_t kIq4Values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                          1,    13,   25,  38,  53,  69,  89,  113};

void PackQ4_0(const std::byte* row, int64_t kb, int r, uint8_t* code, uint8_t* unit, uint8_t* sc);
void PackQ4_1(const std::byte* row, int64_t kb, int r, uint8_t* code, uint8_t* unit, uint8_t* sc);
void PackQ5_0(const std::byte* row, int64_t kb, int r, uint8_t* code, uint8_t* unit, uint8_t* sc);
void PackQ5_1(const std::byte* row, int64_t kb, int r, uint8_t* code, uint8_t* unit, uint8_t* sc);
void PackQ8_0(const std::byte* row, int64_t kb, int r, uint8_t* code, uint8_t* unit, uint8_t* sc);
void PackIq4Nl(const std::byte* row, int64_t kb, int r, uint8_t* code, uint8_t* unit, uint8_t* sc);
void PackMxfp4(const std::byte* row, int64_t kb, int r, uint8_t* code, uint8_t* unit, uint8_t* sc);
void PackQ4_K(const std::byte* row, int64_t kb, int r, uint8_t* code, uint8_t* unit, uint8_t* sc);
void PackQ5_K(const std::byte* row, int64_t kb, int r, uint8_t* code, uint8_t* unit, uint8_t* sc);
void PackQ6_K(const std::byte* row, int64_t kb, int r, uint8_t* code, uint8_t* unit, uint8_t* sc);
void PackQ2_K(const std::byte* row, int64_t kb, int r, uint8_t* code, uint8_t* unit, uint8_t* sc);
void PackQ3_K(const std::byte* row, int64_t kb, int r, uint8_t* code, uint8_t* unit, uint8_t* sc);
void PackU4F32(const std::byte* row, int64_t kb, int r, uint8_t* code, uint8_t* unit, uint8_t* sc);
void PackU8F32(const std::byte* row, int64_t kb, int r, uint8_t* code, uint8_t* unit, uint8_t* sc);
void PackIq4Xs(const std::byte* row, int64_t kb, int r, uint8_t* code, uint8_t* unit, uint8_t* sc);

}  // namespace kvserve::kernels::cpu::quant
