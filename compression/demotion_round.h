// Importance-aware mixed precision in the serving path (issue 18): a compression round of a
// sequence that holds lower-precision tiers besides its full-precision slots. The policy ranks
// every held token, demoted ones included (CompressionPolicy::RankForDemotion); the best
// `budget` stay exact, the next ones go to the tiers, only the rest are evicted:
//
//   before:  full slots  [0, lo) pinned | [lo, scored_end) candidates | [scored_end, n) window
//            tier 1      [0, n_1)   e.g. int8      (blocks of the tier's own pool)
//            tier 2      [0, n_2)   e.g. int4
//
//   union of candidates, ranked per (layer, KV head) row:  tier 1 | tier 2 | full candidates
//   class per token (PlanTieredRow): 0 full, t tier t, -1 evicted; never better than held
//
//   after:   full slots  [0, lo) | kept, ascending | window        (CompactKv, as a plain round)
//            tier t      [ stayers, in their old order | newcomers, ascending ]   whole blocks
//
// Sinks, the recent window and a protected prompt are never candidates, so they stay at full
// precision. Tier t's region holds c_t tokens, a multiple of block_size (TierClassSizes), in
// the first c_t / block_size blocks of the tier table the scheduler granted; attention reads
// the sequence as [tier 1 blocks][tier 2 blocks]...[full blocks] (TieredBlock entries).
// Rows that keep their place (the identity prefix of a tier) are not rewritten; the others
// are decoded and encoded again in the tier's dtype, a block at a time (int4 keys get each
// block's exact channel range, adding at most half a step of it per rewrite). A low-rank tier
// (kernels/cpu/kv_tier.h) decodes keys as mu + R^T c and encodes them as P (k - mu): a key
// already in the tier projects onto itself (P R^T = I), so moving it loses nothing more than
// its coefficient dtype's rounding. Scoring reads every held key decoded, so TriAttention sees
// a low-rank key as its projection (its norm term needs the rotated pairs |k_f|, which the
// coefficients alone do not give).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/cpu/kv_demote.h"

namespace kvserve::compression {

// One demotion tier of one sequence: the absolute position of every tier slot, per
// (layer, KV head) row (rows may differ, as SlotState's do).
//
//   positions: [num_layers][num_kv_heads][capacity]   slot i of row r at r * capacity + i
struct TierSlots {
  int64_t size = 0;      // tokens held in every row; a multiple of block_size
  int64_t capacity = 0;  // row stride of positions
  std::vector<int32_t> positions;

  void Reserve(int64_t rows, int64_t new_capacity);
  std::span<const int32_t> row(int64_t r) const {
    return {positions.data() + r * capacity, static_cast<size_t>(size)};
  }
};

// What a round needs of one tier.
struct TierRound {
  const kernels::cpu::KvTierStorage* storage = nullptr;  // host-addressable
  std::span<const int32_t> table;  // blocks granted to the sequence in the tier's pool
  int64_t cap = 0;                 // tokens the request asks for (rounded down to blocks here)
  TierSlots* slots = nullptr;
};

// Round scratch, grown once and reused.
struct DemotionScratch {
  std::vector<double> scores;     // [rows][m]
  std::vector<int8_t> floor;      // [m]
  std::vector<int8_t> cls;        // [rows][m]
  std::vector<int32_t> rank;      // PlanTieredRow
  std::vector<int32_t> keep;      // [rows][num_keep] full slots kept
  std::vector<int32_t> members;   // per tier [rows][c_t] union indices, tiers back to back
  std::vector<int32_t> new_pos;   // like members: positions after the round
  std::vector<float> rows;        // decoded rows of one (layer, head, K|V), all tiers
  std::vector<int64_t> first;     // per tier and row: first rewritten slot
};

}  // namespace kvserve::compression
