#include "engine/fake_model_runner.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace kvserve::engine {
namespace {

constexpr int32_t kEmpty = -1;

uint64_t Mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

}  // namespace

FakeModelRunner::FakeModelRunner(FakeModelRunnerOptions options) : options_(options) {
  device_slots_.assign(static_cast<size_t>(options_.num_device_blocks) * options_.block_size,
                       kEmpty);
  host_slots_.assign(static_cast<size_t>(options_.num_host_blocks) * options_.block_size, kEmpty);
}

int32_t FakeModelRunner::NextToken(const std::vector<int32_t>& history, uint64_t seed,
                                   int vocab_size) {
  // Depends on the last three tokens, the length and the seed: varied but reproducible.
  uint64_t h = Mix(seed + 0x9e3779b97f4a7c15ULL * (history.size() + 1));
  for (size_t i = history.size() >= 3 ? history.size() - 3 : 0; i < history.size(); ++i) {
    h = Mix(h ^ static_cast<uint64_t>(history[i] + 1));
  }
  return static_cast<int32_t>(h % static_cast<uint64_t>(vocab_size));
}

absl::Status FakeModelRunner::Execute(const scheduler::StepPlan& plan,
                                      scheduler::StepResult& result) {
  if (options_.before_step) options_.before_step(plan.step_id);
  result.clear();
  result.step_id = plan.step_id;
  ++steps_;
  if (plan.seqs.empty() && !plan.swap_in.empty()) ++swap_in_only_steps_;
  const int bs = options_.block_size;
  auto copy = [bs](const std::vector<int32_t>& from, std::vector<int32_t>& to,
                   const cache::BlockCopy& c) {
    std::copy_n(from.begin() + static_cast<ptrdiff_t>(c.src.value()) * bs, bs,
                to.begin() + static_cast<ptrdiff_t>(c.dst.value()) * bs);
  };
  for (const auto& c : plan.swap_out) copy(device_slots_, host_slots_, c);
  for (const auto& c : plan.swap_in) copy(host_slots_, device_slots_, c);
  for (const auto& c : plan.copies) copy(device_slots_, device_slots_, c);

  for (const auto& n : plan.new_seqs) {
    Seq s;
    s.history = n.history;
    s.seed = n.sampling.seed.value_or(0) * 31 + static_cast<uint64_t>(n.sampling.sample_index);
    s.compression = n.compression;
    s.compression_auto = n.compression_auto;
    auto parked = parked_.find(n.seq.value());
    if (parked != parked_.end()) {
      if (n.resume) s.slot_pos = std::move(parked->second);
      parked_.erase(parked);
    }
    seqs_[n.seq.value()] = std::move(s);
  }
  for (const auto& q : plan.seqs) {
    auto it = seqs_.find(q.seq.value());
    if (it == seqs_.end()) {
      return absl::InternalError(absl::StrCat("step ", plan.step_id, ": seq ", q.seq.value(),
                                              " unknown to the runner (no NewSeq)"));
    }
    Seq& s = it->second;
    if (q.table_reset) s.table.clear();
    size_t need = static_cast<size_t>(q.table_offset + q.num_new_blocks);
    if (s.table.size() < need) s.table.resize(need);
    for (int i = 0; i < q.num_new_blocks; ++i) {
      s.table[q.table_offset + i] = plan.new_blocks[q.blocks_begin + i].value();
    }
    // Write this step's tokens into their slots, then check every slot of the sequence.
    int64_t first_slot_index = q.kv_len_after - q.num_tokens;
    // Slots not seen yet (prefix hit, fork) hold positions in order; then this step's.
    while (static_cast<int64_t>(s.slot_pos.size()) < first_slot_index) {
      s.slot_pos.push_back(static_cast<int64_t>(s.slot_pos.size()));
    }
    if (static_cast<int64_t>(s.slot_pos.size()) != first_slot_index) {
      return absl::InternalError(absl::StrCat("step ", plan.step_id, ": seq ", q.seq.value(),
                                              " holds ", s.slot_pos.size(),
                                              " slots but writes from slot ", first_slot_index));
    }
    for (int j = 0; j < q.num_tokens; ++j) s.slot_pos.push_back(q.first_position + j);
    const int fed = q.num_tokens - q.num_draft;  // the rest are guesses, not history yet
    for (int j = 0; j < q.num_tokens; ++j) {
      int32_t token = plan.token_ids[q.token_begin + j];
      int64_t pos = q.first_position + j;
      if (j < fed && (pos >= static_cast<int64_t>(s.history.size()) || s.history[pos] != token)) {
        return absl::InternalError(absl::StrCat("step ", plan.step_id, ": seq ", q.seq.value(),
                                                " fed token ", token, " at position ", pos,
                                                " which is not its history"));
      }
      int64_t idx = first_slot_index + j;
      size_t block = static_cast<size_t>(idx / bs);
      if (block >= s.table.size()) {
        return absl::InternalError(absl::StrCat("step ", plan.step_id, ": seq ", q.seq.value(),
                                                " slot ", idx, " beyond its block table"));
      }
      device_slots_[static_cast<size_t>(s.table[block]) * bs + idx % bs] = token;
    }
    tokens_processed_ += q.num_tokens;
    if (q.sample) {
      if (static_cast<int64_t>(s.history.size()) != q.first_position + fed) {
        return absl::InternalError(absl::StrCat("step ", plan.step_id, ": seq ", q.seq.value(),
                                                " samples before its history is fed"));
      }
      // Greedy verification of the guesses against the deterministic "model".
      for (int i = 0; i <= q.num_draft; ++i) {
        scheduler::SampledToken t;
        t.seq = q.seq;
        t.token_id = NextToken(s.history, s.seed, options_.vocab_size);
        t.logprob = -1.0f;
        s.history.push_back(t.token_id);
        result.sampled.push_back(std::move(t));
        if (i < q.num_draft && s.history.back() != plan.token_ids[q.token_begin + fed + i]) break;
      }
    }
    // Rejected guesses' slots are dropped, as the scheduler truncates its table.
    int64_t kept = q.kv_len_after;
    if (q.num_draft > 0) {
      const int64_t accepted =
          static_cast<int64_t>(s.history.size()) - (q.first_position + fed) - 1;
      kept = q.kv_len_after - (q.num_draft - accepted);
      s.slot_pos.resize(static_cast<size_t>(kept));
      s.table.resize(static_cast<size_t>((kept + bs - 1) / bs));
    }
    for (int64_t idx = 0; idx < kept; ++idx) {
      int32_t got = device_slots_[static_cast<size_t>(s.table[idx / bs]) * bs + idx % bs];
      const int64_t pos = s.slot_pos[idx];
      if (got != s.history[pos]) {
        return absl::InternalError(absl::StrCat("step ", plan.step_id, ": seq ", q.seq.value(),
                                                " KV slot ", idx, " (block ", s.table[idx / bs],
                                                ") holds ", got, ", history has ", s.history[pos],
                                                " at position ", pos));
      }
    }
  }
  for (const auto& q : plan.seqs) {
    Seq& s = seqs_.at(q.seq.value());
    if (s.compression.kind == config::CompressionPolicyKind::kFull) continue;
    if (s.compression_auto && !plan.compress_auto) continue;
    const int64_t target = compression::TargetLength(s.compression);
    // Verified slots only: rejected guesses left slot_pos above.
    const int64_t kept = static_cast<int64_t>(s.slot_pos.size());
    if (kept < target + compression::SlackLength(s.compression)) continue;
    absl::Status st =
        Compact(s, q.seq, q.first_position + q.num_tokens - (q.kv_len_after - kept), result);
    if (!st.ok()) return st;
  }
  for (cache::SeqId id : plan.finished) {
    seqs_.erase(id.value());
    parked_.erase(id.value());
  }
  for (cache::SeqId id : plan.preempted) {
    auto it = seqs_.find(id.value());
    if (it != seqs_.end() &&
        std::find(plan.parked.begin(), plan.parked.end(), id) != plan.parked.end()) {
      parked_[id.value()] = std::move(it->second.slot_pos);
    }
    seqs_.erase(id.value());
  }
  return absl::OkStatus();
}

// Keeps slots [0, lo) and the newest target - lo, moved to the front in order.
absl::Status FakeModelRunner::Compact(Seq& s, cache::SeqId id, int64_t next_position,
                                      scheduler::StepResult& result) {
  const int bs = options_.block_size;
  const int64_t n = static_cast<int64_t>(s.slot_pos.size());
  const int64_t lo = compression::FirstEvictableSlot(s.compression);
  const int64_t target = compression::TargetLength(s.compression);
  if (lo >= target || n <= target) return absl::OkStatus();
  auto at = [&](int64_t idx) -> int32_t& {
    return device_slots_[static_cast<size_t>(s.table[idx / bs]) * bs + idx % bs];
  };
  scheduler::Compaction c;
  c.seq = id;
  c.next_position = next_position;
  c.phys_len_before = n;
  c.new_phys_len = target;
  const int64_t drop = n - target;
  for (int64_t idx = lo; idx < lo + drop; ++idx) {
    c.evicted_positions.push_back(s.slot_pos[idx]);
    if (s.slot_pos[idx] < static_cast<int64_t>(s.compression.prompt_len)) ++c.evicted_prompt_tokens;
  }
  for (int64_t idx = lo; idx < target; ++idx) {
    at(idx) = at(idx + drop);
    s.slot_pos[idx] = s.slot_pos[idx + drop];
  }
  s.slot_pos.resize(static_cast<size_t>(target));
  const int64_t blocks_after = (target + bs - 1) / bs;
  c.blocks_freed = static_cast<int32_t>(static_cast<int64_t>(s.table.size()) - blocks_after);
  s.table.resize(static_cast<size_t>(blocks_after));
  result.compactions.push_back(std::move(c));
  return absl::OkStatus();
}

}  // namespace kvserve::engine
