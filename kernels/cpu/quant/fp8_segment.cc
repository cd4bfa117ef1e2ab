#include "kernels/cpu/quant/fp8_segment.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/cpu/compute_pool.h"
#include "kernels/cpu/quant/fp8_format.h"

namespace kvserve::kernels::cpu::quant {

absl::StatusOr<std::unique_ptr<Fp8Panels>> PackFp8Panels(const uint8_t* codes, int64_t rows,
                                                         int64_t row_stride, int64_t in,
                                                         const float* scales) {
  if (codes == nullptr || scales == nullptr || rows <= 0 || in <= 0 || row_stride < in) {
    return absl::InvalidArgumentError(
        absl::StrCat("fp8 segment: needs codes, scales, rows > 0 and a row stride >= ", in,
                     " (got rows ", rows, ", stride ", row_stride, ")"));
  }
  auto w = std::make_unique<Fp8Panels>();
  w->rows = rows;
  w->in = in;
  w->kblocks = (in + kFp8KBlock - 1) / kFp8KBlock;
  w->panels = (rows + kFp8PanelRows - 1) / kFp8PanelRows;
  w->panel_bytes = w->kblocks * kFp8BlockBytes;
  // The largest scale that still carries the widening's 2^8 exactly (fp8_format.h).
  constexpr float kMaxScale = 0x1p119f;
  for (int64_t i = 0; i < rows * w->kblocks; ++i) {
    if (!std::isfinite(scales[i]) || std::fabs(scales[i]) > kMaxScale) {
      return absl::InvalidArgumentError(absl::StrCat(
          "fp8 segment: scale of row ", i / w->kblocks, ", column block ", i % w->kblocks, " is ",
          scales[i], " (must be finite and at most 2^119 in magnitude)"));
    }
  }
  w->storage.assign(w->bytes() + 64, 0);
  uint8_t* base = w->storage.data();
  base += (64 - reinterpret_cast<uintptr_t>(base) % 64) % 64;
  w->data = base;
  for (int64_t p = 0; p < w->panels; ++p) {
    for (int64_t kb = 0; kb < w->kblocks; ++kb) {
      uint8_t* blk = base + p * w->panel_bytes + kb * kFp8BlockBytes;
      const int n = static_cast<int>(std::min<int64_t>(kFp8KBlock, in - kb * kFp8KBlock));
      for (int r = 0; r < kFp8PanelRows; ++r) {
        const int64_t row = p * kFp8PanelRows + r;
        if (row >= rows) break;
        const float s = scales[row * w->kblocks + kb] * kFp8ScaleFactor;
        std::memcpy(blk + 4 * r, &s, 4);
        const uint8_t* src = codes + row * row_stride + kb * kFp8KBlock;
        uint8_t* dst = blk + kFp8ScaleBytes + r;
        for (int k = 0; k < n; ++k) dst[kFp8PanelRows * k] = src[k];
      }
    }
  }
  return w;
}

Fp8Isa Fp8ProcessIsa() {
  static const Fp8Isa isa = Fp8CpuHasAvx512() ? Fp8Isa::kAvx512
                            : Fp8CpuHasAvx2() ? Fp8Isa::kAvx2
                                              : Fp8Isa::kPortable;
  return isa;
}

const char* Fp8KernelName(Fp8Isa isa) {
  switch (isa) {
    case Fp8Isa::kAvx512:
      return "fp8-avx512";
    case Fp8Isa::kAvx2:
      return "fp8-avx2";
    case Fp8Isa::kPortable:
      break;
  }
  return "fp8-portable";
}

namespace {

const Fp8KernelTable& TableOf(Fp8Isa isa) {
  switch (isa) {
    case Fp8Isa::kAvx512:
      return Fp8Avx512Kernels();
    case Fp8Isa::kAvx2:
      return Fp8Avx2Kernels();
    case Fp8Isa::kPortable:
      break;
  }
  return Fp8PortableKernels();
}

constexpr int64_t kChunkMacs = 1 << 18;
constexpr int64_t kMaxChunks = 32;
constexpr int64_t kSliceBytes = 384 << 10;  // activation bytes per row slice (kept in L2)
constexpr int64_t kPrefillRows = 64;

}  // namespace

void Fp8Linear(Fp8Isa isa, const float* x, int64_t x_stride, const Fp8Panels& w, const float* bias,
               float* y, int64_t y_stride, int64_t rows, bool accumulate) {
  if (rows <= 0) return;
  const Fp8KernelTable& kt = TableOf(isa);
  // Tiles: one row -> 4 panels per call, 2..4 rows -> 2 panels, more -> 1 panel x 8 rows.
  const int group = rows == 1 ? 4 : rows <= 4 ? 2 : 1;
  const int max_rows = rows == 1 ? 1 : rows <= 4 ? 4 : kFp8MaxTileRows;
  const int pi_of[5] = {0, 0, 1, 1, 2};
  const int64_t groups = (w.panels + group - 1) / group;
  const int64_t macs = rows * w.in * w.rows;
  const int64_t chunks = std::clamp<int64_t>(macs / kChunkMacs, 1, std::min(groups, kMaxChunks));
  const bool prefill = isa != Fp8Isa::kPortable && rows > 4;
  // Prefill widens each block once per slice: at least kPrefillRows rows share it, even where
  // their activations outgrow L2 (they stream from L3 once per panel, under the arithmetic).
  const int64_t slice = std::max<int64_t>(prefill ? kPrefillRows : max_rows,
                                          (kSliceBytes / (w.in * 4)) / max_rows * max_rows);
  // The fp32 kernels widen every code (a few ops per 16 weights): weighted as x2 of a
  // register-blocked kernel's multiply-adds.
  ParallelFor(chunks, SplitFor(macs / 2), [&](int64_t c, int) {
    const int64_t p0 = groups * c / chunks * group;
    const int64_t p1 = std::min(w.panels, groups * (c + 1) / chunks * group);
    for (int64_t rs = 0; rs < rows; rs += slice) {
      const int64_t re = std::min(rows, rs + slice);
      if (prefill) {  // widen each block once per slice
        for (int64_t p = p0; p < p1; ++p) {
          const int64_t col = p * kFp8PanelRows;
          const Fp8Tile t{x + rs * x_stride,
                          x_stride,
                          w.data + p * w.panel_bytes,
                          w.panel_bytes,
                          w.in,
                          y + rs * y_stride + col,
                          y_stride,
                          bias != nullptr ? bias + col : nullptr,
                          static_cast<int>(std::min<int64_t>(kFp8PanelRows, w.rows - col)),
                          accumulate};
          (isa == Fp8Isa::kAvx512 ? Fp8Avx512PanelRows : Fp8Avx2PanelRows)(t, re - rs);
        }
        continue;
      }
      for (int64_t p = p0; p < p1;) {
        int np = static_cast<int>(std::min<int64_t>(group, p1 - p));
        if (np == 3) np = 2;
        const int64_t col = p * kFp8PanelRows;
        const int valid = static_cast<int>(std::min<int64_t>(np * kFp8PanelRows, w.rows - col));
        for (int64_t r0 = rs; r0 < re; r0 += max_rows) {
          const int nr = static_cast<int>(std::min<int64_t>(max_rows, re - r0));
          const Fp8Tile t{x + r0 * x_stride,
                          x_stride,
                          w.data + p * w.panel_bytes,
                          w.panel_bytes,
                          w.in,
                          y + r0 * y_stride + col,
                          y_stride,
                          bias != nullptr ? bias + col : nullptr,
                          valid,
                          accumulate};
          kt.fn[pi_of[np]][nr - 1](t);
        }
        p += np;
      }
    }
  });
}

}  // namespace kvserve::kernels::cpu::quant
