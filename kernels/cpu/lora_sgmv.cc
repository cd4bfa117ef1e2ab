#include "kernels/cpu/lora_sgmv.h"

#include <algorithm>
#include <cstring>

#include "base/check.h"
#include "kernels/cpu/compute_pool.h"
#include "kernels/cpu/simd.h"

namespace kvserve::kernels::cpu {

namespace {

using simd::Load;
using simd::Store;
using simd::V8;

constexpr int kLanes = 8;
int RoundUp8(int n) { return (n + kLanes - 1) / kLanes * kLanes; }

// Weight loads, fp32 or bf16 (raw bits: widened exactly by a 16-bit shift).
typedef uint16_t U16x8 __attribute__((vector_size(16)));
KVS_SIMD_INLINE V8 LoadW(const float* p) { return Load(p); }
KVS_SIMD_INLINE V8 LoadW(const uint16_t* p) {
  U16x8 h;
  std::memcpy(&h, p, sizeof h);
  const simd::V8i wide = __builtin_convertvector(h, simd::V8i) << 16;
  V8 f;
  std::memcpy(&f, &wide, sizeof f);
  return f;
}
KVS_SIMD_INLINE float ScalarW(const float* p) { return *p; }
KVS_SIMD_INLINE float ScalarW(const uint16_t* p) {
  const uint32_t bits = static_cast<uint32_t>(*p) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// t[r][j0, j0 + 8C) = x[rows[r]] · a_t[.][j0, j0 + 8C) for the R rows of a block: R x C
// independent accumulators in registers (one dependent add per k each, so more chains hide
// the add latency). Every t element is the chain acc = 0; acc += x[k] a[k][j] for k
// ascending, whatever R and C.
template <int R, int C, typename T>
KVS_SIMD_INLINE void ShrinkChunks(const float* const* xr, int in, const T* a_t, int stride, int j0,
                                  float* t) {
  V8 acc[R][C] = {};
  const T* a = a_t + j0;
  for (int k = 0; k < in; ++k) {
    V8 w[C];
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) w[c] = LoadW(a + static_cast<int64_t>(k) * stride + c * kLanes);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      // A scalar operand broadcasts (vbroadcastss); an initializer-list splat built the vector
      // lane by lane here (7 inserts per splat, measured 2x slower).
      const float xs = xr[r][k];
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) acc[r][c] += xs * w[c];
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c)
      Store(t + static_cast<int64_t>(r) * stride + j0 + c * kLanes, acc[r][c]);
  }
}

template <int R, typename T>
KVS_SIMD_INLINE void ShrinkRows(const int32_t* rows, const float* x, int64_t x_stride, int in,
                                const T* a_t, int stride, float* t) {
  const float* xr[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) xr[r] = x + static_cast<int64_t>(rows[r]) * x_stride;
  // As many chunks per pass as fit (R x C <= 8, C <= 6), so even one row has independent
  // chains; which pass computes a column never changes its chain.
  constexpr int kC = R <= 1 ? 6 : R == 2 ? 4 : 2;
  int j0 = 0;
  while (j0 < stride) {
    const int c = std::min(kC, (stride - j0) / kLanes);
    switch (c) {
      case 6:
        ShrinkChunks<R, (kC >= 6 ? 6 : 1)>(xr, in, a_t, stride, j0, t);
        break;
      case 5:
        ShrinkChunks<R, (kC >= 5 ? 5 : 1)>(xr, in, a_t, stride, j0, t);
        break;
      case 4:
        ShrinkChunks<R, (kC >= 4 ? 4 : 1)>(xr, in, a_t, stride, j0, t);
        break;
      case 3:
        ShrinkChunks<R, (kC >= 3 ? 3 : 1)>(xr, in, a_t, stride, j0, t);
        break;
      case 2:
        ShrinkChunks<R, 2, T>(xr, in, a_t, stride, j0, t);
        break;
      default:
        ShrinkChunks<R, 1, T>(xr, in, a_t, stride, j0, t);
        break;
    }
    j0 += (c >= 1 ? c : 1) * kLanes;
  }
}

// y[rows[r]][out_begin + o0, + 8W) += Σ_j t[r][rank_begin + j] b_t[j][o] for one slice: R x W
// accumulators. Each y element: acc = y; acc += t_j b_j for j ascending; y = acc.
template <int R, int W, typename T>
KVS_SIMD_INLINE void ExpandChunks(float* const* yr, const float* const* tr,
                                  const LoraSliceWeights& s, const T* b_t, int o0) {
  const int n = s.out_rows;
  V8 acc[R][W];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int c = 0; c < W; ++c) acc[r][c] = Load(yr[r] + o0 + c * kLanes);
  }
  for (int j = 0; j < s.rank; ++j) {
    const T* b = b_t + static_cast<int64_t>(j) * n + o0;
    V8 bv[W];
#pragma GCC unroll 8
    for (int c = 0; c < W; ++c) bv[c] = LoadW(b + c * kLanes);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const float tj = tr[r][j] * s.scale;
#pragma GCC unroll 8
      for (int c = 0; c < W; ++c) acc[r][c] += tj * bv[c];
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int c = 0; c < W; ++c) Store(yr[r] + o0 + c * kLanes, acc[r][c]);
  }
}

// One slice's expand for the R rows of a block. Outputs in 8-wide vectors (grouped W at a
// time, the rest one at a time: the same arithmetic per element either way), the last
// out_rows % 8 one at a time: which path an element takes depends on out_rows only.
template <int R, typename T>
KVS_SIMD_INLINE void ExpandRows(const int32_t* rows, const float* t, int t_stride,
                                const LoraSliceWeights& s, const T* b_t, float* y,
                                int64_t y_stride) {
  float* yr[R];
  const float* tr[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    yr[r] = y + static_cast<int64_t>(rows[r]) * y_stride + s.out_begin;
    tr[r] = t + static_cast<int64_t>(r) * t_stride + s.rank_begin;
  }
  const int n = s.out_rows;
  constexpr int kW = R <= 1 ? 8 : R == 2 ? 4 : 2;  // R x W <= 8 accumulators
  int o = 0;
  for (; o + kW * kLanes <= n; o += kW * kLanes) ExpandChunks<R, kW, T>(yr, tr, s, b_t, o);
  if (kW > 2 && o + 2 * kLanes <= n) {
    ExpandChunks<R, 2, T>(yr, tr, s, b_t, o);
    o += 2 * kLanes;
  }
  for (; o + kLanes <= n; o += kLanes) ExpandChunks<R, 1, T>(yr, tr, s, b_t, o);
  for (; o < n; ++o) {
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      float acc = yr[r][o];
      for (int j = 0; j < s.rank; ++j) {
        acc += (tr[r][j] * s.scale) * ScalarW(b_t + static_cast<int64_t>(j) * n + o);
      }
      yr[r][o] = acc;
    }
  }
}

template <int R>
KVS_SIMD_INLINE void BlockR(const int32_t* rows, const LoraWeightsView& w, const float* x,
                            int64_t x_stride, int in, float* y, int64_t y_stride, float* t) {
  const int stride = RoundUp8(w.rank);
  if (w.a_t != nullptr) {
    ShrinkRows<R>(rows, x, x_stride, in, w.a_t, stride, t);
    for (int s = 0; s < w.num_slices; ++s) {
      ExpandRows<R>(rows, t, stride, w.slices[s], w.slices[s].b_t, y, y_stride);
    }
  } else {
    ShrinkRows<R>(rows, x, x_stride, in, w.a_t_bf16, stride, t);
    for (int s = 0; s < w.num_slices; ++s) {
      ExpandRows<R>(rows, t, stride, w.slices[s], w.slices[s].b_t_bf16, y, y_stride);
    }
  }
}

KVS_SIMD_CLONES
void Block(const int32_t* rows, int n, const LoraWeightsView& w, const float* x, int64_t x_stride,
           int in, float* y, int64_t y_stride, float* t) {
  switch (n) {
    case 4:
      BlockR<4>(rows, w, x, x_stride, in, y, y_stride, t);
      break;
    case 3:
      BlockR<3>(rows, w, x, x_stride, in, y, y_stride, t);
      break;
    case 2:
      BlockR<2>(rows, w, x, x_stride, in, y, y_stride, t);
      break;
    default:
      BlockR<1>(rows, w, x, x_stride, in, y, y_stride, t);
      break;
  }
}

}  // namespace

void LoraRowGroups::Reserve(int64_t max_rows, int max_slots) {
  rows_.resize(static_cast<size_t>(std::max<int64_t>(max_rows, 0)));
  segments_.resize(static_cast<size_t>(std::max(max_slots, 0)));
  blocks_.resize(static_cast<size_t>(std::max<int64_t>(max_rows, 0)));
  counts_.resize(static_cast<size_t>(std::max(max_slots, 0)) + 1);
}

void LoraRowGroups::Build(std::span<const int16_t> row_slots, int num_slots) {
  if (static_cast<int64_t>(rows_.size()) < static_cast<int64_t>(row_slots.size()) ||
      static_cast<int>(segments_.size()) < num_slots) {
    Reserve(std::max<int64_t>(static_cast<int64_t>(rows_.size()),
                              static_cast<int64_t>(row_slots.size())),
            std::max(static_cast<int>(segments_.size()), num_slots));
  }
  // Counting sort by slot: stable, O(rows + slots).
  std::fill(counts_.begin(), counts_.begin() + num_slots + 1, 0);
  for (int16_t s : row_slots) {
    if (s < 0) continue;
    KVS_CHECK(s < num_slots);
    ++counts_[static_cast<size_t>(s) + 1];
  }
  num_segments_ = 0;
  num_blocks_ = 0;
  int32_t start = 0;
  for (int s = 0; s < num_slots; ++s) {
    const int32_t n = counts_[static_cast<size_t>(s) + 1];
    counts_[static_cast<size_t>(s)] = start;  // becomes the write cursor of slot s
    if (n > 0) {
      segments_[static_cast<size_t>(num_segments_)] = Segment{s, start, start + n};
      for (int32_t b = start; b < start + n; b += kBlockRows) {
        blocks_[static_cast<size_t>(num_blocks_++)] =
            Block{num_segments_, b, std::min(b + kBlockRows, start + n)};
      }
      ++num_segments_;
    }
    start += n;
  }
  num_rows_ = start;
  for (size_t r = 0; r < row_slots.size(); ++r) {
    const int16_t s = row_slots[r];
    if (s >= 0)
      rows_[static_cast<size_t>(counts_[static_cast<size_t>(s)]++)] = static_cast<int32_t>(r);
  }
}

void LoraShrinkExpand(const LoraRowGroups& groups, std::span<const LoraWeightsView> views,
                      const float* x, int64_t x_stride, int in, float* y, int64_t y_stride,
                      std::span<float> scratch) {
  if (groups.empty()) return;
  int max_stride = 0;
  int64_t macs = 0;
  for (const auto& seg : groups.segments()) {
    KVS_CHECK(seg.slot >= 0 && static_cast<size_t>(seg.slot) < views.size());
    const LoraWeightsView& w = views[static_cast<size_t>(seg.slot)];
    int out = 0;
    for (int s = 0; s < w.num_slices; ++s) out += w.slices[s].out_rows;
    max_stride = std::max(max_stride, RoundUp8(w.rank));
    macs += static_cast<int64_t>(seg.end - seg.begin) * w.rank * (in + out);
  }
  KVS_CHECK(scratch.size() >= LoraScratchFloats(groups.num_rows(), max_stride));
  const auto rows = groups.rows();
  const auto segs = groups.segments();
  const auto blocks = groups.blocks();
  // One chunk per block of rows; each writes only its own rows of y and of the scratch.
  ParallelFor(static_cast<int64_t>(blocks.size()), SplitFor(macs), [&](int64_t c, int) {
    const LoraRowGroups::Block& b = blocks[static_cast<size_t>(c)];
    const LoraWeightsView& w =
        views[static_cast<size_t>(segs[static_cast<size_t>(b.segment)].slot)];
    if (w.rank == 0) return;
    float* t = scratch.data() + static_cast<int64_t>(b.begin) * max_stride;
    Block(rows.data() + b.begin, b.end - b.begin, w, x, x_stride, in, y, y_stride, t);
  });
}

}  // namespace kvserve::kernels::cpu
