// Linear layers straight from quantized weight blocks (llama.cpp's block types, quant/), the
// quantized counterpart of packed_linear.h:
//
//   y[rows][out] (=|+=) x[rows][in] · w[out][in]ᵀ + bias[out]
//
// A QuantMatrix is built once at load time from the file's rows of blocks and repacked into
// the layout its kernel wants (the bytes of the file are not kept). It is a stack of
// segments, each a range of output rows of one block type, because llama.cpp's presets mix
// types inside what we run as one GEMM (Q4_K_M: attn_q and attn_k Q4_K, attn_v Q6_K, stacked
// into our qkv):
//
//   segment 0: rows [0, q+k)       Q4_K  ─┐ one QuantLinear call walks the segments and
//   segment 1: rows [q+k, q+k+v)   Q6_K  ─┘ writes each into its own output columns
//
// Numerics: activations may be quantized (int8 per block) for integer dot products; the
// header of each kernel states the error bound that costs, and tests/unit/kernels/quant
// check every type against a float64 product of x and the dequantized weights within it.
// Here: quantized segments are repacked into 16-row interleaved panels and run by AVX-512
// VNNI kernels (else AVX2, else portable; one per process) on int8 activations, layout and error
// bound in panel_format.h; F32/F16/BF16 segments run packed_linear.h's fp32 kernels (no activation
// rounding). Scratch (the quantized activations) is per calling thread and reused: no
// allocation per call once a thread has seen its largest shape.
// A row's result never depends on the other rows of the batch (batch invariance), and the
// same process always picks the same kernel for a type.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "quant/block_type.h"

namespace kvserve::kernels::cpu::quant {

// One segment's source: `rows` rows of `in` elements of `type`, row r at data + r * row_stride.
struct QuantSource {
  kvserve::quant::BlockType type;
  const std::byte* data = nullptr;
  int64_t rows = 0;
  int64_t row_stride = 0;  // bytes; RowBytes(type, in) for a dense tensor
  // Optional input order (quantized types only): stored column k multiplies x[input_order[k]],
  // a permutation of [0, in). GPTQ act-order files group input columns out of order; their
  // columns are stored sorted by group (model/hf_quant_weights.h) and the activations are
  // gathered by the same permutation per call (one quantized copy per distinct order,
  // into the per-thread scratch). Copied at Pack; null: columns in input order.
  const int32_t* input_order = nullptr;
};

class QuantMatrix {
 public:
  // Repacks the segments (stacked along the output dimension, in order) of a matrix with
  // `in` input features. InvalidArgument naming the type when `in` is not a multiple of its
  // block size, or a type no kernel runs.
  static absl::StatusOr<QuantMatrix> Pack(std::span<const QuantSource> segments, int64_t in);

  QuantMatrix(QuantMatrix&&) noexcept;
  QuantMatrix& operator=(QuantMatrix&&) noexcept;
  ~QuantMatrix();

  int64_t out_features() const;
  int64_t in_features() const;
  size_t bytes() const;  // repacked bytes held (what a batch-1 step streams)

  // Opaque to callers: the repacked segments.
  struct Impl;
  const Impl& impl() const { return *impl_; }

 private:
  explicit QuantMatrix(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// y (=|+=) x · wᵀ + bias. x: [rows][x_stride] floats, y: [rows][y_stride]; bias [out] or null.
// Runs on the calling thread's compute team (kernels/cpu/compute_pool.h).
void QuantLinear(const float* x, int64_t x_stride, const QuantMatrix& w, const float* bias,
                 float* y, int64_t y_stride, int64_t rows, bool accumulate);

// The kernel a type runs on this CPU ("avx512-vnni", "avx2", "portable", ...), for logs and
// benchmarks.
const char* QuantKernelName(kvserve::quant::BlockType type);

namespace internal {
// QuantLinear with the portable kernels (and packed_linear's portable dense kernels) on any
// CPU, so tests cover them on AVX-512 machines too.
void QuantLinearPortable(const float* x, int64_t x_stride, const QuantMatrix& w, const float* bias,
                         float* y, int64_t y_stride, int64_t rows, bool accumulate);
// The AVX2 kernels (quantized segments; dense ones run packed_linear's default), for tests on
// AVX-512 machines; only when HasAvx2Kernels().
bool HasAvx2Kernels();
void QuantLinearAvx2(const float* x, int64_t x_stride, const QuantMatrix& w, const float* bias,
                     float* y, int64_t y_stride, int64_t rows, bool accumulate);
}  // namespace internal

}  // namespace kvserve::kernels::cpu::quant
