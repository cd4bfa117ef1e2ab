#include "compression/snapkv_policy.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "compression/selection.h"
#include "kernels/cpu/rope.h"

namespace kvserve::compression {

bool SnapKvPolicy::Due(int64_t phys_len, int64_t next_position) const {
  const int64_t prompt = params().prompt_len;
  if (next_position < prompt) return false;  // mid-prefill: the window is not the prompt's end yet
  if (next_position == prompt && phys_len > target_length()) return true;  // end of prefill
  return CompressionPolicy::Due(phys_len, next_position);
}

SlotState SnapKvPolicy::NewSlotState() const {
  SlotStateOptions o;
  o.num_layers = context().num_layers;
  o.num_kv_heads = context().num_kv_heads;
  o.query_window = static_cast<int>(RecentWindow(params()));
  o.num_q_heads = context().num_q_heads;
  o.head_dim = context().head_dim;
  return SlotState(o);
}

absl::Status SnapKvPolicy::SelectKeep(const RoundInput& in, int64_t lo, int64_t num_keep, std::span<int32_t> keep,
                                      RoundResult& timings) {
  const base::Clock& clock = *context().clock;
  const int64_t n = in.phys_len;
  const int64_t w = RecentWindow(params());
  const int64_t prefix_end = n - w;  // [prefix_end, n): observation window, always kept
  const int d = context().head_dim;
  const int q_heads = context().num_q_heads;
  const int q_size = q_heads * d;
  const int group = group_size();
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  queries_.resize(static_cast<size_t>(w) * q_size);
  qpos_.resize(static_cast<size_t>(w));
  cos_sin_.resize(static_cast<size_t>(w) * d);
  keys_.resize(static_cast<size_t>(n) * d);
  logits_.resize(static_cast<size_t>(n));
  attn_.resize(static_cast<size_t>(prefix_end));
  row_.resize(static_cast<size_t>(n - lo));

  base::Nanos t = clock.now_ns();
  for (int layer = 0; layer < context().num_layers; ++layer) {
    if (context().windowed(layer)) continue;  // keeps its latest slots (CompressionPolicy::Run)
    const int nq = in.slots->CopyQueries(layer, queries_.data(), qpos_.data());
    if (nq == 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("snapkv round: no queries observed for layer ", layer, " (feed ObserveQueries)"));
    }
    kernels::cpu::RopeCosSin(qpos_.data(), nq, context().rope_inv_freq.data(), d / 2, cos_sin_.data());
    kernels::cpu::ApplyRope(queries_.data(), nq, q_heads, d, q_size, cos_sin_.data());
    const int kv_heads = context().num_kv_heads;
    seen_.resize(static_cast<size_t>(kv_heads));
    windows_.resize(static_cast<size_t>(kv_heads));
    for (int kv = 0; kv < kv_heads; ++kv) {
      const std::span<const int32_t> pos = in.slots->positions(layer, kv);
      // Positions ascend along the row, so the keys a query saw are a prefix.
      std::vector<int64_t>& head_seen = seen_[static_cast<size_t>(kv)];
      head_seen.resize(static_cast<size_t>(nq));
      for (int r = 0; r < nq; ++r) {
        head_seen[static_cast<size_t>(r)] =
            std::upper_bound(pos.begin(), pos.end(), qpos_[static_cast<size_t>(r)]) - pos.begin();
      }
      SnapKvWindow& window = windows_[static_cast<size_t>(kv)];
      window.group = group;
      window.num_queries = nq;
      window.queries = queries_.data() + static_cast<int64_t>(kv) * group * d;
      window.q_stride = q_size;
      window.seen = head_seen;
      window.prefix_end = prefix_end;
      window.pool_kernel = kSnapKvPoolKernel;
      window.scale = scale;
    }
    // A backend that scores a whole layer at once (one device round trip per layer).
    bool layer_by_backend = false;
    if (in.kv->ScoresSnapKvBatched()) {
      layer_rows_.resize(static_cast<size_t>(kv_heads) * static_cast<size_t>(n - lo));
      layer_by_backend = in.kv->ScoreSnapKvLayer(in.block_table, layer, lo, n, windows_, layer_rows_);
    }
    for (int kv = 0; kv < kv_heads; ++kv) {
      const std::vector<int64_t>& head_seen = seen_[static_cast<size_t>(kv)];
      // A device backend scores where the keys live (this layer at once, or this head);
      // otherwise they come to the host.
      bool scored_by_backend = layer_by_backend;
      if (layer_by_backend) {
        const double* src = layer_rows_.data() + static_cast<int64_t>(kv) * (n - lo);
        std::copy(src, src + (n - lo), row_.begin());
      } else {
        scored_by_backend = in.kv->ScoreSnapKv(in.block_table, layer, kv, lo, n, windows_[static_cast<size_t>(kv)], row_);
      }
      if (!scored_by_backend) {
        in.kv->ReadRows(in.block_table, layer, /*kv=*/0, kv, 0, n, keys_.data());
        std::fill(row_.begin(), row_.end(), 0.0);
      }
      for (int g = 0; g < group && !scored_by_backend; ++g) {
        const int h = kv * group + g;
        std::fill(attn_.begin(), attn_.end(), 0.0);
        for (int r = 0; r < nq; ++r) {
          const float* q = queries_.data() + static_cast<int64_t>(r) * q_size + static_cast<int64_t>(h) * d;
          const int64_t seen = head_seen[static_cast<size_t>(r)];
          double mx = -std::numeric_limits<double>::infinity();
          for (int64_t j = 0; j < seen; ++j) {
            const float* k = keys_.data() + j * d;
            double dot = 0.0;
            for (int i = 0; i < d; ++i) dot += static_cast<double>(q[i]) * k[i];
            logits_[static_cast<size_t>(j)] = dot * scale;
            mx = std::max(mx, logits_[static_cast<size_t>(j)]);
          }
          double sum = 0.0;
          for (int64_t j = 0; j < seen; ++j) sum += std::exp(logits_[static_cast<size_t>(j)] - mx);
          const int64_t upto = std::min(seen, prefix_end);
          for (int64_t j = 0; j < upto; ++j) attn_[static_cast<size_t>(j)] += std::exp(logits_[static_cast<size_t>(j)] - mx) / sum;
        }
        // Avg-pool over [0, prefix_end), then the group mean, restricted to the candidates.
        constexpr int kHalf = kSnapKvPoolKernel / 2;
        for (int64_t j = lo; j < prefix_end; ++j) {
          double acc = 0.0;
          for (int64_t o = std::max<int64_t>(0, j - kHalf); o <= std::min(prefix_end - 1, j + kHalf); ++o) {
            acc += attn_[static_cast<size_t>(o)];
          }
          row_[static_cast<size_t>(j - lo)] += acc / kSnapKvPoolKernel / group;
        }
      }
      if (!scored_by_backend) {
        for (int64_t j = prefix_end; j < n; ++j) row_[static_cast<size_t>(j - lo)] = std::numeric_limits<double>::infinity();
      }
      const base::Nanos t_scored = clock.now_ns();
      timings.score_ns += t_scored - t;
      const int64_t r = static_cast<int64_t>(layer) * context().num_kv_heads + kv;
      TopKAscending(row_, num_keep, lo, keep.subspan(static_cast<size_t>(r * num_keep), static_cast<size_t>(num_keep)),
                    topk_scratch_);
      t = clock.now_ns();
      timings.select_ns += t - t_scored;
    }
  }
  return absl::OkStatus();
}

}  // namespace kvserve::compression
