// Internal: each block type's dequantizer and quantizer (one file per type in this folder),
// which quant/block_table.cc lists. Everyone else goes through quant/block_type.h.
//
// Every function takes `n` elements (a multiple of the type's block size) and walks n / block
// blocks; none allocates. The output never overlaps the blocks (the definitions say so with
// __restrict, which lets the compiler vectorize loops that read bytes and write floats). Byte
// fields are little-endian as ggml writes them (the host must be little-endian too, checked below),
// and blocks have no alignment (GGUF packs them).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace kvserve::quant::blocks {

static_assert(std::endian::native == std::endian::little, "ggml blocks are little-endian");

inline uint16_t LoadU16(const std::byte* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void StoreU16(std::byte* p, uint16_t v) { std::memcpy(p, &v, sizeof v); }
inline uint32_t LoadU32(const std::byte* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void StoreU32(std::byte* p, uint32_t v) { std::memcpy(p, &v, sizeof v); }

#define KVSERVE_QUANT_DECLARE_BLOCK(Name)                                \
  void Dequantize##Name(const std::byte* blocks, float* out, int64_t n); \
  void Quantize##Name(const float* in, std::byte* blocks, int64_t n)

KVSERVE_QUANT_DECLARE_BLOCK(F32);
KVSERVE_QUANT_DECLARE_BLOCK(F16);
KVSERVE_QUANT_DECLARE_BLOCK(BF16);
KVSERVE_QUANT_DECLARE_BLOCK(Q4_0);
KVSERVE_QUANT_DECLARE_BLOCK(Q4_1);
KVSERVE_QUANT_DECLARE_BLOCK(Q5_0);
KVSERVE_QUANT_DECLARE_BLOCK(Q5_1);
KVSERVE_QUANT_DECLARE_BLOCK(Q8_0);
KVSERVE_QUANT_DECLARE_BLOCK(Q2_K);
KVSERVE_QUANT_DECLARE_BLOCK(Q3_K);
KVSERVE_QUANT_DECLARE_BLOCK(Q4_K);
KVSERVE_QUANT_DECLARE_BLOCK(Q5_K);
KVSERVE_QUANT_DECLARE_BLOCK(Q6_K);
KVSERVE_QUANT_DECLARE_BLOCK(IQ4_NL);
// Ours (grouped_int.cc): Hugging Face integer-quantized groups, w = a * code + b in fp32.
KVSERVE_QUANT_DECLARE_BLOCK(U4_F32);
KVSERVE_QUANT_DECLARE_BLOCK(U8_F32);
KVSERVE_QUANT_DECLARE_BLOCK(IQ4_XS);
KVSERVE_QUANT_DECLARE_BLOCK(MXFP4);

#undef KVSERVE_QUANT_DECLARE_BLOCK

}  // namespace kvserve::quant::blocks
