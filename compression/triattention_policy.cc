#include "compression/triattention_policy.h"

#include <algorithm>
#include <limits>
#include <span>

#include "base/check.h"
#include "compression/selection.h"

namespace kvserve::compression {
namespace {

TriScorerOptions ScorerOptions(const PolicyParams& p, const PolicyContext& c) {
  TriScorerOptions o;
  o.num_offsets = NumOffsetsFor(p.tri_max_offset > 0 ? p.tri_max_offset : c.max_context);
  o.terms = p.tri_terms;
  o.offset_pool = p.tri_offset_pool;
  return o;
}

// A KV head's score R: each query head's row z-normalised, then the max over the group (GQA).
// scores: [group][m], normalised in place; pooled: [m], overwritten.
void PoolGroup(double* scores, int group, int64_t m, std::vector<double>& pooled) {
  std::fill(pooled.begin(), pooled.end(), -std::numeric_limits<double>::infinity());
  for (int g = 0; g < group; ++g) {
    std::span<double> row(scores + static_cast<int64_t>(g) * m, static_cast<size_t>(m));
    ZNormalize(row);
    MaxInto(row, pooled);
  }
}

}  // namespace

TriAttentionPolicy::TriAttentionPolicy(const PolicyParams& params, const PolicyContext& context)
    : CompressionPolicy(params, context),
      scorer_(*context.triattention_stats, context.rope_inv_freq, ScorerOptions(params, context)) {}

absl::Status TriAttentionPolicy::SelectKeep(const RoundInput& in, int64_t lo, int64_t num_keep,
                                            std::span<int32_t> keep, RoundResult& timings) {
  const base::Clock& clock = *context().clock;
  const int64_t n = in.phys_len;
  const int64_t window = std::min(RecentWindow(params()), n - lo);
  const int64_t scored_end = n - window;  // [scored_end, n): the recent window, always kept
  const int64_t m = scored_end - lo;
  const int64_t pick = num_keep - window;  // chosen among the scored candidates
  KVS_CHECK(pick >= 0 && pick <= m, "triattention: keep ", num_keep, " with window ", window,
            " of ", n - lo);
  const int d = context().head_dim;
  const int group = group_size();
  const int layers = context().num_layers;
  const int kv_heads = context().num_kv_heads;
  const bool cross = params().tri_selection == TriSelection::kCrossLayer;
  keys_.resize(static_cast<size_t>(m) * d);
  scores_.resize(static_cast<size_t>(group) * m);
  pooled_.resize(static_cast<size_t>(m));
  chosen_.resize(static_cast<size_t>(num_keep));
  if (cross) summed_.assign(static_cast<size_t>(kv_heads) * m, 0.0);

  // One row's keep list: the chosen candidates (ascending, all < scored_end), then the window.
  auto emit = [&](std::span<const double> r, int64_t row) {
    TopKAscending(r, pick, lo, chosen_, topk_scratch_);
    for (int64_t i = 0; i < window; ++i)
      chosen_[static_cast<size_t>(pick + i)] = static_cast<int32_t>(scored_end + i);
    std::copy(chosen_.begin(), chosen_.end(), keep.begin() + row * num_keep);
  };

  base::Nanos t = clock.now_ns();
  scorer_.Prepare(in.next_position);
  // A backend that scores every head in one call (one device round trip per round).
  const int heads = layers * kv_heads;
  bool batched = false;
  if (m > 0 && in.kv->ScoresTriAttentionBatched()) {
    head_weights_.resize(static_cast<size_t>(heads));
    batch_weights_.resize(static_cast<size_t>(heads));
    for (int i = 0; i < heads; ++i) {
      const TriKeyWeights w = scorer_.PrepareKvHead(i / kv_heads, i % kv_heads);
      std::vector<double>& own = head_weights_[static_cast<size_t>(i)];
      own.assign(w.w.begin(), w.w.end());
      own.insert(own.end(), w.c.begin(), w.c.end());
      TriKeyWeights& b = batch_weights_[static_cast<size_t>(i)];
      b = w;
      b.w = std::span<const double>(own.data(), w.w.size());
      b.c = std::span<const double>(own.data() + w.w.size(), w.c.size());
    }
    batch_pooled_.resize(static_cast<size_t>(heads) * static_cast<size_t>(m));
    batched =
        in.kv->ScoreTriAttentionAll(in.block_table, lo, scored_end, batch_weights_, batch_pooled_);
  }
  for (int layer = 0; layer < layers; ++layer) {
    if (context().windowed(layer)) continue;  // keeps its latest slots (CompressionPolicy::Run)
    for (int kv = 0; kv < kv_heads; ++kv) {
      // A device backend scores, normalises and pools where the keys live (all heads at once,
      // or this head); otherwise the keys come to the host and the reference code below does
      // the same.
      bool pooled_by_backend = batched;
      if (batched) {
        const double* r = batch_pooled_.data() + static_cast<int64_t>(layer * kv_heads + kv) * m;
        std::copy(r, r + m, pooled_.begin());
      } else {
        const TriKeyWeights weights = scorer_.PrepareKvHead(layer, kv);
        pooled_by_backend = m > 0 && in.kv->ScoreTriAttention(in.block_table, layer, kv, lo,
                                                              scored_end, weights, pooled_);
      }
      if (m > 0 && !pooled_by_backend) {
        in.kv->ReadRows(in.block_table, layer, /*kv=*/0, kv, lo, scored_end, keys_.data());
        scorer_.ScoreKeys(keys_.data(), m, scores_.data());
      }
      const base::Nanos t_scored = clock.now_ns();
      timings.score_ns += t_scored - t;

      if (!pooled_by_backend) PoolGroup(scores_.data(), group, m, pooled_);
      if (cross) {
        double* acc = summed_.data() + static_cast<int64_t>(kv) * m;
        for (int64_t j = 0; j < m; ++j) acc[j] += pooled_[static_cast<size_t>(j)];
      } else {
        emit(pooled_, static_cast<int64_t>(layer) * kv_heads + kv);
      }
      t = clock.now_ns();
      timings.select_ns += t - t_scored;
    }
  }
  if (cross) {
    // Mean over the scored layers: the sum ranks the same, and dividing keeps the reference's
    // values.
    const int scored = context().num_scored_layers();
    for (double& v : summed_) v /= scored;
    for (int kv = 0; kv < kv_heads; ++kv) {
      emit(std::span<const double>(summed_.data() + static_cast<int64_t>(kv) * m,
                                   static_cast<size_t>(m)),
           kv);
      for (int layer = 1; layer < layers; ++layer) {
        std::copy_n(keep.begin() + static_cast<int64_t>(kv) * num_keep, num_keep,
                    keep.begin() + (static_cast<int64_t>(layer) * kv_heads + kv) * num_keep);
      }
    }
    timings.select_ns += clock.now_ns() - t;
  }
  return absl::OkStatus();
}

absl::Status TriAttentionPolicy::RankForDemotion(const RoundInput& in, int64_t m,
                                                 KeyReader read_keys, std::span<double> scores,
                                                 RoundResult& timings) {
  const base::Clock& clock = *context().clock;
  const int d = context().head_dim;
  const int group = group_size();
  const int layers = context().num_layers;
  const int kv_heads = context().num_kv_heads;
  const bool cross = params().tri_selection == TriSelection::kCrossLayer;
  KVS_CHECK(scores.size() >= static_cast<size_t>(layers) * kv_heads * m,
            "RankForDemotion: scores too small");
  keys_.resize(static_cast<size_t>(m) * d);
  scores_.resize(static_cast<size_t>(group) * m);
  pooled_.resize(static_cast<size_t>(m));
  if (cross) summed_.assign(static_cast<size_t>(kv_heads) * m, 0.0);

  base::Nanos t = clock.now_ns();
  scorer_.Prepare(in.next_position);
  for (int layer = 0; layer < layers; ++layer) {
    for (int kv = 0; kv < kv_heads; ++kv) {
      scorer_.PrepareKvHead(layer, kv);
      if (m > 0) {
        read_keys(layer, kv, keys_.data());
        scorer_.ScoreKeys(keys_.data(), m, scores_.data());
      }
      const base::Nanos t_scored = clock.now_ns();
      timings.score_ns += t_scored - t;
      PoolGroup(scores_.data(), group, m, pooled_);
      if (cross) {
        double* acc = summed_.data() + static_cast<int64_t>(kv) * m;
        for (int64_t j = 0; j < m; ++j) acc[j] += pooled_[static_cast<size_t>(j)];
      } else {
        std::copy(pooled_.begin(), pooled_.end(),
                  scores.begin() + (static_cast<int64_t>(layer) * kv_heads + kv) * m);
      }
      t = clock.now_ns();
      timings.select_ns += t - t_scored;
    }
  }
  if (cross) {
    for (double& v : summed_) v /= layers;
    for (int layer = 0; layer < layers; ++layer) {
      for (int kv = 0; kv < kv_heads; ++kv) {
        std::copy_n(summed_.begin() + static_cast<int64_t>(kv) * m, m,
                    scores.begin() + (static_cast<int64_t>(layer) * kv_heads + kv) * m);
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace kvserve::compression
