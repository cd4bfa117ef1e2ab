// In-place compaction of one sequence's paged KV after a compression round: token-granular
// selection, block-granular reclamation. Every (layer, KV head) row keeps the same number of
// tokens, but each row may keep a different set:
//
//   physical index:  0 ........ lo-1 | lo ............................ scored_end-1 | .. phys_len-1
//                    [ pinned prefix ] [ candidates: keep[row][0..K) ascending       ] [ tail ]
//
//   after:           0 ........ lo-1 | lo .. lo+K-1                     | lo+K .. new_len-1
//                    [ untouched     ] [ keep[row][i] -> lo + i          ] [ tail, in order ]
//
//   new_len = lo + K + (phys_len - scored_end); the blocks past ceil(new_len / block_size)
//   of the block table hold nothing live any more and go back to the pool (the caller
//   truncates the table).
//
// Why in place is safe without scratch: a row's keep list is strictly ascending inside
// [lo, scored_end), so keep[i] >= lo + i; destinations are written in ascending order and a
// write to lo + i can only land on a source that was already consumed (keep[i'] with i' <= i)
// or on a dropped slot. The same holds for the tail, which moves left by the number of
// dropped candidates. Slots that do not move (the identity prefix keep[i] == lo + i) are
// skipped, so a round costs nothing for the tokens in front of the first dropped one.
//
// K, V and their scales (int8/fp8, int4 values) move together, and so does every per-slot
// side array the caller registers (absolute positions, accumulated attention mass, ...),
// laid out as [num_layers][num_kv_heads][row_stride] elements with the same slot indexing.
// int4 keys,
// whose per-channel scales span a block, are re-encoded block by block instead
// (RecodeInt4KeyBlocks in kv_compact.cc).
//
// Pure function of its arguments: touches only the listed blocks; no allocation except a
// thread-local block of floats that int4 keys grow once.
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "cache/kv_layout.h"

namespace kvserve::kernels::cpu {

// What survives a round, for every (layer, KV head) row of one sequence.
struct KeepPlan {
  int64_t lo = 0;          // first candidate slot; [0, lo) is never moved
  int64_t scored_end = 0;  // candidates are [lo, scored_end); [scored_end, phys_len) is the tail
  int64_t phys_len = 0;    // slots the sequence holds before the round
  int64_t num_keep = 0;    // K: candidates kept per row
  // [num_layers][num_kv_heads][num_keep] physical indices, strictly ascending per row, each
  // in [lo, scored_end).
  const int32_t* keep = nullptr;

  int64_t new_len() const { return lo + num_keep + (phys_len - scored_end); }
};

// A per-slot array that moves with the KV rows: [num_layers][num_kv_heads][row_stride]
// elements of `elem_bytes` bytes; element i of a row belongs to physical index i.
struct SlotSideArray {
  std::byte* data = nullptr;
  int64_t row_stride = 0;  // elements between consecutive (layer, head) rows, >= phys_len
  int elem_bytes = 4;
};

struct CompactStats {
  int64_t new_len = 0;
  int64_t rows_moved = 0;   // (layer, head, slot) rows copied (K and V count once)
  int64_t bytes_moved = 0;  // KV bytes copied: K and V data plus their scales
  int64_t rows_recoded = 0; // int4 keys: (layer, head, slot) K rows decoded and encoded again
};

// Checks a plan against the layout and the block table (table_len entries): bounds, equal
// K for all rows, strictly ascending keep lists, and that the table covers phys_len.
absl::Status ValidateKeepPlan(const cache::KvLayout& layout, int64_t table_len, const KeepPlan& plan);

// layer_data:   [num_layers] base pointers in the cache/kv_layout.h layout; a null one is a
//               layer the table does not hold (a layer group's window layer), left alone
// layer_scales: [num_layers] scale base pointers; may be null when !layout.has_scales()
// block_table:  the sequence's block ids; covers at least plan.phys_len slots
// side:         [num_side] side arrays moved with the rows (may be null when num_side == 0)
// The plan must satisfy ValidateKeepPlan (checked only in debug builds).
CompactStats CompactKv(const cache::KvLayout& layout, std::byte* const* layer_data,
                       float* const* layer_scales, const int32_t* block_table, const KeepPlan& plan,
                       const SlotSideArray* side, int num_side);

}  // namespace kvserve::kernels::cpu
