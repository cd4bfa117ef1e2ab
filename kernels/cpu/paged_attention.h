// Causal attention of one step's query rows over the paged KV cache (after this step's K/V
// were written), for a batch that mixes prefill chunks and decode tokens of many sequences.
//
//   sequence s, its n_s query rows t = seq_starts[s] + j  (j in [0, n_s)):
//
//   physical index:  0   1   2   ...                 kv_len-n_s+j   ...  kv_len-1
//                   [K0][K1][K2] ... (older tokens) ... [this row] ... (later rows of the step)
//                   |<------------- attended by row j ------------->|
//
//   physical index i lives in block block_tables[block_table_offsets[s] + i / block_size],
//   slot i % block_size. Indices are NOT positions: after compression kept slots are
//   compacted, while RoPE positions travel separately. GQA: query head h reads KV head
//   h / (num_heads / num_kv_heads).
//
// Per (tile of up to 16 consecutive query rows of one sequence, KV head) the kernel streams
// the sequence block by block with an online softmax, so no buffer grows with the context
// and each K/V block is read (dequantized) once per tile, not once per row (prefill traffic
// is O(rows / 16 * context), not O(rows * context)); the per-thread workspace holds one block
// of dequantized K and V and the tile's running state. Every row's arithmetic is the same as
// alone (bit-identical results for any tiling, batch or thread count): prefill rows, chunked
// prefill and decode rows all run one kernel whose per-row order of operations is fixed.
// The CUDA kernel takes the same PagedSeqs and pointer arguments (plus a stream).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "cache/kv_layout.h"
#include "kernels/cpu/compute_pool.h"  // ComputeThreads() sizes the workspace

namespace kvserve::kernels::cpu {

// The step's sequences as the attention kernels see them (no ownership).
struct PagedSeqs {
  int num_seqs = 0;
  const int32_t* seq_starts = nullptr;           // [num_seqs + 1] query rows of s: [start_s, start_s+1)
  const int32_t* kv_lens = nullptr;              // [num_seqs] KV length after this step's writes
  const int32_t* block_table_offsets = nullptr;  // [num_seqs + 1]
  const int32_t* block_tables = nullptr;         // [block_table_offsets[num_seqs]] block ids
};

// Mixed precision (issue 18): a sequence's block table may hold blocks of several precision
// tiers, each its own storage with its own K/V dtypes (same layers, KV heads, head_dim and
// block_size). A table entry carries its tier in the bits above kKvTierShift; plain block ids
// (< 2^kKvTierShift) are tier 0, so a single-tier table is unchanged.
//
//   table entry:  [ tier (7 bits) | block within the tier's storage (24 bits) ]
//
// A low-rank tier (layout.key_rank = r > 0) stores keys as r coefficients c of its basis
// (low_rank_keys.h); its blocks are scored in the r-dim space, q . mu + (R q) . c, with each
// query projected once per tile: exactly the scores of the projected keys mu + R^T c.
struct KvTierView {
  cache::KvLayout layout;
  const std::byte* layer_data = nullptr;  // one layer's storage of this tier
  const float* layer_scales = nullptr;    // its scales (null when the tier's dtypes have none)
  const float* key_basis = nullptr;       // low-rank tiers: this layer's packed basis, all KV heads
};
inline constexpr int kKvTierShift = 24;
inline constexpr int kMaxKvTiers = 8;
inline constexpr int32_t TieredBlock(int tier, int32_t block) { return (tier << kKvTierShift) | block; }
inline constexpr int KvTierOf(int32_t entry) { return entry >> kKvTierShift; }
inline constexpr int32_t KvTierBlock(int32_t entry) { return entry & ((1 << kKvTierShift) - 1); }

// The tile kernel in use, picked once per process from the CPU: "avx512" (AVX-512F: 16-wide
// tiles, attention_tile.h states its arithmetic) or "portable" (8-wide vectors, AVX2 where
// present). Each is batch-invariant; they differ from each other in the last bits.
const char* PagedAttentionKernelName();

namespace internal {
// Tests only: run the portable kernel even where AVX-512 exists (process-wide; call it while
// no attention runs). Workspaces sized by PagedAttentionWorkspaceFloats fit both kernels.
void UsePortableAttention(bool on);
}  // namespace internal

// Floats of workspace PagedAttention / AttentionMass need for `num_threads` threads.
size_t PagedAttentionWorkspaceFloats(const cache::KvLayout& layout, int num_heads,
                                     int num_threads);

// Per-layer variants of the softmax (issue 27; all off by default, docs/models.md):
//   window:  sliding-window attention: the row at physical index p attends
//            [max(0, p - window + 1), p], `window` entries counting itself, as Hugging Face's
//            sliding_window masks (Mistral, Qwen2, Phi-3, Gemma, gpt-oss); 0: unbounded. Blocks
//            wholly before every row's window are never read, so the cache may release them.
//            Physical indices are positions while a sequence is uncompacted, which is the only
//            state a windowed layer attends (compression keeps windowed models at `full`).
//   softcap: scores = softcap * tanh(scores / softcap) after the scale (Gemma 2); 0: none.
//   sinks:   [num_heads] learned logits that join each head's softmax denominator and
//            attend nothing (gpt-oss): out = sum_i e^{s_i} v_i / (e^{sink} + sum_i e^{s_i}),
//            and lse includes the sink, so AttentionMass gives the true probabilities.
struct AttentionVariant {
  int32_t window = 0;
  float softcap = 0.0f;
  const float* sinks = nullptr;
};

// q:     [num_tokens][q_stride]; each row starts with num_heads * head_dim floats (RoPE applied)
// out:   [num_tokens][out_stride]; num_heads * head_dim floats written per row
// lse:   [num_tokens][num_heads] log-sum-exp of each row's scaled scores, or nullptr
// workspace: PagedAttentionWorkspaceFloats(layout, num_heads, ComputeThreads()) floats
// scale: softmax scale (1/sqrt(head_dim) for Llama)
void PagedAttention(const cache::KvLayout& layout, const std::byte* layer_data,
                    const float* layer_scales, const PagedSeqs& seqs, const float* q,
                    int64_t q_stride, int num_heads, float scale, float* out, int64_t out_stride,
                    float* lse, float* workspace, size_t workspace_floats);

// PagedAttention over a table whose entries name their tier (TieredBlock); tiers[0] is also
// what untagged entries read. Same arithmetic per row as PagedAttention over the dequantized
// rows of each block's own tier (for a low-rank tier: over its projected keys, scored in the
// low-rank space).
void PagedAttentionTiered(std::span<const KvTierView> tiers, const PagedSeqs& seqs, const float* q, int64_t q_stride,
                          int num_heads, float scale, float* out, int64_t out_stride, float* lse, float* workspace,
                          size_t workspace_floats, const AttentionVariant& variant = {});

// Attention-probability mass per cached slot, for score-based KV compression (H2O, SnapKV):
//
//   mass[s][g][i] += sum over this step's rows j of s and query heads h of group g of
//                    softmax_i(q_{j,h} · k_{g,i} * scale)          (i in [0, kv_len_s))
//
// mass: [num_seqs][num_kv_heads][mass_stride] (mass_stride >= max kv_len); accumulated into,
// so the caller zeroes it once per step. lse: from PagedAttention on the same inputs.
void AttentionMass(const cache::KvLayout& layout, const std::byte* layer_data,
                   const float* layer_scales, const PagedSeqs& seqs, const float* q,
                       int64_t q_stride, int num_heads, float scale, const float* lse, float* mass,
                   int64_t mass_stride, float* workspace, size_t workspace_floats);
// With a variant: the same window and softcap as the PagedAttention call that gave lse.
void AttentionMassTiered(std::span<const KvTierView> tiers, const PagedSeqs& seqs, const float* q, int64_t q_stride,
                         int num_heads, float scale, const float* lse, float* mass, int64_t mass_stride,
                         float* workspace, size_t workspace_floats, const AttentionVariant& variant = {});

}  // namespace kvserve::kernels::cpu
