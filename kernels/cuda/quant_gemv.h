// Decode-time linear layers on group-quantized weights (W4A16, W8A16): y = x · Wᵀ (+ y) for at
// most kMaxGemvRows rows, bf16 or fp16 x, W in the layout of quant_weight_layout.h, fp32
// accumulation and output (the conventions of gemm.h), plus the dequantization to bf16/fp16
// that larger batches use before cuBLAS (quant_linear.h). Plain C++ header.
//
// Design (memory-bound: at batch <= 8 a step is nothing but weight reads): one warp per output
// row of W, or `split` warps per row when W has few long rows; each lane streams 16 bytes of
// codes per step (32 int4 or 16 int8 elements, always inside one group), turns the codes into
// floats in registers (masked under the exponent of 2^23, then one FMA: no int-to-float converts),
// multiplies by the row's activations (16-byte loads, kept in cache: every warp reads the same
// x), accumulates Σ x·(q - z) per 16-byte step and folds the group scale in once per step;
// shuffles reduce the warp, then the first warp of the row adds the parts in order
// (deterministic).
#pragma once

#include <cstdint>

#include "kernels/cuda/gemm.h"
#include "kernels/cuda/gemv_bf16.h"
#include "kernels/cuda/quant_weight_layout.h"

namespace kvserve::kernels::cuda {

// A group-quantized weight on the device: the three arrays of PackedGroupQuantWeight, copied as
// they are. codes 16-byte aligned; zeros null when !shape.has_zeros.
struct QuantWeightView {
  GroupQuantShape shape;
  const uint8_t* codes = nullptr;
  const uint16_t* scales = nullptr;
  const uint8_t* zeros = nullptr;
};

// True when QuantGemv takes this call: act bf16 or fp16, 1 <= rows <= kMaxGemvRows, a valid
// shape (ValidateGroupQuantShape), x_stride a multiple of 8, x and codes 16-byte aligned.
bool QuantGemvApplies(GemmDtype act, const void* x, int64_t x_stride, const QuantWeightView& w,
                      int64_t rows);

// Launches on `stream` (a cudaStream_t); returns 0 or a cudaError_t value.
int QuantGemv(GemmDtype act, const void* x, int64_t x_stride, const QuantWeightView& w, float* y,
              int64_t y_stride, int64_t rows, bool accumulate, void* stream);

// dst[o][i] = s·(q − z) as `dtype` (bf16 or fp16, round to nearest even; (q − z)·s is exact
// in fp32), dst row-major [out][in], 16-byte aligned. Returns 0 or a cudaError_t value.
int DequantizeGroupQuant(const QuantWeightView& w, GemmDtype dtype, void* dst, void* stream);

}  // namespace kvserve::kernels::cuda
