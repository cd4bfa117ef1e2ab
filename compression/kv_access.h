// How compression reaches a sequence's KV: through this interface, never through raw
// pointers into the pool, so the same policies run over host KV (HostKvAccess, the CPU
// reference) and over device KV (a backend reads the keys a round scores back to the host
// and applies the keep plan with its own gather).
//
//   round (CompressionPolicy::Run), one sequence:
//     ReadRows(table, layer, K, head, lo, n)  ──► host float rows the policy scores
//     policy selects keep [layers][kv heads][K]          (host, float64)
//     Compact(table, plan)                    ──► K/V (+ scales) moved in the backend's memory
//     SlotState::ApplyKeepPlan(plan)          ──► positions / mass moved on the host
//
// Only keep lists and the keys of the scored rows cross between host and device. Not
// thread-safe; the runner's engine thread owns it and nothing else touches the KV during a
// round.
#pragma once

#include <cstdint>
#include <span>

#include "cache/kv_layout.h"
#include "kernels/cpu/kv_compact.h"

namespace kvserve::compression {

// A keep plan is plain data (kernels/cpu/kv_compact.h): which candidates every (layer, KV
// head) row keeps. Backends copy it to wherever their KV lives.
using KeepPlan = kernels::cpu::KeepPlan;
using CompactStats = kernels::cpu::CompactStats;

class KvAccess {
 public:
  virtual ~KvAccess() = default;

  virtual const cache::KvLayout& layout() const = 0;

  // Dequantizes rows [begin, end) of (layer, kv: 0=K 1=V, head) of the sequence whose block
  // table is `table` (covering at least `end` slots) into host memory out: [end - begin][head_dim].
  virtual void ReadRows(std::span<const int32_t> table, int layer, int kv, int head, int64_t begin, int64_t end,
                        float* out) = 0;

  // Moves the sequence's K/V (and their scales) as `plan` says (kv_compact.h semantics).
  // Per-slot host state (positions, attention mass) is the caller's: SlotState::ApplyKeepPlan.
  // The plan has been checked with kernels::cpu::ValidateKeepPlan against this layout and table.
  virtual CompactStats Compact(std::span<const int32_t> table, const KeepPlan& plan) = 0;
};

}  // namespace kvserve::compression
