// The tensors of one Hugging Face integer-quantized module (AWQ, GPTQ, compressed-tensors;
// configuration in hf_quant_config.h, byte layouts in the digest quantized-weights.md §4.1-4.3)
// read into one form, and that form written as rows of the CPU kernels' blocks.
//
//   AWQ (GEMM)            qweight I32 [in][out/8]   nibble i of word c: output 8c +
//   {0,2,4,6,1,3,5,7}[i]
//                         qzeros  I32 [G][out/8]    same order; scales F16 [G][out]
//   GPTQ                  qweight I32 [in*b/32][out] packed along the input, sequentially
//                         qzeros  I32 [G][out*b/32]  packed along the output (v1: stored z - 1)
//                         scales  F16 [G][out]; g_idx I32 [in] (must be i / group, see below)
//   compressed-tensors    weight_packed I32 [out][in*b/32] (codes = signed + 2^(b-1));
//     pack-quantized      weight_scale [out][G]; weight_zero_point [out*b/32][G] packed
//                         along the output (asymmetric only); weight_shape [2]
//   compressed-tensors    weight I8 [out][in]; weight_scale [out][1 or G] (F32/BF16/F16);
//     int-quantized       weight_zero_point (optional)
//
//         │ ReadGroupedInt: codes unsigned, w = s * (code - z)
//         ▼
//   GroupedIntWeight  codes [out][in] u8, scales [out][G] f32 (the stored values exactly),
//                     zeros [out][G] int
//         │ WriteBlockRows: per 32-element block of each row (G divides into whole blocks)
//         ▼
//   Q4_0 / Q8_0 rows    when every zero is 8 / 128 and the scales are fp16: w = d * (code - 8)
//                       (4.5 / 8.5 bits per weight in the kernels' panels)
//   U4_F32 / U8_F32     otherwise: a = s, b = -z * s in f32 (exact for fp16/bf16 scales and
//                       zeros < 2^13; 6 / 10 bits per weight), quant/blocks/grouped_int.cc
//
// Act-order (GPTQ desc_act, compressed-tensors actorder "group") stores a g_idx that sends
// input elements to groups out of order. The columns are then stored sorted by group (stable:
// input_order[k] = the input element of stored column k), which makes every group contiguous,
// and the kernels gather the activations by input_order per call (QuantSource::input_order).
// Each group must hold exactly `group` elements (what GPTQ writes); otherwise refused naming
// the tensor. A g_idx equal to i / group (most desc_act=false files) is no permutation at all.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/hf_quant_config.h"
#include "model/safetensors.h"
#include "quant/block_type.h"

namespace kvserve::model {

// Which tensor names a quantized module `prefix` ("model.layers.0.mlp.up_proj") is stored under.
struct HfQuantModule {
  std::string prefix;
  int64_t out = 0;
  int64_t in = 0;
  quant::BlockType block = quant::BlockType::kU4_F32;  // what WriteBlockRows writes
  std::vector<int32_t> input_order;  // act-order: stored column k is input input_order[k]
};

struct GroupedIntWeight {
  int64_t out = 0, in = 0;
  int64_t group = 0;           // elements per group (in for one group per row)
  std::vector<uint8_t> codes;  // [out][in], columns in the module's input_order if it has one
  std::vector<float> scales;   // [out][in / group]
  std::vector<int32_t> zeros;  // [out][in / group]
  bool scales_fp16 = false;    // every scale was stored as fp16
};

// The module prefixes the checkpoint stores quantized (by their tensors' names: qweight,
// weight_packed, or an I8 weight with a weight_scale), sorted. Modules in the config's
// ignore / modules_to_not_convert list are stored unquantized and are not listed.
std::vector<std::string> FindHfQuantModules(const SafetensorsCheckpoint& ckpt,
                                            const HfQuantConfig& cfg);

// Checks every tensor of the module (dtypes, shapes, g_idx, zeros) without reading its codes,
// and picks its block type. InvalidArgument naming the tensor.
absl::StatusOr<HfQuantModule> InspectHfQuantModule(const SafetensorsCheckpoint& ckpt,
                                                   const HfQuantConfig& cfg,
                                                   const std::string& prefix);

absl::StatusOr<GroupedIntWeight> ReadGroupedInt(const SafetensorsCheckpoint& ckpt,
                                                const HfQuantConfig& cfg, const HfQuantModule& m);

// m.out rows of m.in / 32 blocks of m.block, back to back (RowBytes(m.block, m.in) each).
std::vector<std::byte> WriteBlockRows(const GroupedIntWeight& w, quant::BlockType block);

// The tensor names a quantized module's data is stored under (hidden behind its .weight).
std::vector<std::string> HfQuantComponentNames(const HfQuantConfig& cfg, const std::string& prefix);

}  // namespace kvserve::model
