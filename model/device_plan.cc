#include "model/device_plan.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/check.h"

namespace kvserve::model {
namespace {

int64_t AlignUp(int64_t n, int64_t a) { return (n + a - 1) / a * a; }

}  // namespace

AttentionRowCounts CountAttentionRows(std::span<const int32_t> seq_starts, int tile_rows) {
  KVS_CHECK(tile_rows >= 1, "tile_rows ", tile_rows);
  AttentionRowCounts c;
  for (size_t i = 0; i + 1 < seq_starts.size(); ++i) {
    const int32_t n = seq_starts[i + 1] - seq_starts[i];
    if (n == 1) {
      ++c.split_rows;
    } else {
      c.tiles += (n + tile_rows - 1) / tile_rows;
    }
  }
  return c;
}

void PlanAttentionRows(std::span<const int32_t> seq_starts, int tile_rows, std::span<int32_t> split_rows,
                       std::span<int32_t> tiles) {
  const AttentionRowCounts c = CountAttentionRows(seq_starts, tile_rows);
  KVS_CHECK(split_rows.size() == static_cast<size_t>(c.split_rows) && tiles.size() == 2 * static_cast<size_t>(c.tiles),
            "attention routing spans of the wrong size");
  size_t split_at = 0, tile_at = 0;
  for (size_t i = 0; i + 1 < seq_starts.size(); ++i) {
    const int32_t begin = seq_starts[i], end = seq_starts[i + 1];
    if (end - begin == 1) {
      split_rows[split_at++] = begin;
      continue;
    }
    for (int32_t r = begin; r < end; r += tile_rows) {
      tiles[tile_at++] = r;
      tiles[tile_at++] = std::min(tile_rows, end - r);
    }
  }
}

int PrefillTileRows(int head_dim, int group, int max_tile_floats) {
  if (head_dim < 1 || group < 1) return 0;
  return std::min(32, max_tile_floats / (head_dim * group));
}

PackedBatch PackForwardBatch(const ForwardBatch& b, std::vector<int32_t>& staging, int tile_rows) {
  PackedBatch p;
  p.tile_rows = tile_rows;
  if (tile_rows > 0) {
    const AttentionRowCounts c = CountAttentionRows(b.seq_starts, tile_rows);
    p.num_split_rows = c.split_rows;
    p.num_tiles = c.tiles;
  }
  p.num_tokens = static_cast<int>(b.num_tokens());
  p.num_seqs = b.num_seqs();
  p.num_logits_rows = static_cast<int>(b.logits_rows.size());
  for (int32_t len : b.kv_lens) p.max_kv_len = std::max(p.max_kv_len, len);
  const int64_t t = p.num_tokens, s = p.num_seqs;
  int64_t at = 0;
  auto take = [&at](int64_t n) {
    const int64_t off = at;
    at = AlignUp(at + n, 4);
    return off;
  };
  p.token_ids = take(t);
  p.positions = take(t);
  p.seq_starts = take(s + 1);
  p.kv_lens = take(s);
  p.table_offsets = take(s + 1);
  p.block_tables = take(static_cast<int64_t>(b.block_tables.size()));
  p.logits_rows = take(p.num_logits_rows);
  p.row_seq = take(t);
  p.split_rows = take(p.num_split_rows);
  p.tiles = take(2 * static_cast<int64_t>(p.num_tiles));
  p.slot_mapping = take(2 * t);  // int64 entries; `at` is a multiple of 4 here
  p.total_int32 = at;
  staging.assign(static_cast<size_t>(at), 0);
  auto put = [&staging](int64_t off, std::span<const int32_t> src) {
    std::copy(src.begin(), src.end(), staging.begin() + off);
  };
  put(p.token_ids, b.token_ids);
  put(p.positions, b.positions);
  put(p.seq_starts, b.seq_starts);
  put(p.kv_lens, b.kv_lens);
  put(p.table_offsets, b.block_table_offsets);
  put(p.block_tables, b.block_tables);
  put(p.logits_rows, b.logits_rows);
  if (tile_rows > 0) {
    const std::span<int32_t> all(staging);
    PlanAttentionRows(b.seq_starts, tile_rows, all.subspan(static_cast<size_t>(p.split_rows), p.num_split_rows),
                      all.subspan(static_cast<size_t>(p.tiles), 2 * static_cast<size_t>(p.num_tiles)));
  }
  for (int i = 0; i < p.num_seqs; ++i) {
    for (int32_t r = b.seq_starts[static_cast<size_t>(i)]; r < b.seq_starts[static_cast<size_t>(i) + 1]; ++r) {
      staging[static_cast<size_t>(p.row_seq + r)] = i;
    }
  }
  // int64 little-endian halves, exactly what the device reads back as int64.
  for (int64_t r = 0; r < t; ++r) {
    const auto v = static_cast<uint64_t>(b.slot_mapping[static_cast<size_t>(r)]);
    staging[static_cast<size_t>(p.slot_mapping + 2 * r)] = static_cast<int32_t>(static_cast<uint32_t>(v));
    staging[static_cast<size_t>(p.slot_mapping + 2 * r + 1)] = static_cast<int32_t>(static_cast<uint32_t>(v >> 32));
  }
  return p;
}

size_t SplitWorkspaceBytes(int num_rows, int num_heads, int head_dim, int max_kv_len, int split_tokens) {
  if (split_tokens < 1) return 0;
  const int64_t splits = (static_cast<int64_t>(max_kv_len) + split_tokens - 1) / split_tokens;
  return static_cast<size_t>(num_rows) * static_cast<size_t>(num_heads) * static_cast<size_t>(splits) *
         (static_cast<size_t>(head_dim) + 2) * sizeof(float);
}

int ChooseSplitTokens(int num_rows, int num_kv_heads, int num_heads, int head_dim, int max_kv_len, int target_ctas,
                      int min_split, size_t workspace_bytes) {
  min_split = std::max(1, min_split);
  if (num_rows <= 0 || num_kv_heads <= 0 || max_kv_len <= 0) return min_split;
  const int64_t base = static_cast<int64_t>(num_rows) * num_kv_heads;
  int64_t splits = std::max<int64_t>(1, (target_ctas + base - 1) / base);
  splits = std::min<int64_t>(splits, (max_kv_len + min_split - 1) / min_split);
  const size_t per_split = static_cast<size_t>(num_rows) * static_cast<size_t>(num_heads) *
                           (static_cast<size_t>(head_dim) + 2) * sizeof(float);
  if (per_split > 0 && static_cast<size_t>(splits) * per_split > workspace_bytes) {
    splits = std::max<int64_t>(1, static_cast<int64_t>(workspace_bytes / per_split));
  }
  splits = std::max<int64_t>(1, splits);
  return static_cast<int>((max_kv_len + splits - 1) / splits);
}

SampleRoute RouteFor(const SamplingParams& p) {
  const bool plain = p.greedy() && p.logit_bias.empty() && p.repetition_penalty == 1.0f &&
                     p.presence_penalty == 0.0f && p.frequency_penalty == 0.0f &&
                     (!p.logprobs || *p.logprobs == 0) && !p.has_masks();
  return plain ? SampleRoute::kDeviceGreedy : SampleRoute::kHost;
}

void DeviceMasks::Reset(int rows, int words_per_mask) {
  KVS_CHECK(rows >= 0 && words_per_mask >= 0, "device masks: ", rows, " rows of ", words_per_mask, " words");
  mask_index.assign(static_cast<size_t>(rows), -1);
  words.clear();
  mask_words = words_per_mask;
  num_masks = 0;
}

void DeviceMasks::Set(int row, std::span<const uint64_t> allowed) {
  KVS_CHECK(row >= 0 && static_cast<size_t>(row) < mask_index.size() && mask_index[static_cast<size_t>(row)] < 0,
            "device masks: row ", row, " outside the step or constrained twice");
  mask_index[static_cast<size_t>(row)] = num_masks++;
  const size_t w = static_cast<size_t>(mask_words);
  const size_t n = std::min(w, allowed.size());
  words.insert(words.end(), allowed.begin(), allowed.begin() + static_cast<std::ptrdiff_t>(n));
  words.resize(words.size() + (w - n), 0);
}

}  // namespace kvserve::model
