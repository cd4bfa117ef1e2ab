// What the split-KV decode kernels of paged attention share: the launch parameters of one
// PagedAttention call and the CTA shape. paged_attention.cu holds the general kernel (every
// dtype pair, any head_dim); split_kv_vec.cu the vectorised one for the common shapes.
// Included only by .cu files of kernels/cuda.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "cache/kv_layout.h"
#include "kernels/cuda/kv_codes.cuh"
#include "kernels/cuda/paged_attention.h"

namespace kvserve::kernels::cuda::detail {

inline constexpr int kWarps = 4;
inline constexpr int kThreads = kWarps * 32;

// Pass 1 of split-KV writes, per (split row, head, split): the running max m (natural log
// domain), the sum l of exp(score - m) and the unnormalised accumulator; pass 2 merges them.
struct Params {
  cache::KvLayout layout;
  KvGeometry geo;  // byte geometry of layout, every dtype pair
  const std::byte* data;
  const float* scales;
  DevicePagedSeqs seqs;
  const float* q;
  int64_t q_stride;
  int num_heads;
  int group;
  float scale;
  int split_tokens;
  int num_splits;
  const int32_t* split_rows;  // rows of the split-KV kernel (null: every row)
  int num_split_rows;
  float* ws_m;    // [split rows][heads][splits]
  float* ws_l;    // [split rows][heads][splits]
  float* ws_acc;  // [split rows][heads][splits][head_dim]
  // The call's outputs (CombineKernel writes them). With one split the vectorised kernel
  // writes them itself, the same values, and pass 2 is skipped.
  float* out;
  int64_t out_stride;
  float* lse;  // may be null
  // DeviceAttentionVariant.
  int window;
  float softcap;
  const float* sinks;
};

// The first slot a row attends, given how many it attends from slot 0 (`attend` = its
// physical index + 1): attend - window with a window, else 0.
__device__ __forceinline__ int WindowStart(const Params& p, int attend) {
  return p.window > 0 ? max(0, attend - p.window) : 0;
}

// A scaled score through the soft-cap (tanhf; the CPU's std::tanh agrees to a few ulp).
__device__ __forceinline__ float Softcap(const Params& p, float score) {
  return p.softcap > 0.0f ? p.softcap * tanhf(score / p.softcap) : score;
}

// The query row of split row `i` (the listed decode rows when the step is tiled, else row i).
__device__ __forceinline__ int SplitRow(const Params& p, int i) { return p.split_rows != nullptr ? p.split_rows[i] : i; }

// The slots [begin, end) that split `blockIdx.z` of split row `blockIdx.x` attends, its query
// row and the row's sequence: what every pass-1 CTA starts from.
struct SplitSlots {
  int row;    // query row of the step
  int seq;    // its sequence
  int begin;  // first attended slot of this split
  int end;    // one past the last (<= begin when the split is past the row's context)
};
__device__ __forceinline__ SplitSlots SplitSlotsOf(const Params& p, int row_index, int split) {
  SplitSlots r;
  r.row = SplitRow(p, row_index);
  r.seq = p.seqs.row_seq[r.row];
  const int start = p.seqs.seq_starts[r.seq];
  const int n = p.seqs.seq_starts[r.seq + 1] - start;
  const int attend = p.seqs.kv_lens[r.seq] - n + (r.row - start) + 1;
  r.begin = max(split * p.split_tokens, WindowStart(p, attend));
  r.end = min(attend, split * p.split_tokens + p.split_tokens);
  return r;
}

// Launches pass 1 with the vectorised kernel on `grid` (split row, KV head, split) when the
// call's shape is one it covers; false (nothing launched) otherwise. With p.num_splits == 1 it
// writes out and lse itself: the caller skips pass 2.
bool LaunchVecSplitKernel(const Params& p, dim3 grid, cudaStream_t stream);

}  // namespace kvserve::kernels::cuda::detail
