// What PagedAttention hands a tile kernel, and the tile kernels themselves. Internal to
// kernels/cpu (paged_attention.cc drives them; tests reach the kernel choice through
// paged_attention.h).
//
// A tile is up to kTileRows consecutive query rows of one sequence against one KV head; its
// units are u = (row in tile) * group + (query head in the group). Two kernels exist, picked
// once per process (never mixed, like packed_linear): the portable one (paged_attention.cc,
// 8-wide vectors, target_clones) and the AVX-512 one (attention_tile_avx512.cc). Each is
// batch-invariant on its own: a row's arithmetic depends only on the row, never on the tile,
// the batch or the thread count. The two differ from each other in the last bits.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>

#include "cache/kv_layout.h"
#include "kernels/cpu/paged_attention.h"

namespace kvserve::kernels::cpu::internal {

inline constexpr int kTileRows = 16;

struct AttnArgs {
  const cache::KvLayout& layout;  // tiers[0]'s: the geometry every tier shares
  const KvTierView* tiers;
  const PagedSeqs& seqs;
  const float* q;
  int64_t q_stride;
  int num_heads;
  int group;
  float scale;
  AttentionVariant variant;  // window, softcap, sinks (paged_attention.h)

  // Row j of a sequence whose rows start at physical index `base` attends [Lo, base + j + 1).
  int64_t Lo(int64_t base, int64_t j) const {
    return variant.window > 0 ? std::max<int64_t>(0, base + j + 1 - variant.window) : 0;
  }
};

// Gemma 2's soft-capping of the live scores [lo, n) of one unit's block (masked lanes stay
// -inf); std::tanh, so both tile kernels cap identically.
inline void SoftcapScores(float* sc, int lo, int n, float cap) {
  const float inv = 1.0f / cap;
  for (int r = lo; r < n; ++r) sc[r] = cap * std::tanh(sc[r] * inv);
}

// The end of a unit's softmax: out = acc / sum, lse = max + log(sum), with a sink logit
// (or none: -inf) joining the denominator. Returns the factor acc is multiplied by and
// writes lse (when not null).
inline float FinishSoftmax(float max, float sum, float sink, float* lse) {
  if (!(sink > -std::numeric_limits<float>::infinity())) {
    if (lse != nullptr) *lse = max + std::log(sum);
    return 1.0f / sum;
  }
  const float m = std::max(max, sink);
  const float corr = std::exp(max - m);
  const float total = sum * corr + std::exp(sink - m);
  if (lse != nullptr) *lse = m + std::log(total);
  return corr / total;
}

// Rows [0, n) of the (block, kv, head) run of `tier` as floats: a direct pointer for fp32,
// else dequantized into `buf` ([block_size][head_dim] floats).
const float* LoadRun(const KvTierView& tier, int64_t block, int kv, int head, int n, float* buf);

// ---- AVX-512 tile kernel (attention_tile_avx512.cc)
//
// Per unit (one query row and head) and attended entry i, with k, v the entry's K and V rows
// and lane(i) = (i mod block_size) mod 16 (the entry's place in its block's 16-entry chunk):
//
//   score_i  = ((c0 + c1) + (c2 + c3)) * scale,  c_p = fma chain over d = p, p+4, p+8, ... < hd
//              (c_p = fma(q[d], k[d], c_p), from 0): four chains so one row alone still has
//              enough independent multiply-adds in flight;
//   per block, in order:  m' = max(m, max_i score_i)   (exact; m = -inf before the first)
//                         corr = Exp(m - m'),  p_i = Exp(score_i - m')
//                         L = fma(L, corr, p of chunk 0) + p of chunk 1 + ...   (16 lanes)
//                         acc[d] = acc[d] * corr, then acc[d] = fma(p_i, v_i[d], acc[d])
//                         for i ascending
//   at the end:           sum = ((L0+L8) + (L4+L12)) + ... (a fixed halving tree)
//                         out = acc * (1 / sum),  lse = m + log(sum)
//
// Exp is a fixed polynomial (attention_tile_avx512.cc). Nothing depends on the other units of
// the tile, so a prefill row equals its decode-style one-row call bit for bit.
bool Avx512TileAvailable();
// Per-thread scratch floats of AttendTileAvx512 (0 when the kernel is unavailable).
size_t Avx512TileFloats(const cache::KvLayout& layout, int group);
// Rows [j0, j0 + rows) of sequence s for KV head g; row j attends physical indices
// [Lo(j), kv_len - n_s + j + 1). Writes out (and lse when not null) of the group's heads.
void AttendTileAvx512(const AttnArgs& a, int s, int64_t j0, int rows, int g, float* scratch, float* out,
                      int64_t out_stride, float* lse);

}  // namespace kvserve::kernels::cpu::internal
