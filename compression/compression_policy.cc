#include "compression/compression_policy.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/absl_compat.h"
#include "base/check.h"
#include "compression/policy_params.h"
#include "config/fields.h"

namespace kvserve::compression {

CompressionPolicy::CompressionPolicy(const PolicyParams& params, const PolicyContext& context)
    : params_(params),
      context_(context),
      lo_(params.kind == config::CompressionPolicyKind::kFull ? 0 : FirstEvictableSlot(params)),
      target_(params.kind == config::CompressionPolicyKind::kFull ? 0 : TargetLength(params)) {
  KVS_CHECK(context.clock != nullptr, "PolicyContext::clock is required");
  KVS_CHECK(context.num_kv_heads > 0 && context.num_q_heads % context.num_kv_heads == 0);
}

bool CompressionPolicy::Due(int64_t phys_len, int64_t next_position) const {
  // Prefill (and the step that completes it) is not a decode step: no round unless asked.
  if (!params_.compress_prefill && next_position <= params_.prompt_len) return false;
  return target_ > 0 && phys_len >= target_ + SlackLength(params_);
}

SlotState CompressionPolicy::NewSlotState() const {
  SlotStateOptions o;
  o.num_layers = context_.num_layers;
  o.num_kv_heads = context_.num_kv_heads;
  return SlotState(o);
}

void CompressionPolicy::ObserveQueries(SlotState& slots, const QueryView& q) const {
  for (int l = 0; l < context_.num_layers; ++l) {  // no-op unless the state keeps queries
    slots.AddQueries(l, q.data + l * q.layer_stride, q.row_stride, q.positions, q.num_rows);
  }
}

void CompressionPolicy::ObserveAttentionMass(SlotState& slots, const MassView& mass) const {
  if (!slots.tracks_mass()) return;
  for (int l = 0; l < context_.num_layers; ++l) {
    for (int h = 0; h < context_.num_kv_heads; ++h) {
      slots.AddMass(l, h, mass.data + l * mass.layer_stride + h * mass.head_stride, mass.kv_len);
    }
  }
}

absl::Status CompressionPolicy::RankForDemotion(const RoundInput& in, int64_t m,
                                                KeyReader read_keys, std::span<double> scores,
                                                RoundResult& timings) {
  (void)in, (void)m, (void)read_keys, (void)scores, (void)timings;
  return absl::FailedPreconditionError(absl::StrCat("compression round: policy ",
                                                    base::AsAbsl(config::Name(params_.kind)),
                                                    " does not rank tokens for demotion"));
}

absl::Status CompressionPolicy::CheckRound(const RoundInput& in) const {
  if (in.slots == nullptr) return absl::InvalidArgumentError("compression round: no SlotState");
  if (in.kv == nullptr) return absl::InvalidArgumentError("compression round: no KvAccess");
  const cache::KvLayout& layout = in.kv->layout();
  if (layout.num_layers != context_.num_layers || layout.num_kv_heads != context_.num_kv_heads ||
      layout.head_dim != context_.head_dim) {
    return absl::InvalidArgumentError("compression round: KV layout does not match the model");
  }
  const int64_t n = in.phys_len;
  if (n < 0 || static_cast<int64_t>(in.block_table.size()) < BlocksFor(n, layout.block_size)) {
    return absl::InvalidArgumentError(absl::StrCat("compression round: block table of ",
                                                   in.block_table.size(), " blocks cannot hold ", n,
                                                   " slots"));
  }
  if (in.slots->size() != n) {
    return absl::FailedPreconditionError(absl::StrCat(
        "compression round: SlotState holds ", in.slots->size(), " slots, the sequence ", n));
  }
  return absl::OkStatus();
}

absl::Status CompressionPolicy::CheckPositions(const RoundInput& in) const {
  const cache::KvLayout& layout = in.kv->layout();
  if (!in.slots->tracks_slots() || in.slots->options().num_layers != context_.num_layers ||
      in.slots->options().num_kv_heads != context_.num_kv_heads) {
    return absl::FailedPreconditionError(
        "compression round: the SlotState was not made by this policy's NewSlotState");
  }
  const int64_t n = in.phys_len;
  const int64_t rows = static_cast<int64_t>(layout.num_layers) * layout.num_kv_heads;
  for (int64_t row = 0; row < rows; ++row) {
    const std::span<const int32_t> pos = in.slots->positions(
        static_cast<int>(row / layout.num_kv_heads), static_cast<int>(row % layout.num_kv_heads));
    if (pos[n - 1] >= in.next_position) {
      return absl::InvalidArgumentError(
          absl::StrCat("compression round: next_position ", in.next_position,
                       " is not after the cached position ", pos[n - 1]));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<RoundResult> CompressionPolicy::Run(const RoundInput& in) {
  KVS_RETURN_IF_ERROR(CheckRound(in));
  const cache::KvLayout& layout = in.kv->layout();
  const int64_t n = in.phys_len;
  RoundResult r;
  r.phys_len_before = n;
  r.new_phys_len = n;
  r.blocks_before = r.blocks_after = BlocksFor(n, layout.block_size);
  if (target_ == 0 || n <= target_) return r;  // nothing to evict: touch nothing
  KVS_RETURN_IF_ERROR(CheckPositions(in));

  const int64_t lo = lo_;
  const int64_t num_keep = target_ - lo;
  KVS_CHECK(lo < n && num_keep > 0 && num_keep < n - lo);
  const int64_t rows = static_cast<int64_t>(layout.num_layers) * layout.num_kv_heads;
  keep_.resize(static_cast<size_t>(rows * num_keep));
  KVS_RETURN_IF_ERROR(SelectKeep(in, lo, num_keep, keep_, r));
  KeepLatestInWindowLayers(n, num_keep);

  const kernels::cpu::KeepPlan plan{lo, n, n, num_keep, keep_.data()};
  if (absl::Status st =
          kernels::cpu::ValidateKeepPlan(layout, static_cast<int64_t>(in.block_table.size()), plan);
      !st.ok()) {
    return absl::InternalError(
        absl::StrCat("compression round: policy produced a bad plan: ", st.message()));
  }
  // Audit before the move, while the dropped slots still hold their positions.
  CollectEvicted(in, keep_.data(), lo, num_keep, r);

  const base::Nanos t0 = context_.clock->now_ns();
  const CompactStats cs = in.kv->Compact(in.block_table, plan);
  in.slots->ApplyKeepPlan(plan);
  KVS_CHECK(in.slots->size() == cs.new_len);
  r.compact_ns += context_.clock->now_ns() - t0;
  r.compacted = true;
  r.new_phys_len = cs.new_len;
  r.evicted_slots = n - cs.new_len;
  r.blocks_after = BlocksFor(cs.new_len, layout.block_size);
  r.bytes_moved = cs.bytes_moved;
  return r;
}

void CompressionPolicy::KeepLatestInWindowLayers(int64_t n, int64_t num_keep) {
  if (context_.layer_window.empty()) return;
  const int kv_heads = context_.num_kv_heads;
  for (int layer = 0; layer < context_.num_layers; ++layer) {
    if (!context_.windowed(layer)) continue;
    for (int h = 0; h < kv_heads; ++h) {
      int32_t* k = keep_.data() + (static_cast<int64_t>(layer) * kv_heads + h) * num_keep;
      for (int64_t i = 0; i < num_keep; ++i) k[i] = static_cast<int32_t>(n - num_keep + i);
    }
  }
}

absl::Status CheckWindowBudget(const PolicyParams& params, const PolicyContext& context) {
  if (params.kind == config::CompressionPolicyKind::kFull || context.binding_window <= 0)
    return absl::OkStatus();
  if (params.demotes()) {
    // Demoted tokens leave the pool's rows, window layers' included, which keep only the latest.
    return absl::InvalidArgumentError(
        "kv_compression.demote: demotion tiers are not available on models with sliding-window "
        "layers");
  }
  if (context.window_tables) return absl::OkStatus();
  const int64_t lo = FirstEvictableSlot(params);
  if (params.budget - lo >= context.binding_window - 1) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "kv_compression.budget (", params.budget, ") must keep the model's sliding window (",
      context.binding_window, " tokens) after the protected prefix (", lo, " tokens): at least ",
      lo + context.binding_window - 1,
      " on this model, whose window layers keep their latest tokens in every round"));
}

void CompressionPolicy::NewAuditEpoch(int64_t next_position) {
  const size_t t = static_cast<size_t>(next_position);
  if (dropped_mark_.size() < t) {
    dropped_mark_.resize(t, 0);
    held_mark_.resize(t, 0);
  }
  if (++epoch_ == 0) {  // wrapped: old stamps could alias the new epoch
    std::fill(dropped_mark_.begin(), dropped_mark_.end(), 0);
    std::fill(held_mark_.begin(), held_mark_.end(), 0);
    epoch_ = 1;
  }
}

void CompressionPolicy::CollectEvicted(const RoundInput& in, const int32_t* keep, int64_t lo,
                                       int64_t num_keep, RoundResult& r) {
  NewAuditEpoch(in.next_position);
  const int64_t n = in.phys_len;
  const int kv_heads = context_.num_kv_heads;
  const int64_t rows = static_cast<int64_t>(context_.num_layers) * kv_heads;
  // Positions of the prefix [0, lo) are the same in every row and never dropped, so only the
  // candidates need marks: a candidate is held if any row keeps it.
  for (int64_t row = 0; row < rows; ++row) {
    const std::span<const int32_t> pos =
        in.slots->positions(static_cast<int>(row / kv_heads), static_cast<int>(row % kv_heads));
    const int32_t* k = keep + row * num_keep;
    int64_t next = 0;
    for (int64_t j = lo; j < n; ++j) {
      const size_t p = static_cast<size_t>(pos[j]);
      if (next < num_keep && k[next] == j) {
        held_mark_[p] = epoch_;
        ++next;
      } else if (dropped_mark_[p] != epoch_) {
        dropped_mark_[p] = epoch_;
        r.evicted_positions.push_back(pos[j]);
      }
    }
  }
  std::erase_if(r.evicted_positions,
                [&](int64_t p) { return held_mark_[static_cast<size_t>(p)] == epoch_; });
  std::sort(r.evicted_positions.begin(), r.evicted_positions.end());
  r.evicted_prompt_tokens = std::count_if(r.evicted_positions.begin(), r.evicted_positions.end(),
                                          [&](int64_t p) { return p < params_.prompt_len; });
}

}  // namespace kvserve::compression
