// Builds a ForwardBatch for the common case where a sequence's new rows are appended at
// the end of its KV (physical index = kv_len_before + j) and each row's K/V slot follows
// from the block table. The runner, `kvserve generate`, tests and benchmarks use it; a
// compression-aware runner can still fill ForwardBatch by hand.
//
//   AddSequence(tokens = [a b c], first_position = 7, kv_len_before = 5, table = [9, 2])
//     block_size 4:  physical 5 6 7  ->  slots 2*4+1, 2*4+2, 2*4+3;  positions 7 8 9
//
// Arrays are reused across Clear() calls, so steady-state building does not allocate.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "model/forward_batch.h"

namespace kvserve::model {

enum class LogitsWanted { kNone, kLast, kAll };

class BatchBuilder {
 public:
  explicit BatchBuilder(int block_size) : block_size_(block_size) { Clear(); }

  void Clear();
  // Appends the rows of one sequence. `block_table` must cover kv_len_before + tokens.size()
  // entries. Returns the index of the sequence inside the batch.
  int AddSequence(std::span<const int32_t> tokens, int32_t first_position, int32_t kv_len_before,
                  std::span<const int32_t> block_table, LogitsWanted logits);

  // Layer groups: the window tables of the sequence added last (`tables`: one per group, of
  // equal length, covering its positions so far). Every sequence of a batch has them or none.
  void AddWindowTables(std::span<const std::vector<int32_t>> tables);

  // Views into this builder's arrays; valid until the next AddSequence/Clear.
  ForwardBatch batch() const;
  int64_t num_tokens() const { return static_cast<int64_t>(token_ids_.size()); }
  int64_t num_logits_rows() const { return static_cast<int64_t>(logits_rows_.size()); }

 private:
  int block_size_;
  std::vector<int32_t> token_ids_, positions_, seq_starts_, kv_lens_, table_offsets_, tables_, logits_rows_;
  std::vector<int64_t> slot_mapping_;
  std::vector<int32_t> window_kv_lens_, window_offsets_, window_tables_;
};

}  // namespace kvserve::model
