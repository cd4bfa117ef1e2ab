// Pack functions of our grouped-integer types U4_F32 / U8_F32 (quant/blocks/grouped_int.cc):
// block kb of a row is the source block kb; a and b are copied bit for bit into the kAB
// scale fields (panel_format.h), the codes are the stored unsigned codes.
#include <cstring>

#include "kernels/cpu/quant/repack.h"

namespace kvserve::kernels::cpu::quant {
namespace {

void CopyAB(const std::byte* b, int r, uint8_t* sc) {
  std::memcpy(sc + 4 * r, b, 4);
  std::memcpy(sc + 64 + 4 * r, b + 4, 4);
}

}  // namespace

void PackU4F32(const std::byte* row, int64_t kb, int r, uint8_t* code, uint8_t*, uint8_t* sc) {
  const std::byte* b = row + kb * 24;
  CopyAB(b, r, sc);
  for (int j = 0; j < 16; ++j) {
    code[j] = Byte(b, 8 + j) & 15;
    code[j + 16] = Byte(b, 8 + j) >> 4;
  }
}

void PackU8F32(const std::byte* row, int64_t kb, int r, uint8_t* code, uint8_t*, uint8_t* sc) {
  const std::byte* b = row + kb * 40;
  CopyAB(b, r, sc);
  for (int i = 0; i < 32; ++i) code[i] = Byte(b, 8 + i);
}

}  // namespace kvserve::kernels::cpu::quant
