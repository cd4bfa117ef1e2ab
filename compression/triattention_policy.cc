#include "compression/triattention_policy.h"

#include <algorithm>
#include <limits>

#include "base/check.h"
#include "compression/selection.h"

namespace kvserve::compression {

TriAttentionPolicy::TriAttentionPolicy(const PolicyParams& params, const PolicyContext& context)
    : CompressionPolicy(params, context), scorer_(*context.triattention_stats) {}

absl::Status TriAttentionPolicy::SelectKeep(const RoundInput& in, int64_t lo, int64_t num_keep,
                                            std::span<int32_t> keep, RoundResult& timings) {
  const base::Clock& clock = *context().clock;
  const int64_t m = in.kv.phys_len - lo;
  const int d = context().head_dim;
  const int group = group_size();
  keys_.resize(static_cast<size_t>(m) * d);
  scores_.resize(static_cast<size_t>(group) * m);
  pooled_.resize(static_cast<size_t>(m));
  base::Nanos t = clock.now_ns();
  scorer_.Prepare(in.next_position);
  for (int layer = 0; layer < context().num_layers; ++layer) {
    for (int kv = 0; kv < context().num_kv_heads; ++kv) {
      ReadRows(in.kv, layer, /*kv=*/0, kv, lo, in.kv.phys_len, keys_.data());
      scorer_.ScoreKvHead(layer, kv, keys_.data(), m, scores_.data());
      const base::Nanos t_scored = clock.now_ns();
      timings.score_ns += t_scored - t;

      std::fill(pooled_.begin(), pooled_.end(), -std::numeric_limits<double>::infinity());
      for (int g = 0; g < group; ++g) {
        std::span<double> row(scores_.data() + static_cast<int64_t>(g) * m, static_cast<size_t>(m));
        ZNormalize(row);
        MaxInto(row, pooled_);
      }
      const int64_t r = static_cast<int64_t>(layer) * context().num_kv_heads + kv;
      TopKAscending(pooled_, num_keep, lo, keep.subspan(static_cast<size_t>(r * num_keep), static_cast<size_t>(num_keep)),
                    topk_scratch_);
      t = clock.now_ns();
      timings.select_ns += t - t_scored;
    }
  }
  return absl::OkStatus();
}

}  // namespace kvserve::compression
