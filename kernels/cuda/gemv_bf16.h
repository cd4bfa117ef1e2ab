// Skinny bf16 linear layers (decode at small batch) without cuBLAS: y = x · Wᵀ (+ y) for at most
// kMaxGemvRows rows, bf16 x and W, fp32 accumulation and output; the layout of gemm.h.
// cuBLAS picks tensor-core tiles for these shapes that read the weights at 55-85% of copy
// bandwidth on an H200 (docs/benchmarks.md); a decode step at batch 1 is nothing but weight
// reads, so one warp per output row of W streams it with 16-byte loads instead. Plain C++
// header; CublasGemm::Linear calls it where it applies.
#pragma once

#include <cstdint>

namespace kvserve::kernels::cuda {

inline constexpr int kMaxGemvRows = 8;

// True when GemvBf16 takes this shape: 1 <= rows <= kMaxGemvRows, in and x_stride multiples
// of 8 and x, w 16-byte aligned (each lane loads 8 bf16 at a time).
bool GemvBf16Applies(const void* x, int64_t x_stride, const void* w, int64_t rows, int in);

// Launches on `stream` (a cudaStream_t); returns 0 or a cudaError_t value.
int GemvBf16(const uint16_t* x, int64_t x_stride, const uint16_t* w, float* y, int64_t y_stride, int64_t rows, int in,
             int out, bool accumulate, void* stream);

}  // namespace kvserve::kernels::cuda
