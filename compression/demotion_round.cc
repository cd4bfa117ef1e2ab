#include "compression/demotion_round.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "compression/compression_policy.h"
#include "compression/demotion.h"
#include "kernels/cpu/kv_tier.h"

namespace kvserve::compression {

void TierSlots::Reserve(int64_t rows, int64_t new_capacity) {
  if (new_capacity <= capacity) return;
  std::vector<int32_t> p(static_cast<size_t>(rows * new_capacity), 0);
  for (int64_t r = 0; r < rows; ++r) {
    std::copy_n(positions.data() + r * capacity, size, p.data() + r * new_capacity);
  }
  positions = std::move(p);
  capacity = new_capacity;
}

absl::StatusOr<RoundResult> CompressionPolicy::RunDemoting(const RoundInput& in, std::span<const TierRound> tiers) {
  KVS_RETURN_IF_ERROR(CheckRound(in));
  const cache::KvLayout& layout = in.kv->layout();
  const int64_t n = in.phys_len;
  const int bs = layout.block_size;
  const int hd = layout.head_dim;
  const int heads = layout.num_kv_heads;
  const int64_t rows = static_cast<int64_t>(layout.num_layers) * heads;
  const int num_tiers = static_cast<int>(tiers.size());
  if (num_tiers > kMaxDemoteTiers) {
    return absl::InvalidArgumentError(absl::StrCat("demoting round: ", num_tiers, " tiers, at most ", kMaxDemoteTiers));
  }
  RoundResult r;
  r.phys_len_before = n;
  r.new_phys_len = n;
  r.blocks_before = r.blocks_after = BlocksFor(n, bs);
  for (int t = 0; t < num_tiers; ++t) r.tier_tokens[static_cast<size_t>(t)] = tiers[t].slots->size;
  if (target_ == 0 || n <= target_) return r;  // nothing to evict or demote: touch nothing
  KVS_RETURN_IF_ERROR(CheckPositions(in));
  for (int t = 0; t < num_tiers; ++t) {
    const TierRound& tr = tiers[t];
    if (tr.storage == nullptr || tr.slots == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("demoting round: tier ", t + 1, " has no storage or state"));
    }
    const cache::KvLayout& tl = tr.storage->layout;
    if (tl.num_layers != layout.num_layers || tl.num_kv_heads != heads || tl.head_dim != hd || tl.block_size != bs) {
      return absl::InvalidArgumentError(
          absl::StrCat("demoting round: tier ", t + 1, " differs from the pool in geometry"));
    }
    if ((tl.key_rank > 0) != (tr.storage->key_basis != nullptr) || tl.key_rank > hd) {
      return absl::InvalidArgumentError(
          absl::StrCat("demoting round: tier ", t + 1, " has key rank ", tl.key_rank, " and ",
                       tr.storage->key_basis != nullptr ? "a" : "no", " key basis"));
    }
    if (tr.slots->size % bs != 0 || tr.slots->size > static_cast<int64_t>(tr.table.size()) * bs) {
      return absl::FailedPreconditionError(absl::StrCat("demoting round: tier ", t + 1, " holds ", tr.slots->size,
                                                        " tokens in ", tr.table.size(), " blocks"));
    }
  }

  const base::Clock& clock = *context_.clock;
  const int64_t lo = lo_;
  const int64_t num_keep = target_ - lo;
  const int64_t window = std::min(RecentWindow(params_), n - lo);
  const int64_t scored_end = n - window;
  const int64_t m_full = scored_end - lo;
  const int64_t pick = num_keep - window;
  KVS_CHECK(pick >= 0 && pick <= m_full, "demoting round: keep ", num_keep, " with window ", window, " of ", n - lo);

  // The union of candidates: tier 1 | tier 2 | ... | full [lo, scored_end).
  int64_t start[kMaxDemoteTiers] = {}, held[kMaxDemoteTiers] = {}, caps[kMaxDemoteTiers] = {};
  int64_t m = 0;
  for (int t = 0; t < num_tiers; ++t) {
    start[t] = m;
    held[t] = tiers[t].slots->size;
    caps[t] = std::min<int64_t>(tiers[t].cap, static_cast<int64_t>(tiers[t].table.size()) * bs);
    m += held[t];
  }
  const int64_t full_start = m;
  m += m_full;
  int64_t sizes[kMaxClasses] = {};
  const std::span<int64_t> class_sizes(sizes, static_cast<size_t>(num_tiers) + 1);
  TierClassSizes(m_full, pick, std::span<const int64_t>(held, static_cast<size_t>(num_tiers)),
                 std::span<const int64_t>(caps, static_cast<size_t>(num_tiers)), bs, class_sizes);
  for (int t = 0; t < num_tiers; ++t) tiers[t].slots->Reserve(rows, sizes[t + 1]);

  DemotionScratch& d = demotion_;
  d.scores.resize(static_cast<size_t>(rows * m));
  auto read_keys = [&](int layer, int head, float* out) {
    for (int t = 0; t < num_tiers; ++t) {
      const kernels::cpu::KvTierStorage& st = *tiers[t].storage;
      for (int64_t i = 0; i < held[t]; ++i) {
        kernels::cpu::ReadTierRow(st, layer, tiers[t].table[static_cast<size_t>(i / bs)], 0, head,
                                  static_cast<int>(i % bs), out + (start[t] + i) * hd);
      }
    }
    if (m_full > 0) in.kv->ReadRows(in.block_table, layer, 0, head, lo, scored_end, out + full_start * hd);
  };
  KVS_RETURN_IF_ERROR(RankForDemotion(in, m, read_keys, d.scores, r));
  const base::Nanos t_select = clock.now_ns();

  // Classes per row, then the full keep lists and each tier's new members (union indices):
  // stayers first, in their old order, then newcomers ascending.
  d.floor.assign(static_cast<size_t>(m), 0);
  for (int t = 0; t < num_tiers; ++t) {
    std::fill_n(d.floor.begin() + start[t], held[t], static_cast<int8_t>(t + 1));
  }
  d.cls.resize(static_cast<size_t>(rows * m));
  for (int64_t row = 0; row < rows; ++row) {
    PlanTieredRow(std::span<const double>(d.scores.data() + row * m, static_cast<size_t>(m)), d.floor, class_sizes,
                  std::span<int8_t>(d.cls.data() + row * m, static_cast<size_t>(m)), d.rank);
  }
  int64_t mem_start[kMaxDemoteTiers] = {};
  int64_t total = 0;
  for (int t = 0; t < num_tiers; ++t) {
    mem_start[t] = total;
    total += rows * sizes[t + 1];
  }
  d.keep.resize(static_cast<size_t>(rows * num_keep));
  d.members.resize(static_cast<size_t>(total));
  d.new_pos.resize(static_cast<size_t>(total));
  auto members = [&](int t, int64_t row) { return d.members.data() + mem_start[t] + row * sizes[t + 1]; };
  for (int64_t row = 0; row < rows; ++row) {
    const int8_t* c = d.cls.data() + row * m;
    int32_t* k = d.keep.data() + row * num_keep;
    int64_t nk = 0;
    for (int64_t j = 0; j < m_full; ++j) {
      if (c[full_start + j] == 0) k[nk++] = static_cast<int32_t>(lo + j);
    }
    KVS_CHECK(nk == pick, "demoting round: row ", row, " keeps ", nk, " of ", pick);
    for (int64_t i = 0; i < window; ++i) k[nk++] = static_cast<int32_t>(scored_end + i);
    for (int t = 0; t < num_tiers; ++t) {
      int32_t* mem = members(t, row);
      int64_t nm = 0;
      for (int64_t i = 0; i < held[t]; ++i) {
        if (c[start[t] + i] == t + 1) mem[nm++] = static_cast<int32_t>(start[t] + i);
      }
      for (int64_t u = 0; u < m; ++u) {
        const bool own = u >= start[t] && u < start[t] + held[t];
        if (!own && c[u] == t + 1) mem[nm++] = static_cast<int32_t>(u);
      }
      KVS_CHECK(nm == sizes[t + 1], "demoting round: row ", row, " puts ", nm, " tokens in tier ", t + 1, " of ",
                sizes[t + 1]);
    }
  }

  // Absolute position of union index u in a row (before the round moves anything).
  auto pos_of = [&](int64_t row, int64_t u) -> int32_t {
    for (int t = 0; t < num_tiers; ++t) {
      if (u >= start[t] && u < start[t] + held[t]) return tiers[t].slots->row(row)[static_cast<size_t>(u - start[t])];
    }
    return in.slots->positions(static_cast<int>(row / heads), static_cast<int>(row % heads))[static_cast<size_t>(
        lo + u - full_start)];
  };
  // Audit (as CollectEvicted): a position is reported once no row holds it in any class.
  NewAuditEpoch(in.next_position);
  int64_t demoted = 0;
  for (int64_t row = 0; row < rows; ++row) {
    const int8_t* c = d.cls.data() + row * m;
    for (int64_t u = 0; u < m; ++u) {
      const size_t p = static_cast<size_t>(pos_of(row, u));
      if (c[u] >= 0) {
        held_mark_[p] = epoch_;
        if (c[u] > d.floor[static_cast<size_t>(u)]) ++demoted;
      } else if (dropped_mark_[p] != epoch_) {
        dropped_mark_[p] = epoch_;
        r.evicted_positions.push_back(static_cast<int64_t>(p));
      }
    }
  }
  std::erase_if(r.evicted_positions, [&](int64_t p) { return held_mark_[static_cast<size_t>(p)] == epoch_; });
  std::sort(r.evicted_positions.begin(), r.evicted_positions.end());
  r.evicted_prompt_tokens = std::count_if(r.evicted_positions.begin(), r.evicted_positions.end(),
                                          [&](int64_t p) { return p < params_.prompt_len; });
  r.demoted_tokens = demoted / rows;
  for (int t = 0; t < num_tiers; ++t) {
    for (int64_t row = 0; row < rows; ++row) {
      const int32_t* mem = members(t, row);
      int32_t* np = d.new_pos.data() + mem_start[t] + row * sizes[t + 1];
      for (int64_t i = 0; i < sizes[t + 1]; ++i) np[i] = pos_of(row, mem[i]);
    }
  }
  const base::Nanos t_move = clock.now_ns();
  r.select_ns += t_move - t_select;

  // Tier rows: per (layer, head, K|V), every rewritten row of every tier is decoded before any
  // is encoded (a tier's sources include its own slots and the tier above). Blocks in front of
  // a row's first change keep their bytes.
  d.first.resize(static_cast<size_t>(num_tiers * rows));
  for (int t = 0; t < num_tiers; ++t) {
    for (int64_t row = 0; row < rows; ++row) {
      const int32_t* mem = members(t, row);
      int64_t f = 0;
      while (f < sizes[t + 1] && mem[f] == start[t] + f) ++f;
      d.first[static_cast<size_t>(t * rows + row)] = f / bs * bs;
    }
  }
  auto read_row = [&](int layer, int kv, int head, int64_t u, float* out) {
    for (int t = 0; t < num_tiers; ++t) {
      if (u >= start[t] && u < start[t] + held[t]) {
        const kernels::cpu::KvTierStorage& st = *tiers[t].storage;
        const int64_t i = u - start[t];
        kernels::cpu::ReadTierRow(st, layer, tiers[t].table[static_cast<size_t>(i / bs)], kv, head,
                                  static_cast<int>(i % bs), out);
        return;
      }
    }
    const int64_t slot = lo + u - full_start;
    in.kv->ReadRows(in.block_table, layer, kv, head, slot, slot + 1, out);
  };
  for (int layer = 0; layer < layout.num_layers; ++layer) {
    for (int head = 0; head < heads; ++head) {
      const int64_t row = static_cast<int64_t>(layer) * heads + head;
      int64_t need = 0;
      for (int t = 0; t < num_tiers; ++t) need += sizes[t + 1] - d.first[static_cast<size_t>(t * rows + row)];
      if (need == 0) continue;
      if (d.rows.size() < static_cast<size_t>(need * hd)) d.rows.resize(static_cast<size_t>(need * hd));
      for (int kv = 0; kv < 2; ++kv) {
        int64_t o = 0;
        for (int t = 0; t < num_tiers; ++t) {
          const int32_t* mem = members(t, row);
          for (int64_t i = d.first[static_cast<size_t>(t * rows + row)]; i < sizes[t + 1]; ++i, ++o) {
            read_row(layer, kv, head, mem[i], d.rows.data() + o * hd);
          }
        }
        o = 0;
        for (int t = 0; t < num_tiers; ++t) {
          const kernels::cpu::KvTierStorage& st = *tiers[t].storage;
          for (int64_t b = d.first[static_cast<size_t>(t * rows + row)] / bs; b < sizes[t + 1] / bs; ++b, o += bs) {
            kernels::cpu::WriteTierRows(st, layer, tiers[t].table[static_cast<size_t>(b)], kv, head, 0, bs,
                                        d.rows.data() + o * hd, hd);
            r.bytes_moved += static_cast<int64_t>(bs * st.layout.row_bytes(kv));
          }
        }
      }
    }
  }
  for (int t = 0; t < num_tiers; ++t) {
    TierSlots& ts = *tiers[t].slots;
    for (int64_t row = 0; row < rows; ++row) {
      std::copy_n(d.new_pos.data() + mem_start[t] + row * sizes[t + 1], sizes[t + 1],
                  ts.positions.data() + row * ts.capacity);
    }
    ts.size = sizes[t + 1];
    r.tier_tokens[static_cast<size_t>(t)] = ts.size;
  }

  // Full precision: the kept candidates and the window, compacted as a plain round.
  const kernels::cpu::KeepPlan plan{lo, n, n, num_keep, d.keep.data()};
  if (absl::Status st = kernels::cpu::ValidateKeepPlan(layout, static_cast<int64_t>(in.block_table.size()), plan);
      !st.ok()) {
    return absl::InternalError(absl::StrCat("demoting round: bad plan: ", st.message()));
  }
  const CompactStats cs = in.kv->Compact(in.block_table, plan);
  in.slots->ApplyKeepPlan(plan);
  KVS_CHECK(in.slots->size() == cs.new_len);
  r.compact_ns += clock.now_ns() - t_move;
  r.compacted = true;
  r.new_phys_len = cs.new_len;
  r.evicted_slots = n - cs.new_len;
  r.blocks_after = BlocksFor(cs.new_len, bs);
  r.bytes_moved += cs.bytes_moved;
  return r;
}

}  // namespace kvserve::compression
