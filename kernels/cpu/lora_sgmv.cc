#include "kernels/cpu/lora_sgmv.h"

#include <algorithm>

#include "base/check.h"
#include "kernels/cpu/compute_pool.h"
#include "kernels/cpu/simd.h"

namespace kvserve::kernels::cpu {

namespace {

using simd::Load;
using simd::Splat;
using simd::Store;
using simd::V8;

constexpr int kLanes = 8;
int RoundUp8(int n) { return (n + kLanes - 1) / kLanes * kLanes; }

// t[r][0, stride) = x[rows[r]] · a_t for the R rows of a block, 8 columns of t at a time with
// R accumulators in registers. Every t element is the chain acc = 0; acc += x[k] a[k][j] for
// k ascending (no contraction: this file is built with -ffp-contract=off), whatever R is.
template <int R>
KVS_SIMD_INLINE void ShrinkRows(const int32_t* rows, const float* x, int64_t x_stride, int in,
                                const float* a_t, int stride, float* t) {
  const float* xr[R];
  for (int r = 0; r < R; ++r) xr[r] = x + static_cast<int64_t>(rows[r]) * x_stride;
  for (int j0 = 0; j0 < stride; j0 += kLanes) {
    V8 acc[R] = {};
    const float* a = a_t + j0;
    for (int k = 0; k < in; ++k) {
      const V8 w = Load(a + static_cast<int64_t>(k) * stride);
      for (int r = 0; r < R; ++r) acc[r] += Splat(xr[r][k]) * w;
    }
    for (int r = 0; r < R; ++r) Store(t + static_cast<int64_t>(r) * stride + j0, acc[r]);
  }
}

// y[rows[r]][out_begin + o] += Σ_j t[r][rank_begin + j] b_t[j][o] for one slice, 16 outputs
// at a time per row (the tail one at a time). Each y element: acc = y; acc += t_j b_j for j
// ascending; y = acc. Same chain for the vector body and the scalar tail.
template <int R>
KVS_SIMD_INLINE void ExpandRows(const int32_t* rows, const float* t, int t_stride,
                                const LoraSliceWeights& s, float* y, int64_t y_stride) {
  float* yr[R];
  const float* tr[R];
  for (int r = 0; r < R; ++r) {
    yr[r] = y + static_cast<int64_t>(rows[r]) * y_stride + s.out_begin;
    tr[r] = t + static_cast<int64_t>(r) * t_stride + s.rank_begin;
  }
  const int n = s.out_rows;
  int o = 0;
  for (; o + 2 * kLanes <= n; o += 2 * kLanes) {
    V8 lo[R], hi[R];
    for (int r = 0; r < R; ++r) {
      lo[r] = Load(yr[r] + o);
      hi[r] = Load(yr[r] + o + kLanes);
    }
    for (int j = 0; j < s.rank; ++j) {
      const float* b = s.b_t + static_cast<int64_t>(j) * n + o;
      const V8 b0 = Load(b), b1 = Load(b + kLanes);
      for (int r = 0; r < R; ++r) {
        const V8 tj = Splat(tr[r][j]);
        lo[r] += tj * b0;
        hi[r] += tj * b1;
      }
    }
    for (int r = 0; r < R; ++r) {
      Store(yr[r] + o, lo[r]);
      Store(yr[r] + o + kLanes, hi[r]);
    }
  }
  for (; o < n; ++o) {
    for (int r = 0; r < R; ++r) {
      float acc = yr[r][o];
      for (int j = 0; j < s.rank; ++j) acc += tr[r][j] * s.b_t[static_cast<int64_t>(j) * n + o];
      yr[r][o] = acc;
    }
  }
}

template <int R>
KVS_SIMD_INLINE void BlockR(const int32_t* rows, const LoraWeightsView& w, const float* x,
                            int64_t x_stride, int in, float* y, int64_t y_stride, float* t) {
  const int stride = RoundUp8(w.rank);
  ShrinkRows<R>(rows, x, x_stride, in, w.a_t, stride, t);
  for (int s = 0; s < w.num_slices; ++s) ExpandRows<R>(rows, t, stride, w.slices[s], y, y_stride);
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
