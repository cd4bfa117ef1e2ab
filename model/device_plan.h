// Host-side planning for a device forward pass, in plain C++ so CPU tests cover it: what a
// step uploads, how it is checked, how attention is split and which rows are sampled where.
// The CUDA model (cuda/cuda_llama_model.h) and runner use these; nothing here touches a device.
//
//   ForwardBatch (host spans) ──PackForwardBatch──► one int32 staging array, one H2D copy:
//
//     [token_ids T][positions T][seq_starts S+1][kv_lens S][table_offsets S+1]
//     [block_tables B][logits_rows R][row_seq T][split_rows Rs][tiles 2 x NT][pad]
//     [slot_mapping T x int64]
//
//   split_rows / tiles: which rows the split-KV decode kernel and which the tiled prefill
//   kernel attend (PlanAttentionRows); both empty when the caller passes tile_rows 0.
//
//   every section starts at a multiple of 4 int32 (16 bytes); slot_mapping at a multiple of
//   2 int32 as well, so it can be read as int64 on the device.
//
// ValidateForwardBatch is the device model's gate: the device never sees a block id, slot or
// token id outside its arrays (a bad index there is memory corruption, not an exception).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "cache/kv_layout.h"
#include "model/forward_batch.h"
#include "model/forward_validation.h"  // ValidateForwardBatch, the device model's gate
#include "model/model_config.h"
#include "model/sampler.h"

namespace kvserve::model {

// Offsets (in int32 units) of each section inside the packed staging array.
struct PackedBatch {
  int64_t token_ids = 0, positions = 0, seq_starts = 0, kv_lens = 0, table_offsets = 0, block_tables = 0,
          logits_rows = 0, row_seq = 0, split_rows = 0, tiles = 0, slot_mapping = 0;
  int64_t total_int32 = 0;  // size of the staging array
  int num_tokens = 0;
  int num_seqs = 0;
  int num_logits_rows = 0;
  int max_kv_len = 0;  // max of kv_lens (0 for an empty batch)
  int num_split_rows = 0;
  int num_tiles = 0;
  int tile_rows = 0;   // as passed to PackForwardBatch
};

// Attention routing of a step (kernels/cuda/paged_attention.h): the rows of single-row
// sequences (decode) go to the split-KV kernel, which splits long contexts across CTAs; the
// rows of multi-row sequences (prefill chunks) are cut into tiles of up to `tile_rows`
// consecutive rows of one sequence, (first row, rows) pairs, for the tiled kernel. Every row
// lands in exactly one of the two. tile_rows >= 1.
// CountAttentionRows sizes the two lists, PlanAttentionRows fills them (spans of exactly
// split_rows and 2 x tiles entries).
struct AttentionRowCounts {
  int split_rows = 0;
  int tiles = 0;
};
AttentionRowCounts CountAttentionRows(std::span<const int32_t> seq_starts, int tile_rows);
void PlanAttentionRows(std::span<const int32_t> seq_starts, int tile_rows, std::span<int32_t> split_rows,
                       std::span<int32_t> tiles);

// Query rows per prefill tile for a model of `group` query heads per KV head and `head_dim`:
// the most rows (at most 32) whose queries fit `max_tile_floats` floats
// (kernels::cuda::kMaxPrefillTileFloats); 0 when not even one row fits.
int PrefillTileRows(int head_dim, int group, int max_tile_floats);

// Packs `batch` into `staging` (resized; capacity reused) and returns the section offsets.
// row_seq[t] is the sequence of row t (from seq_starts). tile_rows > 0 also packs the
// attention routing (PlanAttentionRows); 0 leaves split_rows and tiles empty.
PackedBatch PackForwardBatch(const ForwardBatch& batch, std::vector<int32_t>& staging, int tile_rows = 0);


// Split-KV decode attention (kernels/cuda/paged_attention.h): attended slots per split for a
// step of `num_rows` query rows over `num_kv_heads` heads whose longest context is
// `max_kv_len`. Aims for about `target_ctas` CTAs (rows x heads x splits), never splits below
// `min_split` slots, and keeps the workspace (rows x num_heads x splits x (head_dim + 2)
// floats) within `workspace_bytes` whenever one split per row fits at all.
int ChooseSplitTokens(int num_rows, int num_kv_heads, int num_heads, int head_dim, int max_kv_len, int target_ctas,
                      int min_split, size_t workspace_bytes);
// Workspace bytes the chosen split needs (what PagedAttentionWorkspaceBytes computes).
size_t SplitWorkspaceBytes(int num_rows, int num_heads, int head_dim, int max_kv_len, int split_tokens);

// Where a sampling row is sampled. kDeviceGreedy: argmax and the raw log-softmax of the token
// are computed on the device and only (token, logprob) come back; this is exact for greedy
// requests with no logit_bias, no penalties and no top-N logprobs. kHost: the row's logits are
// copied back and model::Sampler runs on them, which is the CPU backend's code and draws
// (model/sampler_rng.h), so the CPU and CUDA backends sample identically from equal logits.
enum class SampleRoute { kDeviceGreedy, kHost };
SampleRoute RouteFor(const SamplingParams& params);

// Structured-output masks of one step's device-greedy rows, packed for one upload: only the
// constrained rows carry a mask (the others are -1), each exactly `mask_words` words (the
// device vocabulary's); a grammar mask shorter than that is padded with zero words, so ids past
// it are never allowed, as model::Sampler treats them. Reused across steps (no allocation once
// grown).
struct DeviceMasks {
  std::vector<int32_t> mask_index;  // [rows] index into words / mask_words, or -1
  std::vector<uint64_t> words;      // [num_masks][mask_words]
  int mask_words = 0;
  int num_masks = 0;

  // Starts a step of `rows` sampled rows, all unconstrained.
  void Reset(int rows, int words_per_mask);
  // Constrains row `row` (< rows, once per step) to the tokens set in `allowed` (bit i of word
  // i / 64); words of `allowed` past mask_words are dropped (they name ids past the vocabulary).
  void Set(int row, std::span<const uint64_t> allowed);
};

}  // namespace kvserve::model
