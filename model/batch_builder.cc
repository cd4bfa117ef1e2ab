#include "model/batch_builder.h"

#include "base/check.h"

namespace kvserve::model {

void BatchBuilder::Clear() {
  token_ids_.clear();
  positions_.clear();
  slot_mapping_.clear();
  kv_lens_.clear();
  tables_.clear();
  logits_rows_.clear();
  seq_starts_.assign(1, 0);
  table_offsets_.assign(1, 0);
  window_kv_lens_.clear();
  window_tables_.clear();
  window_offsets_.assign(1, 0);
}

int BatchBuilder::AddSequence(std::span<const int32_t> tokens, int32_t first_position, int32_t kv_len_before,
                              std::span<const int32_t> block_table, LogitsWanted logits) {
  const int32_t n = static_cast<int32_t>(tokens.size());
  const int64_t kv_len = static_cast<int64_t>(kv_len_before) + n;
  KVS_CHECK(kv_len <= static_cast<int64_t>(block_table.size()) * block_size_, "block table of ",
            block_table.size(), " blocks cannot hold ", kv_len, " entries");
  const int32_t first_row = static_cast<int32_t>(token_ids_.size());
  for (int32_t j = 0; j < n; ++j) {
    token_ids_.push_back(tokens[j]);
    positions_.push_back(first_position + j);
    const int64_t phys = static_cast<int64_t>(kv_len_before) + j;
    slot_mapping_.push_back(static_cast<int64_t>(block_table[phys / block_size_]) * block_size_ +
                            phys % block_size_);
  }
  if (n > 0 && logits == LogitsWanted::kLast) logits_rows_.push_back(first_row + n - 1);
  if (logits == LogitsWanted::kAll) {
    for (int32_t j = 0; j < n; ++j) logits_rows_.push_back(first_row + j);
  }
  seq_starts_.push_back(first_row + n);
  kv_lens_.push_back(static_cast<int32_t>(kv_len));
  tables_.insert(tables_.end(), block_table.begin(), block_table.end());
  table_offsets_.push_back(static_cast<int32_t>(tables_.size()));
  return static_cast<int>(kv_lens_.size()) - 1;
}

void BatchBuilder::AddWindowTables(std::span<const std::vector<int32_t>> tables) {
  const size_t s = window_kv_lens_.size();
  KVS_CHECK(s + 1 == kv_lens_.size(), "window tables for sequence ", s, " of ", kv_lens_.size());
  const int64_t end =
      static_cast<int64_t>(positions_[static_cast<size_t>(seq_starts_[s + 1]) - 1]) + 1;
  for (const auto& t : tables) {
    KVS_CHECK(t.size() == tables[0].size() && end <= static_cast<int64_t>(t.size()) * block_size_,
              "window table of ", t.size(), " blocks cannot hold position ", end - 1);
    window_tables_.insert(window_tables_.end(), t.begin(), t.end());
  }
  window_kv_lens_.push_back(static_cast<int32_t>(end));
  window_offsets_.push_back(static_cast<int32_t>(window_tables_.size()));
}

ForwardBatch BatchBuilder::batch() const {
  ForwardBatch b;
  b.token_ids = token_ids_;
  b.positions = positions_;
  b.slot_mapping = slot_mapping_;
  b.seq_starts = seq_starts_;
  b.kv_lens = kv_lens_;
  b.block_table_offsets = table_offsets_;
  b.block_tables = tables_;
  b.logits_rows = logits_rows_;
  if (!window_kv_lens_.empty()) {
    b.window_kv_lens = window_kv_lens_;
    b.window_table_offsets = window_offsets_;
    b.window_block_tables = window_tables_;
  }
  return b;
}

}  // namespace kvserve::model
