// An FP8 (e4m3fn) segment of a QuantMatrix: the codes of a Hugging Face FP8 checkpoint's
// projection (compressed-tensors float-quantized, or block-scaled `weight_scale_inv`), kept at
// 8 bits per weight in the panel layout of fp8_format.h, and the linear layer that runs it
// with fp32 activations. QuantMatrix::Pack builds one for a QuantSource with fp8_scales set;
// QuantLinear runs it like a dense segment (its own parallel loop over panel groups).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"

namespace kvserve::kernels::cpu::quant {

struct Fp8Panels {
  int64_t rows = 0;
  int64_t in = 0;
  int64_t kblocks = 0;  // ceil(in / 128)
  int64_t panels = 0;
  int64_t panel_bytes = 0;
  std::vector<uint8_t> storage;
  const uint8_t* data = nullptr;  // 64-byte aligned inside storage
  size_t bytes() const { return static_cast<size_t>(panels * panel_bytes); }
};

// Repacks rows x in e4m3 codes (row r at codes + r * row_stride) with scales[r][kb] for the
// 128-column block kb (rows x ceil(in/128) floats: the loader expands per-tensor, per-channel,
// per-group and per-block scales into this form). InvalidArgument naming the row and block of
// a scale that is not finite or too large to carry the 2^8 of the widening.
absl::StatusOr<std::unique_ptr<Fp8Panels>> PackFp8Panels(const uint8_t* codes, int64_t rows,
                                                         int64_t row_stride, int64_t in,
                                                         const float* scales);

enum class Fp8Isa { kAvx512, kAvx2, kPortable };
// The best instruction set this CPU runs the kernels with (one per process).
Fp8Isa Fp8ProcessIsa();
const char* Fp8KernelName(Fp8Isa isa);

// y[:, col0 .. col0 + rows) (=|+=) x · wᵀ + bias for the segment; bias points at the segment's
// first output (or null). Runs on the calling thread's compute team.
void Fp8Linear(Fp8Isa isa, const float* x, int64_t x_stride, const Fp8Panels& w, const float* bias,
               float* y, int64_t y_stride, int64_t rows, bool accumulate);

}  // namespace kvserve::kernels::cpu::quant
