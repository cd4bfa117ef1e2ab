// The kernels' type table (repack.h): one line per ggml block type.
#include <array>

#include "kernels/cpu/quant/repack.h"

namespace kvserve::kernels::cpu::quant {
namespace {

using kvserve::quant::BlockType;
using C = Codes;
using S = Scales;

constexpr std::array<TypeEntry, 18> kTable = {{
    // type, name, block elements, block bytes, panel format (codes, scales, kD offset), pack, generic
    {BlockType::kQ4_0, "Q4_0", 32, 18, {C::kNib, S::kD, -8.0f}, &PackQ4_0, false},
    {BlockType::kQ4_1, "Q4_1", 32, 20, {C::kNib, S::kDM}, &PackQ4_1, false},
    {BlockType::kQ5_0, "Q5_0", 32, 22, {C::kNibHi1, S::kD, -16.0f}, &PackQ5_0, false},
    {BlockType::kQ5_1, "Q5_1", 32, 24, {C::kNibHi1, S::kDM}, &PackQ5_1, false},
    {BlockType::kQ8_0, "Q8_0", 32, 34, {C::kBytes, S::kD, -128.0f}, &PackQ8_0, false},
    {BlockType::kIQ4_NL, "IQ4_NL", 32, 18, {C::kBytes, S::kD, -128.0f}, &PackIq4Nl, true},
    {BlockType::kMXFP4, "MXFP4", 32, 17, {C::kBytes, S::kF32}, &PackMxfp4, true},
    {BlockType::kQ4_K, "Q4_K", 256, 144, {C::kNib, S::kK}, &PackQ4_K, false},
    {BlockType::kQ5_K, "Q5_K", 256, 176, {C::kNibHi1, S::kK}, &PackQ5_K, false},
    {BlockType::kQ6_K, "Q6_K", 256, 210, {C::kNibHi2, S::kQ6}, &PackQ6_K, false},
    {BlockType::kQ2_K, "Q2_K", 256, 84, {C::kBytes, S::kF32}, &PackQ2_K, true},
    {BlockType::kQ3_K, "Q3_K", 256, 110, {C::kBytes, S::kF32}, &PackQ3_K, true},
    {BlockType::kIQ4_XS, "IQ4_XS", 256, 136, {C::kBytes, S::kF32}, &PackIq4Xs, true},
    // Ours: Hugging Face integer groups (quant/blocks/grouped_int.cc), f32 a and b per 32.
    {BlockType::kU4_F32, "U4_F32", 32, 24, {C::kNib, S::kAB}, &PackU4F32, false},
    {BlockType::kU8_F32, "U8_F32", 32, 40, {C::kBytes, S::kAB}, &PackU8F32, false},
    // Dense segments: run by packed_linear's fp32 / fp16 / bf16 kernels (no activation rounding).
    {BlockType::kF32, "F32", 1, 4, {C::kBytes, S::kF32}, nullptr, false},
    {BlockType::kF16, "F16", 1, 2, {C::kBytes, S::kF32}, nullptr, false},
    {BlockType::kBF16, "BF16", 1, 2, {C::kBytes, S::kF32}, nullptr, false},
}};

}  // namespace

const TypeEntry* FindTypeEntry(BlockType type) {
  for (const TypeEntry& e : kTable)
    if (e.type == type) return &e;
  return nullptr;
}

}  // namespace kvserve::kernels::cpu::quant
