#include "model/forward_validation.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/paged_attention.h"

namespace kvserve::model {
namespace {

absl::Status BatchError(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("forward batch: ", what));
}

}  // namespace

absl::Status ValidateForwardBatch(const ModelConfig& c, int max_tokens, const ForwardBatch& b,
                                  const cache::KvLayout& l, int64_t num_blocks,
                                  std::span<const kernels::cpu::KvTierStorage> lower_tiers) {
  const int64_t t = b.num_tokens();
  const int s = b.num_seqs();
  if (l.num_layers != c.num_layers || l.num_kv_heads != c.num_kv_heads || l.head_dim != c.head_dim ||
      l.block_size < 1) {
    return BatchError("KV layout does not match the model (layers, KV heads, head_dim)");
  }
  if (l.key_rank != 0) return BatchError("the KV pool cannot hold low-rank keys (only demotion tiers do)");
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
  if (lower_tiers.size() >= static_cast<size_t>(kernels::cpu::kMaxKvTiers)) {
    return BatchError(absl::StrCat(lower_tiers.size(), " demotion tiers, at most ", kernels::cpu::kMaxKvTiers - 1));
  }
  for (const kernels::cpu::KvTierStorage& tier : lower_tiers) {
    if (tier.layout.num_layers != l.num_layers || tier.layout.num_kv_heads != l.num_kv_heads ||
        tier.layout.head_dim != l.head_dim || tier.layout.block_size != l.block_size) {
      return BatchError("a demotion tier's layout differs from the pool's geometry");
    }
    if (tier.layout.key_rank < 0 || tier.layout.key_rank > l.head_dim ||
        (tier.layout.key_rank > 0) != (tier.key_basis != nullptr)) {
      return BatchError("a low-rank demotion tier needs a key basis of rank <= head_dim (and only it has one)");
    }
  }
  for (int32_t entry : b.block_tables) {
    if (lower_tiers.empty()) {
      if (entry < 0 || entry >= num_blocks) return BatchError(absl::StrCat("block id ", entry, " out of range"));
      continue;
    }
    const int tier = entry < 0 ? -1 : kernels::cpu::KvTierOf(entry);
    const int32_t block = kernels::cpu::KvTierBlock(entry);
    const int64_t limit = tier == 0 ? num_blocks
                          : tier > 0 && tier <= static_cast<int>(lower_tiers.size())
                              ? lower_tiers[static_cast<size_t>(tier - 1)].num_blocks
                              : 0;
    if (tier < 0 || block >= limit) {
      return BatchError(absl::StrCat("block table entry ", entry, " (tier ", tier, ", block ", block, ") out of range"));
    }
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

absl::Status ValidateKvView(const KvCacheView& kv) {
  if (static_cast<int>(kv.layer_data.size()) != kv.layout.num_layers) {
    return BatchError("KV view needs one data pointer per layer");
  }
  if (kv.layout.has_scales() && static_cast<int>(kv.layer_scales.size()) != kv.layout.num_layers) {
    return BatchError("KV view needs one scale pointer per layer for this dtype");
  }
  return absl::OkStatus();
}

absl::Status ValidateWindowTables(const ForwardBatch& b, const KvCacheView& kv) {
  if (kv.layer_group.empty()) {
    if (!b.window_kv_lens.empty()) return BatchError("window tables without layer groups");
    return absl::OkStatus();
  }
  if (static_cast<int>(kv.layer_group.size()) != kv.layout.num_layers) {
    return BatchError("KV view needs one layer group per layer");
  }
  int groups = 0;
  for (int16_t g : kv.layer_group) groups = std::max(groups, g + 1);
  const int num_seqs = b.num_seqs();
  if (groups == 0 || static_cast<int>(b.window_kv_lens.size()) != num_seqs ||
      static_cast<int>(b.window_table_offsets.size()) != num_seqs + 1 ||
      b.window_table_offsets[0] != 0 ||
      static_cast<size_t>(b.window_table_offsets[num_seqs]) != b.window_block_tables.size()) {
    return BatchError("layer groups need window tables for every sequence");
  }
  for (int s = 0; s < num_seqs; ++s) {
    const int32_t n = b.window_table_offsets[s + 1] - b.window_table_offsets[s];
    const int32_t last = b.seq_starts[s + 1] - 1;
    if (n < 0 || n % groups != 0 || last < b.seq_starts[s] ||
        b.window_kv_lens[s] != b.positions[static_cast<size_t>(last)] + 1 ||
        static_cast<int64_t>(b.window_kv_lens[s]) >
            static_cast<int64_t>(n / groups) * kv.layout.block_size) {
      return BatchError(
          absl::StrCat("window tables of sequence ", s, " do not cover its positions"));
    }
  }
  for (int32_t entry : b.window_block_tables) {
    if (entry < 0 || entry >= kv.num_blocks)
      return BatchError(absl::StrCat("window block id ", entry, " out of range"));
  }
  return absl::OkStatus();
}

absl::Status ValidateObservers(const ModelConfig& config, const ForwardBatch& b, const ForwardObservers* observers) {
  if (observers == nullptr) return absl::OkStatus();
  if (!observers->attention_mass.empty()) {
    int64_t max_len = 0;
    for (int32_t len : b.kv_lens) max_len = std::max<int64_t>(max_len, len);
    if (observers->mass_stride < max_len ||
        static_cast<int64_t>(observers->attention_mass.size()) <
            static_cast<int64_t>(config.num_layers) * b.num_seqs() * config.num_kv_heads * observers->mass_stride) {
      return BatchError("attention_mass buffer or stride too small");
    }
  }
  if (!observers->pre_rope_queries.empty() &&
      static_cast<int64_t>(observers->pre_rope_queries.size()) <
          static_cast<int64_t>(config.num_layers) * b.num_tokens() * config.q_size()) {
    return BatchError("pre_rope_queries buffer too small");
  }
  return absl::OkStatus();
}

}  // namespace kvserve::model
