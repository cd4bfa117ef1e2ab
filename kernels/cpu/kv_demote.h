// Demotion (issue 18, importance-aware mixed precision): rows of one sequence re-encoded into
// blocks of a lower-precision tier. A block holds one K/V dtype pair, so demoting tokens is a
// compaction into blocks of the other tier's storage:
//
//   source tier (e.g. fp32 / fp32)                destination tier (e.g. int4 / int4)
//   row r: slots rows[r][0], rows[r][1], ...  ──►  dst_table[0] slots 0..bs-1, dst_table[1] ...
//          (decoded: ReadTierRow)                  (encoded: WriteTierRows, a block at a time, so
//                                                   int4 keys get each block's exact range;
//                                                   a low-rank tier projects keys: kv_tier.h)
//
// Every (layer, KV head) row moves the same count n (its own choice of slots, as compaction
// allows); the caller then drops the moved slots from the source rows (CompactKv) and puts
// the destination blocks in the sequence's table (TieredBlock entries, paged_attention.h).
// Only the first ceil(n / block_size) entries of dst_table are written.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cache/kv_layout.h"
#include "kernels/cpu/kv_tier.h"

namespace kvserve::kernels::cpu {

// rows: [num_layers][num_kv_heads][n] physical indices into src_table's slots.
// Returns the KV bytes written into the destination (codes and scales).
int64_t DemoteKv(const KvTierStorage& src, const int32_t* src_table, const KvTierStorage& dst,
                 const int32_t* dst_table, const int32_t* rows, int64_t n);

}  // namespace kvserve::kernels::cpu
