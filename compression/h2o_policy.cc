#include "compression/h2o_policy.h"

#include <algorithm>
#include <limits>

#include "compression/selection.h"

namespace kvserve::compression {

SlotState H2OPolicy::NewSlotState() const {
  SlotStateOptions o;
  o.num_layers = context().num_layers;
  o.num_kv_heads = context().num_kv_heads;
  o.track_mass = true;
  return SlotState(o);
}

absl::Status H2OPolicy::SelectKeep(const RoundInput& in, int64_t lo, int64_t num_keep, std::span<int32_t> keep,
                                   RoundResult& timings) {
  if (!in.slots->tracks_mass()) {
    return absl::FailedPreconditionError("h2o round: the SlotState tracks no attention mass (use NewSlotState)");
  }
  const base::Nanos t0 = context().clock->now_ns();
  const int64_t n = in.phys_len;
  const int64_t m = n - lo;
  const int64_t recent = num_keep / 2;
  const bool normalize = params().h2o_normalize_by_lifetime;
  scores_.resize(static_cast<size_t>(m));
  for (int layer = 0; layer < context().num_layers; ++layer) {
    if (context().windowed(layer)) continue;  // keeps its latest slots (CompressionPolicy::Run)
    for (int kv = 0; kv < context().num_kv_heads; ++kv) {
      const std::span<const float> mass = in.slots->mass(layer, kv);
      const std::span<const int32_t> pos = in.slots->positions(layer, kv);
      for (int64_t j = 0; j < m; ++j) {
        const int64_t slot = lo + j;
        double s = mass[static_cast<size_t>(slot)];
        if (normalize) s /= static_cast<double>(std::max<int64_t>(1, in.next_position - pos[static_cast<size_t>(slot)]));
        scores_[static_cast<size_t>(j)] = slot >= n - recent ? std::numeric_limits<double>::infinity() : s;
      }
      const int64_t r = static_cast<int64_t>(layer) * context().num_kv_heads + kv;
      TopKAscending(scores_, num_keep, lo, keep.subspan(static_cast<size_t>(r * num_keep), static_cast<size_t>(num_keep)),
                    topk_scratch_);
    }
  }
  timings.select_ns += context().clock->now_ns() - t0;
  return absl::OkStatus();
}

}  // namespace kvserve::compression
