// Dense linear layer on weights packed once at load time into 16-output panels, with our own
// register-blocked kernels (AVX-512 when the CPU has it, picked at run time; a portable
// kernel otherwise):
//
//   y[rows][out] (=|+=) x[rows][in] · w[out][in]ᵀ + bias[out]
//
//   packed: panel p = outputs [16p, 16p + 16), stored k-major: [p][k][16]
//           ┌ k=0: w[16p..16p+15][0] ┐
//           │ k=1: w[16p..16p+15][1] │  one 64-byte vector per k; the tail panel is
//           └ ...                    ┘  zero-padded to 16 outputs
//
//   kernel: R rows x P panels of accumulators (R*P <= 24 vector registers); per k one load
//           per panel, one broadcast per row, R*P FMAs. Rows 1..4 use P = 4 (GEMV-like, enough
//           independent chains to hide FMA latency), more rows use P = 2 and R up to 12.
//
// Why our own and not OpenBLAS: the model's GEMMs are skinny (rows = tokens of the step,
// often 1..64) and OpenBLAS 0.3.21 runs its Haswell (AVX2) kernels on this CPU and re-packs
// the weights on every call; packing once and using the AVX-512 registers is measured in
// docs/benchmarks.md.
//
// Batch invariance and determinism: every output is the same sequential chain
//   acc = 0; for k in [0, in): acc = fma(x[k], w[o][k], acc);  y = acc (+ y) (+ bias)
// whatever R, P, the chunking or the thread count, so a row's result never depends on what
// else is in the batch. (The portable kernel uses separate multiply and add, compiled with
// -ffp-contract=off, so it is equally invariant; it differs from the AVX-512 kernel in the
// last bits, which is why PackedLinear picks one per process and sticks to it.)
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvserve::kernels::cpu {

inline constexpr int kPanelWidth = 16;

// Elements (floats, or 16-bit values for the bf16/fp16 variants) a packed [out][in] matrix takes.
size_t PackedLinearFloats(int out_features, int in_features);

// w: [out][in] row-major -> packed (PackedLinearFloats floats, 64-byte aligned for speed).
void PackLinearWeights(const float* w, int out_features, int in_features, float* packed);

// bf16 weights (raw bf16 bits, as checkpoints store them) packed the same way without any
// conversion: half the bytes to stream. The kernels widen each bf16 to fp32 exactly (a
// shift) and run the same fp32 FMA chain, so PackedLinearBf16 on bf16 weights equals
// PackedLinear on the same values held as fp32, bit for bit. (Not vdpbf16ps: that would
// round the activations to bf16 too.)
void PackLinearWeightsBf16(const uint16_t* w, int out_features, int in_features, uint16_t* packed);
void PackedLinearBf16(const float* x, int64_t x_stride, const uint16_t* packed, const float* bias, float* y,
                      int64_t y_stride, int64_t rows, int in_features, int out_features, bool accumulate);

// fp16 weights (raw IEEE half bits) likewise: packed as they are, widened exactly at run time
// (vcvtph2ps on AVX-512 CPUs, an exact bit conversion in the portable kernel), then the same
// fp32 chain: PackedLinearFp16 equals PackedLinear on the same values held as fp32, bit for bit.
void PackLinearWeightsFp16(const uint16_t* w, int out_features, int in_features, uint16_t* packed);
void PackedLinearFp16(const float* x, int64_t x_stride, const uint16_t* packed, const float* bias, float* y,
                      int64_t y_stride, int64_t rows, int in_features, int out_features, bool accumulate);

// Which kernel PackedLinear uses on this CPU ("avx512" or "portable").
const char* PackedLinearKernelName();

// x: [rows][x_stride]; y: [rows][y_stride]; bias: [out] or nullptr. Runs on the calling
// thread's compute team (compute_pool.h), cut into panel groups that depend on the shape only.
void PackedLinear(const float* x, int64_t x_stride, const float* packed, const float* bias, float* y,
                  int64_t y_stride, int64_t rows, int in_features, int out_features, bool accumulate);

namespace internal {
// The portable kernel on any CPU, so tests cover it on AVX-512 machines too.
void PackedLinearPortable(const float* x, int64_t x_stride, const float* packed, const float* bias, float* y,
                          int64_t y_stride, int64_t rows, int in_features, int out_features, bool accumulate);
void PackedLinearBf16Portable(const float* x, int64_t x_stride, const uint16_t* packed, const float* bias, float* y,
                              int64_t y_stride, int64_t rows, int in_features, int out_features, bool accumulate);
void PackedLinearFp16Portable(const float* x, int64_t x_stride, const uint16_t* packed, const float* bias, float* y,
                              int64_t y_stride, int64_t rows, int in_features, int out_features, bool accumulate);
}  // namespace internal

}  // namespace kvserve::kernels::cpu
