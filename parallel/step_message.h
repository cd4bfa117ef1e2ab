// StepMessage: what rank 0 sends every other rank each step, so that workers, which keep no
// scheduler state, can run their share of the forward pass. It is model::ForwardBatch
// (model/forward_batch.h: token rows, positions, KV slots, block tables, logits rows) with
// owned arrays, plus the step id and the KV moves applied before the forward pass (swap out,
// swap in, copy-on-write: scheduler/step_plan.h order), which every rank applies to its own
// shard of the blocks (its heads under TP, its layers under PP) under the same block ids.
//
// Full block tables travel every step (no deltas): a worker holds no per-sequence state, so a
// lost or restarted worker cannot drift from rank 0. A step of S sequences with one row each
// (decode) encodes to 88 + 32 S + 4 x (block table entries) bytes: 32 decode sequences of
// 1024 tokens in 16-token blocks are 9 KiB.
//
// Wire format, version 1 (wire_format.h encodings; all little-endian):
//
//   offset  size  field
//   0       4     magic "KVSM"
//   4       2     version (kStepMessageVersion)
//   6       2     kind (1 forward, 2 shutdown)
//   8       8     step_id (i64)
//   16      ...   i32 array token_ids, i32 array positions, i64 array slot_mapping,
//                 i32 arrays seq_starts, kv_lens, block_table_offsets, block_tables,
//                 logits_rows, window_kv_lens, window_table_offsets, window_block_tables,
//                 then copy arrays swap_out, swap_in, copies (u32 count, then count x
//                 (i32 src, i32 dst))
//   end-8   8     WireChecksum of every byte before it (wire_format.h)
//
// Decoding refuses, naming the field: a short buffer (truncated), a bad magic, a checksum
// mismatch or trailing bytes (corrupt), another version (another build), and arrays whose
// sizes or offsets contradict each other (ValidateStepMessage).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "cache/cache_types.h"
#include "model/forward_batch.h"

namespace kvserve::parallel {

inline constexpr uint16_t kStepMessageVersion = 1;

enum class StepKind : uint16_t {
  kForward = 1,   // apply the KV moves, then run the forward batch
  kShutdown = 2,  // leave the step loop; every array is empty
};

struct StepMessage {
  StepKind kind = StepKind::kForward;
  int64_t step_id = 0;
  // The forward batch; each array as described in model/forward_batch.h.
  std::vector<int32_t> token_ids;
  std::vector<int32_t> positions;
  std::vector<int64_t> slot_mapping;
  std::vector<int32_t> seq_starts;
  std::vector<int32_t> kv_lens;
  std::vector<int32_t> block_table_offsets;
  std::vector<int32_t> block_tables;
  std::vector<int32_t> logits_rows;
  std::vector<int32_t> window_kv_lens;
  std::vector<int32_t> window_table_offsets;
  std::vector<int32_t> window_block_tables;
  // KV moves before the forward pass, applied in this order.
  std::vector<cache::BlockCopy> swap_out;  // device src -> host dst
  std::vector<cache::BlockCopy> swap_in;   // host src -> device dst
  std::vector<cache::BlockCopy> copies;    // copy-on-write inside the device pool

  // Empties every array, keeping capacity.
  void clear();
  // Copies `batch`'s arrays in (kind, step id and moves are left as they are).
  void AssignBatch(const model::ForwardBatch& batch);
  // A view of the forward batch; valid while this message lives and is not modified.
  model::ForwardBatch batch() const;
  // One line for logs: kind, step, rows and tables per sequence, logits rows, moves.
  std::string ToString() const;

  bool operator==(const StepMessage&) const = default;
};

// Encodes into `out` (cleared; capacity reused, so a warm caller does not allocate).
void EncodeStepMessage(const StepMessage& message, std::vector<std::byte>& out);

// Decodes and validates into `out` (its capacity reused). On error `out` is unspecified.
absl::Status DecodeStepMessage(std::span<const std::byte> bytes, StepMessage& out);

// The invariants of model/forward_batch.h that a worker relies on: sizes agree (T rows, S
// sequences), offsets start at 0, never decrease and end at their array's size, every
// sequence holds at least its rows in KV, logits rows lie in [0, T). InvalidArgument naming
// the field.
absl::Status ValidateStepMessage(const StepMessage& message);

}  // namespace kvserve::parallel
