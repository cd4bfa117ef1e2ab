#include "kernels/cpu/paged_attention.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <vector>

#include "base/check.h"
#include "kernels/cpu/attention_tile.h"
#include "kernels/cpu/compute_pool.h"
#include "kernels/cpu/kv_quant.h"
#include "kernels/cpu/low_rank_keys.h"
#include "kernels/cpu/simd.h"

namespace kvserve::kernels::cpu {

const float* internal::LoadRun(const KvTierView& tier, int64_t block, int kv, int head, int n, float* buf) {
  const cache::KvLayout& layout = tier.layout;
  const std::byte* run = tier.layer_data + layout.run_byte_offset(block, kv, head);
  const config::KvDtype dtype = layout.side_dtype(kv);
  if (dtype == config::KvDtype::kFp32) return reinterpret_cast<const float*>(run);
  const float* scales =
      cache::KvDtypeHasScales(dtype) ? tier.layer_scales + layout.run_scale_offset(block, kv, head) : nullptr;
  DequantizeRun(layout, kv, run, scales, 0, n, buf);
  return buf;
}

namespace {

using internal::LoadRun;

constexpr size_t kAlignFloats = 16;  // 64-byte spacing between per-thread regions
size_t RoundUp(size_t n) { return (n + kAlignFloats - 1) / kAlignFloats * kAlignFloats; }

// Query rows of one sequence attended together (a tile): each K/V block is loaded (and, for
// a quantized cache, dequantized) once per tile instead of once per row, and pairs of
// (row, head) share the K and V loads of the dot products and weighted sums. Decode rows
// are tiles of one row. Tiling changes only the loop order across rows: every row runs the
// same arithmetic in the same order as alone, so results do not depend on the tile, the
// batch or the thread count (attention_kernel_test checks prefill rows against one-row calls
// bit for bit).
using internal::AttnArgs;
using internal::kTileRows;

// Per-thread scratch, carved from the caller's workspace; u = (row in tile) * group + head:
//   k_rows [block_size][head_dim]   dequantized K of the current block (unused for fp32)
//   v_rows [block_size][head_dim]   dequantized V of the current block (unused for fp32)
//   scores [u][block_size]          scores, then probabilities, of the current block
//   acc    [u][head_dim]            running softmax-weighted V sum
//   max    [u], sum [u]             running max and normaliser
//   q_low  [u][head_dim]            queries projected into a low-rank tier's space (rank <= head_dim)
//   q_off  [u]                      their offsets q . mu
struct ThreadScratch {
  float* k_rows;
  float* v_rows;
  float* scores;
  float* acc;
  float* max;
  float* sum;
  float* q_low;
  float* q_off;
};

size_t PortableFloats(const cache::KvLayout& layout, int group) {
  const size_t run = layout.head_run_elems();
  const size_t units = static_cast<size_t>(kTileRows) * group;
  return 2 * RoundUp(run) + RoundUp(units * layout.block_size) + 2 * RoundUp(units * layout.head_dim) +
         3 * RoundUp(units);
}

// Either kernel's scratch fits (AttentionMass carves the portable layout from it as well).
size_t PerThreadFloats(const cache::KvLayout& layout, int group) {
  return std::max(PortableFloats(layout, group), internal::Avx512TileFloats(layout, group));
}

// Set only by tests (internal::UsePortableAttention), read once per call.
std::atomic<bool> portable_only{false};
bool UseAvx512Tile() { return !portable_only.load(std::memory_order_relaxed) && internal::Avx512TileAvailable(); }

ThreadScratch CarveScratch(const cache::KvLayout& layout, int group, float* base) {
  ThreadScratch s;
  const size_t run = RoundUp(layout.head_run_elems());
  const size_t units = static_cast<size_t>(kTileRows) * group;
  s.k_rows = base;
  s.v_rows = s.k_rows + run;
  s.scores = s.v_rows + run;
  s.acc = s.scores + RoundUp(units * layout.block_size);
  s.max = s.acc + RoundUp(units * layout.head_dim);
  s.sum = s.max + RoundUp(units);
  s.q_low = s.sum + RoundUp(units);
  s.q_off = s.q_low + RoundUp(units * layout.head_dim);
  return s;
}

using simd::Dot;

// Multiply-adds of a step's attention (QK and PV over every attended entry), used to keep
// small steps on one thread: a fork/join costs more than a short decode's whole attention.
int64_t AttentionMacs(const PagedSeqs& seqs, int num_heads, int head_dim) {
  int64_t entries = 0;
  for (int s = 0; s < seqs.num_seqs; ++s) {
    const int64_t n = seqs.seq_starts[s + 1] - seqs.seq_starts[s];
    entries += n * (seqs.kv_lens[s] - n) + n * (n + 1) / 2;
  }
  return 2 * entries * num_heads * head_dim;
}
// Attention's inner loops (8-wide dot products, exps) do about a quarter of the packed
// linear kernel's multiply-adds per second: its MACs count four times in SplitFor.
constexpr int64_t kAttentionMacCost = 4;

// NOTE: the per-item bodies are separate functions so target_clones can build an AVX2
// variant next to the baseline one (resolved once at load time); the lambdas handed to the
// compute team stay thin. head_dim-long dot products, axpys and the exps of
// the scores are where the time goes (simd.h), and they are twice as wide with AVX2.

// Scores of the query rows `qa` (and `qb`, when not null) against K rows [0, n_a) (and
// [0, n_b)): Dot4 over four K rows at a time, then Dot for the rest, exactly as for one row.
inline void ScoreRows(const float* qa, const float* qb, const float* k, int n_a, int n_b, int hd, float scale,
                      float* sa, float* sb) {
  int r = 0;
  if (qb != nullptr) {
    for (; r + 4 <= std::min(n_a, n_b); r += 4) {
      const float* kr = k + static_cast<int64_t>(r) * hd;
      simd::Dot4x2(qa, qb, kr, kr + hd, kr + 2 * hd, kr + 3 * hd, hd, sa + r, sb + r);
    }
    int rb = r;
    for (; rb + 4 <= n_b; rb += 4) {
      const float* kr = k + static_cast<int64_t>(rb) * hd;
      simd::Dot4(qb, kr, kr + hd, kr + 2 * hd, kr + 3 * hd, hd, sb + rb);
    }
    for (; rb < n_b; ++rb) sb[rb] = Dot(qb, k + static_cast<int64_t>(rb) * hd, hd);
    for (rb = 0; rb < n_b; ++rb) sb[rb] *= scale;
  }
  for (; r + 4 <= n_a; r += 4) {
    const float* kr = k + static_cast<int64_t>(r) * hd;
    simd::Dot4(qa, kr, kr + hd, kr + 2 * hd, kr + 3 * hd, hd, sa + r);
  }
  for (; r < n_a; ++r) sa[r] = Dot(qa, k + static_cast<int64_t>(r) * hd, hd);
  for (r = 0; r < n_a; ++r) sa[r] *= scale;
}

// Attention of rows [j0, j0 + rows) of sequence s (a tile, kTileRows at most) for KV head g:
// the group's query heads over each row's visible entries, block by block with an online
// softmax. Row j sees physical indices [a.Lo(base, j), base + j + 1): a prefix, or its window.
// Units [u0, u1) see something of block b (both bounds grow with the row); a unit's entries
// of the block below its window are scored -inf and weigh exactly 0.
KVS_SIMD_CLONES void AttendTile(const AttnArgs& a, int s, int64_t j0, int rows, int g, float* scratch, float* out,
                                int64_t out_stride, float* lse) {
  const cache::KvLayout& layout = a.layout;
  const int group = a.group;
  const int hd = layout.head_dim;
  const int bs = layout.block_size;
  const int64_t first = a.seqs.seq_starts[s];
  const int64_t n_s = a.seqs.seq_starts[s + 1] - first;
  const int64_t base = a.seqs.kv_lens[s] - n_s;  // row j attends [Lo(base, j), base + j + 1)
  KVS_DCHECK(base >= 0, "seq ", s, ": kv_len ", a.seqs.kv_lens[s], " < rows ", n_s);
  const int32_t* table = a.seqs.block_tables + a.seqs.block_table_offsets[s];
  ThreadScratch ws = CarveScratch(layout, group, scratch);
  const int units = rows * group;
  const float cap = a.variant.softcap;
  auto q_of = [&](int u) {
    return a.q + (first + j0 + u / group) * a.q_stride + static_cast<int64_t>(g * group + u % group) * hd;
  };
  auto len_of = [&](int u) { return base + j0 + u / group + 1; };
  auto lo_of = [&](int u) { return a.Lo(base, j0 + u / group); };

  std::fill(ws.acc, ws.acc + static_cast<size_t>(units) * hd, 0.0f);
  std::fill(ws.max, ws.max + units, -std::numeric_limits<float>::infinity());
  std::fill(ws.sum, ws.sum + units, 0.0f);
  const int64_t num_blocks = (len_of(units - 1) + bs - 1) / bs;
  const KvTierView* projected_for = nullptr;  // the low-rank tier ws.q_low holds queries for
  int u1 = 0;  // units [0, u1) have a window that starts before the current block's end
  for (int64_t b = lo_of(0) / bs; b < num_blocks; ++b) {
    // Rows see a growing prefix: the first unit that sees block b, and each unit's count.
    const int u0 = static_cast<int>(std::max<int64_t>(0, b * bs - base - j0)) * group;
    while (u1 < units && lo_of(u1) < (b + 1) * bs) ++u1;
    auto n_of = [&](int u) { return static_cast<int>(std::min<int64_t>(bs, len_of(u) - b * bs)); };
    auto lo_in = [&](int u) { return static_cast<int>(std::max<int64_t>(0, lo_of(u) - b * bs)); };
    const int n_max = n_of(u1 - 1);
    const int64_t block = table[b];
    const KvTierView& tier = a.tiers[KvTierOf(static_cast<int32_t>(block))];
    const int64_t tb = KvTierBlock(static_cast<int32_t>(block));
    const float* k = LoadRun(tier, tb, 0, g, n_max, ws.k_rows);
    const int key_rank = tier.layout.key_rank;
    int u = u0;
    if (key_rank == 0) {
      for (; u + 1 < u1; u += 2) {
        ScoreRows(q_of(u), q_of(u + 1), k, n_of(u), n_of(u + 1), hd, a.scale, ws.scores + static_cast<size_t>(u) * bs,
                  ws.scores + static_cast<size_t>(u + 1) * bs);
      }
      if (u < u1) ScoreRows(q_of(u), nullptr, k, n_of(u), 0, hd, a.scale, ws.scores + static_cast<size_t>(u) * bs, nullptr);
    } else {
      // Low-rank keys: k holds r coefficients per row. Project the tile's queries once per
      // tier (its blocks are contiguous in the table), then score in the r-dim space.
      const KvTierView* tier_ptr = &tier;
      if (projected_for != tier_ptr) {
        const float* head_basis = tier.key_basis + static_cast<size_t>(g) * LowRankHeadFloats(hd, key_rank);
        for (int w = 0; w < units; ++w) {
          ws.q_off[w] = ProjectQuery(head_basis, hd, key_rank, q_of(w), ws.q_low + static_cast<size_t>(w) * hd);
        }
        projected_for = tier_ptr;
      }
      auto q_low = [&](int w) { return ws.q_low + static_cast<size_t>(w) * hd; };
      for (; u + 1 < u1; u += 2) {
        ScoreRows(q_low(u), q_low(u + 1), k, n_of(u), n_of(u + 1), key_rank, a.scale,
                  ws.scores + static_cast<size_t>(u) * bs, ws.scores + static_cast<size_t>(u + 1) * bs);
      }
      if (u < u1) {
        ScoreRows(q_low(u), nullptr, k, n_of(u), 0, key_rank, a.scale, ws.scores + static_cast<size_t>(u) * bs, nullptr);
      }
      for (u = u0; u < u1; ++u) {
        const float off = ws.q_off[u] * a.scale;
        float* sc = ws.scores + static_cast<size_t>(u) * bs;
        for (int r = 0; r < n_of(u); ++r) sc[r] += off;
      }
    }
    for (u = u0; u < u1; ++u) {
      const int n = n_of(u);
      const int lo = lo_in(u);
      float* sc = ws.scores + static_cast<size_t>(u) * bs;
      if (cap > 0.0f) internal::SoftcapScores(sc, lo, n, cap);
      float block_max = -std::numeric_limits<float>::infinity();
      for (int r = lo; r < n; ++r) block_max = std::max(block_max, sc[r]);
      const float new_max = std::max(ws.max[u], block_max);
      // exp(-inf) flushes to ~0 on the first block: the empty running state is dropped.
      const float correction = simd::ExpNonPositive(ws.max[u] - new_max);
      const float block_sum = simd::ExpShiftedInPlace(sc + lo, n - lo, new_max);
      std::fill(sc, sc + lo, 0.0f);
      ws.sum[u] = ws.sum[u] * correction + block_sum;
      ws.max[u] = new_max;
      if (correction != 1.0f) simd::Scale(correction, ws.acc + static_cast<size_t>(u) * hd, hd);
    }
    const float* v = LoadRun(tier, tb, 1, g, n_max, ws.v_rows);
    for (u = u0; u < u1;) {
      const int n = n_of(u);
      float* acc = ws.acc + static_cast<size_t>(u) * hd;
      const float* p = ws.scores + static_cast<size_t>(u) * bs;
      if (u + 1 < u1 && n_of(u + 1) == n) {
        simd::WeightedRowSum2(p, p + bs, v, n, hd, acc, acc + hd);
        u += 2;
      } else {
        simd::WeightedRowSum(p, v, n, hd, acc);
        u += 1;
      }
    }
  }
  for (int u = 0; u < units; ++u) {
    const int64_t row = first + j0 + u / group;
    const int h = g * group + u % group;
    const float sink = a.variant.sinks != nullptr ? a.variant.sinks[h] : -std::numeric_limits<float>::infinity();
    const float inv = internal::FinishSoftmax(ws.max[u], ws.sum[u], sink, lse != nullptr ? lse + row * a.num_heads + h : nullptr);
    const float* acc = ws.acc + static_cast<size_t>(u) * hd;
    float* o = out + row * out_stride + static_cast<int64_t>(h) * hd;
    for (int d = 0; d < hd; ++d) o[d] = acc[d] * inv;
  }
}

// Attention mass of one (sequence, KV head): K of each block is loaded once and scored
// against every row and query head of the group.
KVS_SIMD_CLONES void MassItem(const AttnArgs& a, int64_t item, float* scratch, const float* lse, float* mass,
                              int64_t mass_stride) {
  const cache::KvLayout& layout = a.layout;
  const int kv_heads = layout.num_kv_heads;
  const int hd = layout.head_dim;
  const int bs = layout.block_size;
  const int s = static_cast<int>(item / kv_heads);
  const int g = static_cast<int>(item - static_cast<int64_t>(s) * kv_heads);
  const int64_t first = a.seqs.seq_starts[s];
  const int64_t n_s = a.seqs.seq_starts[s + 1] - first;
  const int64_t kv_len = a.seqs.kv_lens[s];
  const int32_t* table = a.seqs.block_tables + a.seqs.block_table_offsets[s];
  ThreadScratch ws = CarveScratch(layout, a.group, scratch);
  float* m = mass + (static_cast<int64_t>(s) * kv_heads + g) * mass_stride;
  const int64_t num_blocks = (kv_len + bs - 1) / bs;
  for (int64_t b = a.Lo(kv_len - n_s, 0) / bs; b < num_blocks; ++b) {
    const int n = static_cast<int>(std::min<int64_t>(bs, kv_len - b * bs));
    const KvTierView& tier = a.tiers[KvTierOf(table[b])];
    const float* k = LoadRun(tier, KvTierBlock(table[b]), 0, g, n, ws.k_rows);
    if (tier.layout.key_rank > 0) {
      // Low-rank keys: the mass is a diagnostic side output, so reconstruct mu + R^T c (into
      // v_rows, free here) and score as usual: the same projected keys attention scores.
      const int r = tier.layout.key_rank;
      ReconstructKeys(tier.key_basis + static_cast<size_t>(g) * LowRankHeadFloats(hd, r), hd, r, k, n, ws.v_rows);
      k = ws.v_rows;
    }
    for (int64_t j = 0; j < n_s; ++j) {
      const int64_t len = kv_len - n_s + j + 1;
      const int visible = static_cast<int>(std::min<int64_t>(n, len - b * bs));
      const int lo = static_cast<int>(std::max<int64_t>(0, a.Lo(kv_len - n_s, j) - b * bs));
      if (visible <= lo) continue;
      const int64_t row = first + j;
      for (int i = 0; i < a.group; ++i) {
        const int h = g * a.group + i;
        const float* qi = a.q + row * a.q_stride + static_cast<int64_t>(h) * hd;
        const float row_lse = lse[row * a.num_heads + h];
        for (int r = lo; r < visible; ++r) {
          float score = Dot(qi, k + static_cast<int64_t>(r) * hd, hd) * a.scale;
          if (a.variant.softcap > 0.0f) internal::SoftcapScores(&score, 0, 1, a.variant.softcap);
          m[b * bs + r] += simd::ExpNonPositive(score - row_lse);
        }
      }
    }
  }
}

}  // namespace

const char* PagedAttentionKernelName() { return UseAvx512Tile() ? "avx512" : "portable"; }

void internal::UsePortableAttention(bool on) { portable_only.store(on, std::memory_order_relaxed); }

size_t PagedAttentionWorkspaceFloats(const cache::KvLayout& layout, int num_heads,
                                     int num_threads) {
  const int group = num_heads / layout.num_kv_heads;
  return PerThreadFloats(layout, group) * static_cast<size_t>(std::max(num_threads, 1));
}

namespace {

void CheckTiers(std::span<const KvTierView> tiers) {
  KVS_CHECK(!tiers.empty() && tiers.size() <= static_cast<size_t>(kMaxKvTiers), "attention: ", tiers.size(),
            " KV tiers");
  const cache::KvLayout& l0 = tiers[0].layout;
  for (const KvTierView& t : tiers) {
    KVS_CHECK(t.layout.num_kv_heads == l0.num_kv_heads && t.layout.head_dim == l0.head_dim &&
                  t.layout.block_size == l0.block_size,
              "attention: KV tiers differ in geometry");
    KVS_CHECK(t.layout.key_rank >= 0 && t.layout.key_rank <= l0.head_dim && (t.layout.key_rank == 0) == (t.key_basis == nullptr),
              "attention: a low-rank KV tier needs a basis of rank <= head_dim (and only it has one)");
  }
}

}  // namespace

void PagedAttentionTiered(std::span<const KvTierView> tiers, const PagedSeqs& seqs, const float* q, int64_t q_stride,
                          int num_heads, float scale, float* out, int64_t out_stride, float* lse, float* workspace,
                          size_t workspace_floats, const AttentionVariant& variant) {
  CheckTiers(tiers);
  KVS_CHECK(variant.window >= 0 && variant.softcap >= 0.0f, "attention: window ", variant.window, ", softcap ",
            variant.softcap);
  const cache::KvLayout& layout = tiers[0].layout;
  const int kv_heads = layout.num_kv_heads;
  const int group = num_heads / kv_heads;
  KVS_CHECK(group * kv_heads == num_heads, "num_heads ", num_heads, " not a multiple of ", kv_heads);
  const size_t per_thread = PerThreadFloats(layout, group);
  KVS_CHECK(workspace_floats >= per_thread * static_cast<size_t>(ComputeThreads()),
            "attention workspace too small: ", workspace_floats, " floats");
  const AttnArgs a{layout, tiers.data(), seqs, q, q_stride, num_heads, group, scale, variant};
  // tile_starts[s]: the first tile of sequence s (thread_local: no allocation once grown).
  // Workers reach it through `starts` (a thread_local named in the lambda would be theirs).
  thread_local std::vector<int64_t> tile_starts;
  std::vector<int64_t>& starts = tile_starts;
  starts.resize(static_cast<size_t>(seqs.num_seqs) + 1);
  starts[0] = 0;
  for (int s = 0; s < seqs.num_seqs; ++s) {
    const int64_t n = seqs.seq_starts[s + 1] - seqs.seq_starts[s];
    starts[s + 1] = starts[s] + (n + kTileRows - 1) / kTileRows;
  }
  const int64_t items = starts[seqs.num_seqs] * kv_heads;
  const Split split = SplitFor(kAttentionMacCost * AttentionMacs(seqs, num_heads, layout.head_dim));
  // The AVX-512 tile reads full-width keys only; low-rank tiers take the portable tile.
  const bool avx512 = UseAvx512Tile() && std::ranges::none_of(tiers, [](const KvTierView& t) { return t.layout.key_rank > 0; });

  // Items are claimed last tile first: a sequence's later tiles attend more entries, and the
  // longest items going first leaves the short ones to even out the threads at the end.
  ParallelFor(items, split, [&](int64_t claimed, int slot) {
    const int64_t item = items - 1 - claimed;
    const int64_t tile = item / kv_heads;
    const int g = static_cast<int>(item - tile * kv_heads);
    const int s = static_cast<int>(std::upper_bound(starts.begin(), starts.end(), tile) - starts.begin()) - 1;
    const int64_t j0 = (tile - starts[s]) * kTileRows;
    const int rows = static_cast<int>(std::min<int64_t>(kTileRows, seqs.seq_starts[s + 1] - seqs.seq_starts[s] - j0));
    float* scratch = workspace + per_thread * static_cast<size_t>(slot);
    if (avx512) {
      internal::AttendTileAvx512(a, s, j0, rows, g, scratch, out, out_stride, lse);
    } else {
      AttendTile(a, s, j0, rows, g, scratch, out, out_stride, lse);
    }
  });
}

void PagedAttention(const cache::KvLayout& layout, const std::byte* layer_data,
                    const float* layer_scales, const PagedSeqs& seqs, const float* q,
                    int64_t q_stride, int num_heads, float scale, float* out, int64_t out_stride,
                    float* lse, float* workspace, size_t workspace_floats) {
  const KvTierView tier{layout, layer_data, layer_scales};
  PagedAttentionTiered({&tier, 1}, seqs, q, q_stride, num_heads, scale, out, out_stride, lse, workspace,
                       workspace_floats);
}

void AttentionMassTiered(std::span<const KvTierView> tiers, const PagedSeqs& seqs, const float* q, int64_t q_stride,
                         int num_heads, float scale, const float* lse, float* mass, int64_t mass_stride,
                         float* workspace, size_t workspace_floats, const AttentionVariant& variant) {
  CheckTiers(tiers);
  const cache::KvLayout& layout = tiers[0].layout;
  const int kv_heads = layout.num_kv_heads;
  const int group = num_heads / kv_heads;
  const size_t per_thread = PerThreadFloats(layout, group);
  KVS_CHECK(workspace_floats >= per_thread * static_cast<size_t>(ComputeThreads()),
            "attention workspace too small: ", workspace_floats, " floats");
  for (int s = 0; s < seqs.num_seqs; ++s) {
    KVS_CHECK(seqs.kv_lens[s] <= mass_stride, "attention mass stride ", mass_stride, " < kv_len ", seqs.kv_lens[s]);
  }
  const AttnArgs a{layout, tiers.data(), seqs, q, q_stride, num_heads, group, scale, variant};
  const int64_t items = static_cast<int64_t>(seqs.num_seqs) * kv_heads;
  const Split split = SplitFor(kAttentionMacCost * AttentionMacs(seqs, num_heads, layout.head_dim));

  // One item owns mass[s][g][*], so no two threads add into the same slot.
  ParallelFor(items, split, [&](int64_t item, int slot) {
    MassItem(a, item, workspace + per_thread * static_cast<size_t>(slot), lse, mass, mass_stride);
  });
}

void AttentionMass(const cache::KvLayout& layout, const std::byte* layer_data,
                   const float* layer_scales, const PagedSeqs& seqs, const float* q,
                   int64_t q_stride, int num_heads, float scale, const float* lse, float* mass,
                   int64_t mass_stride, float* workspace, size_t workspace_floats) {
  const KvTierView tier{layout, layer_data, layer_scales};
  AttentionMassTiered({&tier, 1}, seqs, q, q_stride, num_heads, scale, lse, mass, mass_stride, workspace,
                      workspace_floats);
}

}  // namespace kvserve::kernels::cpu
