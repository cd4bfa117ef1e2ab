#include "model/device_plan.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace kvserve::model {
namespace {

int64_t AlignUp(int64_t n, int64_t a) { return (n + a - 1) / a * a; }

absl::Status BatchError(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("forward batch: ", what));
}

}  // namespace

PackedBatch PackForwardBatch(const ForwardBatch& b, std::vector<int32_t>& staging) {
  PackedBatch p;
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

absl::Status ValidateForwardBatch(const ModelConfig& c, int max_tokens, const ForwardBatch& b,
                                  const cache::KvLayout& l, int64_t num_blocks) {
  const int64_t t = b.num_tokens();
  const int s = b.num_seqs();
  if (l.num_layers != c.num_layers || l.num_kv_heads != c.num_kv_heads || l.head_dim != c.head_dim ||
      l.block_size < 1) {
    return BatchError("KV layout does not match the model (layers, KV heads, head_dim)");
  }
  if (t > max_tokens) return BatchError(absl::StrCat(t, " tokens exceed max_tokens_per_step ", max_tokens));
  if (static_cast<int64_t>(b.positions.size()) != t || static_cast<int64_t>(b.slot_mapping.size()) != t) {
    return BatchError("token_ids, positions and slot_mapping differ in length");
  }
  if (b.seq_starts.empty() || b.seq_starts.front() != 0 || b.seq_starts.back() != t) {
    return BatchError("seq_starts must start at 0 and end at the number of tokens");
  }
  if (static_cast<int>(b.kv_lens.size()) != s || static_cast<int>(b.block_table_offsets.size()) != s + 1) {
    return BatchError("kv_lens needs S entries and block_table_offsets S + 1");
  }
  if (b.block_table_offsets.front() != 0 ||
      b.block_table_offsets.back() != static_cast<int32_t>(b.block_tables.size())) {
    return BatchError("block_table_offsets must start at 0 and end at block_tables.size()");
  }
  for (int i = 0; i < s; ++i) {
    const int64_t n = b.seq_starts[static_cast<size_t>(i) + 1] - b.seq_starts[static_cast<size_t>(i)];
    const int64_t blocks =
        b.block_table_offsets[static_cast<size_t>(i) + 1] - b.block_table_offsets[static_cast<size_t>(i)];
    if (n < 0 || blocks < 0) return BatchError(absl::StrCat("sequence ", i, ": offsets decrease"));
    const int32_t kv_len = b.kv_lens[static_cast<size_t>(i)];
    if (kv_len < n) return BatchError(absl::StrCat("sequence ", i, ": kv_len ", kv_len, " < its ", n, " rows"));
    if (kv_len > blocks * l.block_size) {
      return BatchError(absl::StrCat("sequence ", i, ": kv_len ", kv_len, " needs more than its ", blocks, " blocks"));
    }
  }
  for (int32_t block : b.block_tables) {
    if (block < 0 || block >= num_blocks) return BatchError(absl::StrCat("block id ", block, " out of range"));
  }
  const int64_t num_slots = num_blocks * l.block_size;
  for (int64_t i = 0; i < t; ++i) {
    const auto u = static_cast<size_t>(i);
    if (b.token_ids[u] < 0 || b.token_ids[u] >= c.vocab_size) {
      return BatchError(absl::StrCat("token id ", b.token_ids[u], " at row ", i, " outside the vocabulary"));
    }
    if (b.positions[u] < 0) return BatchError(absl::StrCat("negative position at row ", i));
    if (b.slot_mapping[u] < -1 || b.slot_mapping[u] >= num_slots) {
      return BatchError(absl::StrCat("slot ", b.slot_mapping[u], " at row ", i, " out of range"));
    }
  }
  for (int32_t r : b.logits_rows) {
    if (r < 0 || r >= t) return BatchError(absl::StrCat("logits row ", r, " out of range"));
  }
  return absl::OkStatus();
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
                     p.presence_penalty == 0.0f && p.frequency_penalty == 0.0f && (!p.logprobs || *p.logprobs == 0);
  return plain ? SampleRoute::kDeviceGreedy : SampleRoute::kHost;
}

}  // namespace kvserve::model
