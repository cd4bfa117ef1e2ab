#include "compression/kv_compressor.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "compression/policy_factory.h"

namespace kvserve::compression {

KvCompressor::KvCompressor(const PolicyContext* context, KvAccess& kv,
                           std::span<const kernels::cpu::KvTierStorage> tiers)
    : context_(context), kv_(kv), layout_(kv.layout()), tier_storages_(tiers.begin(), tiers.end()) {
  KVS_CHECK(tier_storages_.size() <= static_cast<size_t>(kMaxDemoteTiers),
            "KvCompressor: ", tier_storages_.size(), " demotion tiers");
}

KvCompressor::State* KvCompressor::find(cache::SeqId seq) {
  auto it = states_.find(seq.value());
  return it == states_.end() ? nullptr : &it->second;
}

absl::Status KvCompressor::Track(cache::SeqId seq, const PolicyParams& params, bool auto_mode,
                                 bool resume) {
  auto parked = parked_.find(seq.value());
  if (resume && parked != parked_.end()) {
    states_[seq.value()] = std::move(parked->second);
    parked_.erase(parked);
    return absl::OkStatus();
  }
  if (parked != parked_.end()) parked_.erase(parked);  // recomputed: its KV is gone
  states_.erase(seq.value());
  if (params.kind == config::CompressionPolicyKind::kFull) return absl::OkStatus();
  if (context_ == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("sequence ", seq.value(),
                     " asks for KV compression, but the runner has no policy context"));
  }
  KVS_ASSIGN_OR_RETURN(auto policy, CreatePolicy(params, *context_));
  State st;
  st.slots = policy->NewSlotState();
  // The bound a compressing sequence oscillates under; growing past it only happens for
  // an oversized chunk and costs one reallocation.
  st.slots.Reserve(policy->target_length() + SlackLength(params) + 2 * layout_.block_size);
  st.policy = std::move(policy);
  st.auto_mode = auto_mode;
  states_[seq.value()] = std::move(st);
  return absl::OkStatus();
}

void KvCompressor::Park(cache::SeqId seq) {
  auto it = states_.find(seq.value());
  if (it == states_.end()) return;
  parked_[seq.value()] = std::move(it->second);
  states_.erase(it);
}

void KvCompressor::Forget(cache::SeqId seq) {
  states_.erase(seq.value());
  parked_.erase(seq.value());
}

void KvCompressor::BeginStep(cache::SeqId seq, int64_t first_position, int32_t num_tokens,
                             int64_t kv_len_after) {
  State* st = find(seq);
  if (st == nullptr) return;
  const int64_t first_slot = kv_len_after - num_tokens;
  if (st->slots.size() < first_slot) {
    // Slots the runner inherited (prefix hit, fork): never compacted, so identity positions.
    KVS_CHECK(st->slots.size() == 0, "sequence ", seq.value(), " tracks ", st->slots.size(),
              " slots but its step starts at slot ", first_slot);
    st->slots.Append(0, first_slot);
  }
  KVS_CHECK(st->slots.size() == first_slot, "sequence ", seq.value(), " tracks ", st->slots.size(),
            " slots but its step starts at slot ", first_slot);
  st->slots.Append(first_position, num_tokens);
}

const model::ForwardObservers* KvCompressor::PrepareObservers(std::span<const BatchSeq> batch,
                                                              std::span<const int32_t> positions) {
  observing_.clear();
  query_rows_ = 0;
  bool want_queries = false, want_mass = false;
  mass_stride_ = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    State* st = find(batch[i].seq);
    if (st == nullptr) continue;
    const ObserverNeeds needs = st->policy->needs();
    if (!needs.pre_rope_queries && !needs.attention_mass) continue;
    observing_.push_back({static_cast<int>(i), st, 0});
    want_queries |= needs.pre_rope_queries;
    want_mass |= needs.attention_mass;
  }
  if (observing_.empty()) return nullptr;
  batch_ = batch;
  positions_ = positions;
  observers_ = model::ForwardObservers{};
  if (want_mass) {
    for (const BatchSeq& b : batch) mass_stride_ = std::max(mass_stride_, b.kv_len);
    mass_.resize(static_cast<size_t>(layout_.num_layers) * batch.size() * layout_.num_kv_heads *
                 mass_stride_);
    observers_.attention_mass = mass_;
    observers_.mass_stride = mass_stride_;
  }
  if (want_queries) {
    query_rows_ = static_cast<int64_t>(positions.size());
    const size_t q_size = static_cast<size_t>(context_->num_q_heads) * context_->head_dim;
    const size_t need =
        static_cast<size_t>(layout_.num_layers) * static_cast<size_t>(query_rows_) * q_size;
    if (queries_.size() < need) queries_.resize(need);
    observers_.pre_rope_queries = std::span<float>(queries_.data(), need);
  }
  return &observers_;
}

void KvCompressor::DropRejected(cache::SeqId seq, int32_t num_rejected) {
  State* st = find(seq);
  if (st == nullptr || num_rejected == 0) return;
  KVS_CHECK(!st->policy->needs().attention_mass, "sequence ", seq.value(),
            " drafted under a policy that reads attention mass");
  KVS_CHECK(num_rejected > 0 && num_rejected <= st->slots.size(), "sequence ", seq.value(),
            " rejects ", num_rejected, " of ", st->slots.size(), " slots");
  st->slots.Shrink(st->slots.size() - num_rejected);
  for (Observing& o : observing_) {
    if (o.state == st) o.rejected = num_rejected;
  }
}

void KvCompressor::FinishObservers() {
  if (query_rows_ > 0) {
    const int64_t q_size = static_cast<int64_t>(context_->num_q_heads) * context_->head_dim;
    for (const Observing& o : observing_) {
      if (!o.state->policy->needs().pre_rope_queries) continue;
      const BatchSeq& b = batch_[static_cast<size_t>(o.index)];
      o.state->policy->ObserveQueries(
          o.state->slots, QueryView::FromObservers(queries_, query_rows_, q_size, positions_.data(),
                                                   b.row_begin, b.num_rows - o.rejected));
    }
  }
  if (mass_stride_ > 0) {
    for (const Observing& o : observing_) {
      const int i = o.index;
      State* st = o.state;
      if (!st->policy->needs().attention_mass) continue;
      st->policy->ObserveAttentionMass(
          st->slots, MassView::FromObservers(mass_, mass_stride_, static_cast<int>(batch_.size()),
                                             i, layout_.num_kv_heads, batch_[i].kv_len));
    }
  }
  observing_.clear();
  mass_stride_ = 0;
  query_rows_ = 0;
}

absl::StatusOr<std::optional<RoundResult>> KvCompressor::EndStep(
    cache::SeqId seq, int64_t next_position, bool pressure, std::vector<int32_t>& table,
    std::span<const std::vector<int32_t>> tier_tables) {
  State* st = find(seq);
  if (st == nullptr) return std::nullopt;
  const int64_t n = st->slots.size();
  if (st->auto_mode && !pressure) return std::nullopt;
  if (!st->policy->Due(n, next_position)) return std::nullopt;

  RoundInput in;
  in.kv = &kv_;
  in.block_table = table;
  in.phys_len = n;
  in.slots = &st->slots;
  in.next_position = next_position;
  // Demotion once the scheduler granted tier blocks (demotion_round.h); a plain round before.
  std::array<TierRound, kMaxDemoteTiers> tiers;
  int num_tiers = 0;
  bool granted = false;
  const PolicyParams& p = st->policy->params();
  if (p.demotes()) {
    num_tiers =
        std::min(static_cast<int>(tier_storages_.size()), static_cast<int>(tier_tables.size()));
    for (int t = 0; t < num_tiers; ++t) {
      TierRound& tr = tiers[static_cast<size_t>(t)];
      tr.storage = &tier_storages_[static_cast<size_t>(t)];
      tr.table = tier_tables[static_cast<size_t>(t)];
      tr.cap = p.demote_tokens[static_cast<size_t>(t)];
      tr.slots = &st->tiers[static_cast<size_t>(t)];
      granted |= tr.cap >= layout_.block_size && tr.table.size() > 0;
      granted |= tr.slots->size > 0;
    }
  }
  RoundResult r;
  if (granted) {
    KVS_ASSIGN_OR_RETURN(
        r, st->policy->RunDemoting(in, std::span<const TierRound>(tiers.data(), num_tiers)));
  } else {
    KVS_ASSIGN_OR_RETURN(r, st->policy->Run(in));
  }
  if (!r.compacted) return std::nullopt;
  table.resize(static_cast<size_t>(r.blocks_after));
  return r;
}

}  // namespace kvserve::compression
