// What one forward step computes: a flat list of token rows from many sequences (prefill
// chunks and decode tokens mixed), plus where their K/V go and what they attend to. Plain
// spans, no ownership: the runner fills reusable arrays and points a ForwardBatch at them.
//
//   rows t:          0    1    2    3  | 4  | 5    6      (token_ids, positions, slot_mapping)
//   sequences s:     [------ s0 -----] [s1] [-- s2 --]   seq_starts = {0, 4, 5, 7}
//   kv_lens:         s0: 4 (fresh prefill)  s1: 90 (decode)  s2: 12 (2nd prefill chunk)
//
// Sequence s has n_s = seq_starts[s+1] - seq_starts[s] rows this step and kv_lens[s]
// physical KV entries AFTER this step's writes. Its row j sits at physical index
// kv_lens[s] - n_s + j and attends physical indices [0, kv_lens[s] - n_s + j]. Physical
// index i is slot i % block_size of block block_tables[block_table_offsets[s] + i / block_size].
// Positions (RoPE) are separate inputs because after compression they differ from
// physical indices. slot_mapping[t] = block * block_size + offset is where row t's K/V is
// written (-1: not written); normally it is the slot of the row's own physical index.
#pragma once

#include <cstdint>
#include <span>

#include "cache/kv_layout.h"
#include "kernels/cpu/kv_demote.h"
#include "kernels/cpu/lora_sgmv.h"

namespace kvserve::model {

// LoRA adapter rows of a step (built by lora/lora_step.h): each row's adapter slot, grouped
// (kernels/cpu/lora_sgmv.h), and every slot's low-rank weights per layer and projection. The
// forward adds each row's delta right after the base projection it targets (before q/k
// norms, RoPE, activations and sandwich norms), so the step is computed as if each row's
// adapter were merged into W. Rows without a slot get the base alone.
//
//   views[(layer * kLoraSites + site) * num_slots + slot]          rank 0: nothing there
//   expert_views[((layer * 2 + m) * num_experts + e) * num_slots + slot]
//                                    m = 0: expert e's gate_up, 1: its down (MoE layers)
enum class LoraSite : uint8_t { kQkv = 0, kO = 1, kGateUp = 2, kDown = 3 };
inline constexpr int kLoraSites = 4;
struct LoraRows {
  const kernels::cpu::LoraRowGroups* groups = nullptr;  // rows of [0, T) that carry a slot
  std::span<const int16_t> row_slots;                   // [T], -1: the base alone
  int num_slots = 0;
  std::span<const kernels::cpu::LoraWeightsView> views;  // [num_layers][kLoraSites][num_slots]
  // [num_layers][2][num_experts][num_slots]; empty for a dense model.
  std::span<const kernels::cpu::LoraWeightsView> expert_views;
  // At least LoraScratchFloats(groups->num_rows(), widest view's rank rounded up to 8).
  std::span<float> scratch;
};

struct ForwardBatch {
  std::span<const int32_t> token_ids;            // [T]
  std::span<const int32_t> positions;            // [T] absolute RoPE positions
  std::span<const int64_t> slot_mapping;         // [T] physical slot or -1
  std::span<const int32_t> seq_starts;           // [S + 1], seq_starts[0] = 0, seq_starts[S] = T
  std::span<const int32_t> kv_lens;              // [S]
  std::span<const int32_t> block_table_offsets;  // [S + 1] into block_tables
  std::span<const int32_t> block_tables;         // block ids, sequences concatenated
  std::span<const int32_t> logits_rows;          // rows of [0, T) whose logits are wanted
  // Layer groups (KvCacheView::layer_group set; cache/layer_groups.h): window layers keep
  // their KV in per-group tables indexed by position, so a row at position p writes slot p
  // of its group's table and attends positions [p - window + 1, p] there. Sequence s's
  // tables sit in window_block_tables[window_table_offsets[s], window_table_offsets[s+1]),
  // one per group, each (that range / groups) entries long; window_kv_lens[s] is its last
  // row's position + 1. Empty without layer groups.
  std::span<const int32_t> window_kv_lens;        // [S]
  std::span<const int32_t> window_table_offsets;  // [S + 1]
  std::span<const int32_t> window_block_tables;
  // LoRA adapter rows; null: every row runs the base model alone.
  const LoraRows* lora = nullptr;

  int64_t num_tokens() const { return static_cast<int64_t>(token_ids.size()); }
  int num_seqs() const { return seq_starts.empty() ? 0 : static_cast<int>(seq_starts.size()) - 1; }
};

// The paged KV storage a step reads and writes (layout in cache/kv_layout.h); no ownership.
struct KvCacheView {
  cache::KvLayout layout;
  int64_t num_blocks = 0;
  std::span<std::byte* const> layer_data;  // [num_layers]
  std::span<float* const> layer_scales;    // [num_layers]; empty unless layout.has_scales()
  // Layer groups: [num_layers], -1 for a layer of the main table, else the layer's window
  // group (its layer_data is that group's slot array). Empty: every layer reads the main table.
  std::span<const int16_t> layer_group;
  // Demotion tiers (CPU only): block table entries tagged TieredBlock(t, b) with t >= 1 read
  // block b of lower_tiers[t - 1] (kernels/cpu/paged_attention.h); new rows are always
  // written to the pool above. Empty: every entry is a plain block of the pool.
  std::span<const kernels::cpu::KvTierStorage> lower_tiers;
};

// Optional per-step side outputs for the KV-compression policies. Costs nothing when unset.
struct ForwardObservers {
  // Attention-probability mass per cached entry (H2O / SnapKV scores):
  //   attention_mass[layer][s][kv_head][i] = sum over this step's rows of s and the query heads
  //   of kv_head's group of softmax weight on physical index i   (i < kv_lens[s]).
  // Shape [num_layers][S][num_kv_heads][mass_stride]; mass_stride >= max kv_lens. Forward
  // zeroes the whole span first.
  std::span<float> attention_mass;
  int64_t mass_stride = 0;
  // Pre-RoPE queries of every layer (SnapKV observation window, TriAttention calibration):
  //   pre_rope_queries[(layer * T + t) * q_size + i] = row t's q_proj output (+ bias), before
  //   RoPE, i < q_size = num_heads * head_dim.
  // Shape [num_layers][T][q_size] (size checked); the caller owns the buffer and reads it
  // after Forward returns, once per step, so a device backend fills it with one copy.
  std::span<float> pre_rope_queries;
};

}  // namespace kvserve::model
