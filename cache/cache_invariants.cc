#include "cache/cache_invariants.h"

#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cache/kv_cache_manager.h"

namespace kvserve::cache {
namespace {

absl::Status Violation(std::string msg) {
  return absl::FailedPreconditionError(absl::StrCat("cache invariant: ", msg));
}

absl::Status CheckPool(const BlockPool& pool) {
  const int32_t n = pool.num_blocks();
  if (pool.num_free() + pool.num_used() != pool.num_usable()) {
    return Violation(absl::StrCat("free ", pool.num_free(), " + used ", pool.num_used(),
                                  " != usable ", pool.num_usable()));
  }
  std::vector<uint8_t> queued(n, 0);
  int32_t walked = 0;
  absl::Status st;
  pool.free_queue().for_each([&](BlockId b) {
    if (!st.ok()) return;
    if (b.value() <= 0 || b.value() >= n) {
      st = Violation(absl::StrCat("free queue holds bad id ", b.value()));
    } else if (queued[b.value()]++) {
      st = Violation(absl::StrCat("block ", b.value(), " queued twice"));
    }
    ++walked;
  });
  KVS_RETURN_IF_ERROR(st);
  if (walked != pool.num_free()) {
    return Violation(absl::StrCat("free queue walk found ", walked, " blocks, size says ",
                                  pool.num_free()));
  }
  int32_t cached_free = 0;
  for (int32_t i = 1; i < n; ++i) {
    const BlockId b{i};
    const bool zero = pool.refcount(b) == 0;
    if (pool.refcount(b) < 0) return Violation(absl::StrCat("block ", i, " refcount < 0"));
    if (zero != static_cast<bool>(queued[i])) {
      return Violation(absl::StrCat("block ", i, " refcount ", pool.refcount(b),
                                    queued[i] ? " but in the free queue" : " but not free"));
    }
    if (zero && pool.hash(b) != kNoHash) ++cached_free;
  }
  if (cached_free != pool.num_cached_free()) {
    return Violation(absl::StrCat("cached free blocks ", cached_free, " != counter ",
                                  pool.num_cached_free()));
  }
  // Prefix index <-> block hashes.
  int32_t indexed = 0;
  std::vector<uint8_t> seen(n, 0);
  pool.index().for_each([&](BlockHash h, BlockId b) {
    if (!st.ok()) return;
    ++indexed;
    if (b.value() <= 0 || b.value() >= n) {
      st = Violation(absl::StrCat("prefix index holds bad id ", b.value()));
    } else if (seen[b.value()]++) {
      st = Violation(absl::StrCat("block ", b.value(), " indexed twice"));
    } else if (pool.hash(b) != h) {
      st = Violation(absl::StrCat("block ", b.value(), " indexed under a hash it does not hold"));
    }
  });
  KVS_RETURN_IF_ERROR(st);
  int32_t hashed = 0;
  for (int32_t i = 1; i < n; ++i) hashed += pool.hash(BlockId{i}) != kNoHash;
  if (hashed != indexed || indexed != pool.index().size()) {
    return Violation(absl::StrCat(hashed, " hashed blocks, ", indexed, " indexed, index size ",
                                  pool.index().size()));
  }
  return absl::OkStatus();
}

// Demotion tier pools: each granted block has exactly one holder (a resident sequence), and
// a block is used in its pool iff some sequence holds it: no leak, no double grant.
absl::Status CheckTierPools(const KvCacheManager& m) {
  for (int t = 0; t < m.num_demote_tiers(); ++t) {
    const BlockPool& pool = m.tier_pool(t);
    KVS_RETURN_IF_ERROR(CheckPool(pool));
    if (pool.index().size() != 0) return Violation(absl::StrCat("demotion tier ", t + 1, " has published blocks"));
    std::vector<int32_t> refs(static_cast<size_t>(pool.num_blocks()), 0);
    absl::Status st;
    m.for_each_sequence([&](SeqId id, const SequenceKvState& s) {
      if (!st.ok() || static_cast<size_t>(t) >= s.tier_blocks.size()) return;
      if (s.swapped && !s.tier_blocks[static_cast<size_t>(t)].empty()) {
        st = Violation(absl::StrCat("sequence ", id.value(), " is swapped out but holds demotion tier blocks"));
        return;
      }
      for (BlockId b : s.tier_blocks[static_cast<size_t>(t)]) {
        if (b.value() <= 0 || b.value() >= pool.num_blocks()) {
          st = Violation(
              absl::StrCat("sequence ", id.value(), ": tier ", t + 1, " block ", b.value(), " out of range"));
          return;
        }
        ++refs[static_cast<size_t>(b.value())];
      }
    });
    KVS_RETURN_IF_ERROR(st);
    for (int32_t i = 1; i < pool.num_blocks(); ++i) {
      if (refs[static_cast<size_t>(i)] != pool.refcount(BlockId{i}) || refs[static_cast<size_t>(i)] > 1) {
        return Violation(absl::StrCat("demotion tier ", t + 1, " block ", i, " refcount ", pool.refcount(BlockId{i}),
                                      " but ", refs[static_cast<size_t>(i)], " holders"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckCacheInvariants(const KvCacheManager& m) {
  const BlockPool& pool = m.block_pool();
  KVS_RETURN_IF_ERROR(CheckPool(pool));
  // The null block can be neither queued nor indexed (both walks above reject id 0).
  if (pool.is_free(kNullBlock)) return Violation("null block is free");

  const int32_t n = pool.num_blocks();
  const int bs = m.block_size();
  std::vector<int32_t> refs(n, 0);
  const SwapSpace& swap = m.swap_space();
  std::vector<uint8_t> host_owned(swap.num_blocks(), 0);
  int32_t host_total = 0;
  absl::Status st;
  m.for_each_sequence([&](SeqId id, const SequenceKvState& s) {
    if (!st.ok()) return;
    const std::string who = absl::StrCat("sequence ", id.value(), ": ");
    if (s.swapped) {
      if (!s.table.empty() || s.table.num_tokens() != 0 || s.holds_window_blocks()) {
        st = Violation(who + "swapped out but holds device blocks");
        return;
      }
      if (static_cast<int64_t>(s.host_blocks.size()) != s.table.BlocksFor(s.swapped_num_tokens)) {
        st = Violation(absl::StrCat(who, s.host_blocks.size(), " host blocks for ",
                                    s.swapped_num_tokens, " tokens"));
        return;
      }
      for (BlockId h : s.host_blocks) {
        if (h.value() < 0 || h.value() >= swap.num_blocks() || swap.is_free(h) ||
            host_owned[h.value()]++) {
          st = Violation(absl::StrCat(who, "bad, free or shared host block ", h.value()));
          return;
        }
      }
      host_total += static_cast<int32_t>(s.host_blocks.size());
    } else {
      if (!s.host_blocks.empty()) {
        st = Violation(who + "resident but holds host blocks");
        return;
      }
      if (s.table.num_blocks() != s.table.BlocksFor(s.table.num_tokens())) {
        st = Violation(absl::StrCat(who, s.table.num_blocks(), " blocks for ",
                                    s.table.num_tokens(), " tokens"));
        return;
      }
      if (s.released_front < 0 || s.released_front > s.table.num_blocks()) {
        st = Violation(absl::StrCat(who, s.released_front, " released entries of ", s.table.num_blocks()));
        return;
      }
      for (int32_t i = 0; i < s.table.num_blocks(); ++i) {
        const BlockId b = s.table[i];
        // Exactly the released front is null (release_before).
        if (i < s.released_front ? b != kNullBlock : b.value() <= 0 || b.value() >= n) {
          st = Violation(absl::StrCat(who, "table entry ", i, " = ", b.value(), " out of range, or null outside the ",
                                      s.released_front, " released entries"));
          return;
        }
        if (b != kNullBlock) ++refs[b.value()];
      }
      // Window tables (layer groups): same length, exactly the released front null.
      for (const BlockTable& w : s.window) {
        if (w.num_tokens() != s.window[0].num_tokens() ||
            w.num_blocks() != w.BlocksFor(w.num_tokens()) ||
            s.window_released_front > w.num_blocks()) {
          st = Violation(absl::StrCat(who, "window table of ", w.num_blocks(), " blocks for ",
                                      w.num_tokens(), " tokens, ", s.window_released_front,
                                      " released"));
          return;
        }
        for (int32_t i = 0; i < w.num_blocks(); ++i) {
          const BlockId b = w[i];
          if (i < s.window_released_front ? b != kNullBlock : b.value() <= 0 || b.value() >= n) {
            st = Violation(absl::StrCat(who, "window entry ", i, " = ", b.value(),
                                        " out of range or misplaced"));
            return;
          }
          if (b != kNullBlock) ++refs[b.value()];
        }
      }
    }
    const int64_t tokens = s.num_tokens();
    if (static_cast<int64_t>(s.hashes.size()) * bs > tokens) {
      st = Violation(absl::StrCat(who, s.hashes.size(), " committed blocks but ", tokens,
                                  " tokens"));
      return;
    }
    if (!s.swapped) {
      for (size_t i = static_cast<size_t>(s.released_front); i < s.hashes.size(); ++i) {
        if (pool.hash(s.table[static_cast<int32_t>(i)]) != s.hashes[i]) {
          st = Violation(absl::StrCat(who, "committed block ", i, " (id ",
                                      s.table[static_cast<int32_t>(i)].value(),
                                      ") does not hold its chain hash"));
          return;
        }
      }
    }
  });
  KVS_RETURN_IF_ERROR(st);
  KVS_RETURN_IF_ERROR(CheckTierPools(m));

  for (int32_t i = 1; i < n; ++i) {
    if (refs[i] != pool.refcount(BlockId{i})) {
      return Violation(absl::StrCat("block ", i, " refcount ", pool.refcount(BlockId{i}), " but ",
                                    refs[i], " table entries"));
    }
  }
  // Host pool: every used host block has exactly one holder: a swapped-out sequence, the
  // host prefix tier, or the quarantine (kv_cache_manager.h).
  const HostPrefixCache& hc = m.host_cache();
  int32_t held = 0;
  hc.for_each([&](BlockId h, const HostBlockInfo& info) {
    if (!st.ok()) return;
    ++held;
    if (h.value() < 0 || h.value() >= swap.num_blocks() || swap.is_free(h) || host_owned[h.value()]++) {
      st = Violation(absl::StrCat("host prefix tier holds a bad, free or shared host block ", h.value()));
    } else if (info.hash == kNoHash || hc.find(info.hash) != h) {
      st = Violation(absl::StrCat("host prefix block ", h.value(), " is not indexed under its hash"));
    }
  });
  KVS_RETURN_IF_ERROR(st);
  if (held != hc.index_size() || held > hc.capacity()) {
    return Violation(absl::StrCat("host prefix tier: ", held, " blocks in its LRU, ", hc.index_size(),
                                  " indexed, capacity ", hc.capacity()));
  }
  for (BlockId h : m.host_quarantine()) {
    if (h.value() < 0 || h.value() >= swap.num_blocks() || swap.is_free(h) || host_owned[h.value()]++) {
      return Violation(absl::StrCat("quarantined host block ", h.value(), " is bad, free or held elsewhere"));
    }
  }
  const int32_t holders = host_total + held + static_cast<int32_t>(m.host_quarantine().size());
  if (holders != swap.num_used() || swap.num_free() + swap.num_used() != swap.num_blocks()) {
    return Violation(absl::StrCat("host pool: ", host_total, " blocks swapped, ", held, " in the prefix tier, ",
                                  m.host_quarantine().size(), " quarantined, ", swap.num_used(), " used, ",
                                  swap.num_free(), " free of ", swap.num_blocks()));
  }
  return absl::OkStatus();
}

}  // namespace kvserve::cache
