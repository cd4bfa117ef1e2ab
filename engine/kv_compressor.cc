#include "engine/kv_compressor.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "compression/policy_factory.h"

namespace kvserve::engine {

KvCompressor::KvCompressor(const compression::PolicyContext* context, const cache::KvLayout& layout,
                           std::span<std::byte* const> layer_data, std::span<float* const> layer_scales)
    : context_(context), layout_(layout), layer_data_(layer_data), layer_scales_(layer_scales) {}

KvCompressor::State* KvCompressor::find(cache::SeqId seq) {
  auto it = states_.find(seq.value());
  return it == states_.end() ? nullptr : &it->second;
}

absl::Status KvCompressor::Track(cache::SeqId seq, const compression::PolicyParams& params, bool auto_mode,
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
        absl::StrCat("sequence ", seq.value(), " asks for KV compression, but the runner has no policy context"));
  }
  KVS_ASSIGN_OR_RETURN(auto policy, compression::CreatePolicy(params, *context_));
  State st;
  st.slots = policy->NewSlotState();
  // The bound a compressing sequence oscillates under; growing past it only happens for
  // an oversized chunk and costs one reallocation.
  st.slots.Reserve(policy->target_length() + params.divide_length + 2 * layout_.block_size);
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

compression::ObserverNeeds KvCompressor::needs(cache::SeqId seq) const {
  auto it = states_.find(seq.value());
  return it == states_.end() ? compression::ObserverNeeds{} : it->second.policy->needs();
}

void KvCompressor::BeginStep(cache::SeqId seq, int64_t first_position, int32_t num_tokens, int64_t kv_len_after) {
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

void KvCompressor::ObserveQueries(cache::SeqId seq, int layer, const float* q, int64_t q_stride,
                                  const int32_t* positions, int64_t num_rows) {
  State* st = find(seq);
  if (st == nullptr) return;
  st->policy->ObserveQueries(st->slots, layer, q, q_stride, positions, num_rows);
}

void KvCompressor::ObserveAttentionMass(cache::SeqId seq, const compression::MassView& mass) {
  State* st = find(seq);
  if (st == nullptr) return;
  st->policy->ObserveAttentionMass(st->slots, mass);
}

absl::StatusOr<bool> KvCompressor::EndStep(cache::SeqId seq, int64_t next_position, bool pressure,
                                           std::vector<int32_t>& table, std::vector<scheduler::Compaction>& out) {
  State* st = find(seq);
  if (st == nullptr) return false;
  const int64_t n = st->slots.size();
  if (st->auto_mode && !pressure) return false;
  if (!st->policy->Due(n, next_position)) return false;

  compression::RoundInput in;
  in.kv.layout = layout_;
  in.kv.layer_data = layer_data_;
  if (layout_.has_scales()) in.kv.layer_scales = layer_scales_;
  in.kv.block_table = table;
  in.kv.phys_len = n;
  in.slots = &st->slots;
  in.next_position = next_position;
  KVS_ASSIGN_OR_RETURN(compression::RoundResult r, st->policy->Run(in));
  if (!r.compacted) return false;
  table.resize(static_cast<size_t>(r.blocks_after));
  scheduler::Compaction c;
  c.seq = seq;
  c.next_position = next_position;
  c.phys_len_before = r.phys_len_before;
  c.new_phys_len = r.new_phys_len;
  c.blocks_freed = static_cast<int32_t>(r.blocks_freed());
  c.evicted_positions = std::move(r.evicted_positions);
  c.evicted_prompt_tokens = r.evicted_prompt_tokens;
  c.score_ns = r.score_ns;
  c.select_ns = r.select_ns;
  c.compact_ns = r.compact_ns;
  c.bytes_moved = r.bytes_moved;
  out.push_back(std::move(c));
  return true;
}

}  // namespace kvserve::engine
