#include "compression/calibrator.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "kernels/cpu/kv_quant.h"
#include "kernels/cpu/rope.h"
#include "model/batch_builder.h"
#include "model/host_kv_buffer.h"

namespace kvserve::compression {

QueryStatsAccumulator::QueryStatsAccumulator(int num_layers, int num_q_heads, int head_dim)
    : num_layers_(num_layers),
      num_q_heads_(num_q_heads),
      head_dim_(head_dim),
      sums_(static_cast<size_t>(num_layers) * num_q_heads * (head_dim / 2) * 3, 0.0),
      counts_(static_cast<size_t>(num_layers), 0) {
  KVS_CHECK(num_layers > 0 && num_q_heads > 0 && head_dim > 0 && head_dim % 2 == 0);
}

void QueryStatsAccumulator::Add(int layer, const float* q, int64_t q_stride, int64_t num_tokens) {
  KVS_CHECK(layer >= 0 && layer < num_layers_);
  const int F = head_dim_ / 2;
  double* base = sums_.data() + static_cast<size_t>(layer) * num_q_heads_ * F * 3;
  for (int64_t t = 0; t < num_tokens; ++t) {
    const float* row = q + t * q_stride;
    for (int h = 0; h < num_q_heads_; ++h) {
      const float* x = row + static_cast<int64_t>(h) * head_dim_;
      double* s = base + static_cast<size_t>(h) * F * 3;
      for (int f = 0; f < F; ++f) {
        const double re = x[f], im = x[f + F];
        s[3 * f] += re;
        s[3 * f + 1] += im;
        s[3 * f + 2] += std::sqrt(re * re + im * im);
      }
    }
  }
  counts_[static_cast<size_t>(layer)] += num_tokens;
}

absl::StatusOr<TriAttentionStats> QueryStatsAccumulator::Finish(int num_kv_heads, std::span<const float> inv_freq,
                                                                std::string source) const {
  const int64_t n = counts_.front();
  for (int l = 0; l < num_layers_; ++l) {
    if (counts_[static_cast<size_t>(l)] == 0 || counts_[static_cast<size_t>(l)] != n) {
      return absl::FailedPreconditionError(absl::StrCat("calibration: layer ", l, " saw ", counts_[static_cast<size_t>(l)],
                                                        " query rows, layer 0 saw ", n));
    }
  }
  TriAttentionStats s;
  s.num_layers = num_layers_;
  s.num_q_heads = num_q_heads_;
  s.num_kv_heads = num_kv_heads;
  s.head_dim = head_dim_;
  s.rope_style = RopeStyle::kHalf;
  s.attention_scaling = 1.0;
  s.num_tokens = n;
  s.source = std::move(source);
  s.inv_freq.assign(inv_freq.begin(), inv_freq.end());
  s.entries.resize(sums_.size() / 3);
  const double inv_n = 1.0 / static_cast<double>(n);
  for (size_t i = 0; i < s.entries.size(); ++i) {
    s.entries[i] = {sums_[3 * i] * inv_n, sums_[3 * i + 1] * inv_n, sums_[3 * i + 2] * inv_n};
  }
  KVS_RETURN_IF_ERROR(ValidateStats(s));
  return s;
}

absl::StatusOr<TriAttentionStats> CalibrateModel(model::ForwardModel& m, std::span<const int32_t> text_tokens,
                                                 const CalibrationOptions& o) {
  const model::ModelConfig& c = m.config();
  if (o.max_tokens < 1) return absl::InvalidArgumentError("calibration: max_tokens must be >= 1");
  if (c.rotary_dim != c.head_dim) {
    return absl::FailedPreconditionError(
        "calibration: the model rotates only part of each head (partial_rotary_factor); TriAttention's frequency "
        "statistics need every dim rotated, and such a model serves policy full only");
  }
  if (static_cast<int64_t>(text_tokens.size()) < o.max_tokens) {
    return absl::InvalidArgumentError(absl::StrCat("calibration text has ", text_tokens.size(),
                                                   " tokens, fewer than the ", o.max_tokens, " requested"));
  }
  const int64_t window = o.window > 0 ? std::min<int64_t>(o.window, c.max_context()) : c.max_context();
  const int64_t prefix = o.bos ? 1 : 0;
  if (window < prefix + 1) return absl::InvalidArgumentError("calibration: window too small");
  const int64_t text_per_window = window - prefix;
  constexpr int kBlockSize = 16;
  const int64_t blocks = (window + kBlockSize - 1) / kBlockSize;
  model::HostKvBuffer kv(m.KvLayoutFor(kBlockSize, config::KvDtype::kFp32), blocks);
  std::vector<int32_t> table(static_cast<size_t>(blocks));
  std::iota(table.begin(), table.end(), 0);

  QueryStatsAccumulator acc(c.num_layers, c.num_heads, c.head_dim);
  // The step's pre-RoPE queries, [num_layers][rows][q_size], read once per forward.
  const int64_t q_size = static_cast<int64_t>(c.num_heads) * c.head_dim;
  std::vector<float> queries;
  std::vector<float> key_rows;  // one window's keys of one (layer, KV head)
  std::vector<int32_t> positions;  // one step's positions and RoPE table (query-aware key basis)
  std::vector<float> cos_sin;
  model::BatchBuilder bb(kBlockSize);
  std::vector<int32_t> seq;
  seq.reserve(static_cast<size_t>(window));
  const int64_t chunk = m.max_tokens_per_step();
  const int64_t num_windows = (o.max_tokens + text_per_window - 1) / text_per_window;
  for (int64_t w = 0; w < num_windows; ++w) {
    const int64_t begin = w * text_per_window;
    const int64_t end = std::min(o.max_tokens, begin + text_per_window);
    seq.clear();
    if (o.bos) seq.push_back(*o.bos);
    seq.insert(seq.end(), text_tokens.begin() + begin, text_tokens.begin() + end);
    // A fresh sequence: it attends only to the slots it writes, so the buffer is reused.
    for (int64_t pos = 0; pos < static_cast<int64_t>(seq.size()); pos += chunk) {
      const int64_t n = std::min<int64_t>(chunk, static_cast<int64_t>(seq.size()) - pos);
      bb.Clear();
      bb.AddSequence(std::span<const int32_t>(seq).subspan(static_cast<size_t>(pos), static_cast<size_t>(n)),
                     static_cast<int32_t>(pos), static_cast<int32_t>(pos), table, model::LogitsWanted::kNone);
      queries.resize(static_cast<size_t>(c.num_layers * n * q_size));
      model::ForwardObservers obs;
      obs.pre_rope_queries = queries;
      KVS_RETURN_IF_ERROR(m.Forward(bb.batch(), kv.view(), {}, &obs));
      for (int l = 0; l < c.num_layers; ++l) acc.Add(l, queries.data() + l * n * q_size, q_size, n);
      if (o.keys != nullptr) {
        // Post-RoPE queries (rotated as the forward pass rotates them) for the query-aware
        // key basis: every query head's rows go to its KV head.
        positions.resize(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) positions[static_cast<size_t>(i)] = static_cast<int32_t>(pos + i);
        cos_sin.resize(static_cast<size_t>(n * c.head_dim));
        kernels::cpu::RopeCosSin(positions.data(), n, m.rope_inv_freq().data(), c.head_dim / 2, cos_sin.data());
        const int group = c.num_heads / c.num_kv_heads;
        for (int l = 0; l < c.num_layers; ++l) {
          float* q = queries.data() + l * n * q_size;
          kernels::cpu::ApplyRope(q, n, c.num_heads, c.head_dim, q_size, cos_sin.data());
          for (int h = 0; h < c.num_heads; ++h) o.keys->AddQueries(l, h / group, q + static_cast<int64_t>(h) * c.head_dim, q_size, n);
        }
      }
    }
    if (o.keys != nullptr) {
      // The window's keys as the cache holds them (post-RoPE, fp32: exact), slot i = token i.
      const model::KvCacheView view = kv.view();
      const int64_t len = static_cast<int64_t>(seq.size());
      key_rows.resize(static_cast<size_t>(len * c.head_dim));
      for (int l = 0; l < c.num_layers; ++l) {
        for (int h = 0; h < c.num_kv_heads; ++h) {
          for (int64_t i = 0; i < len; ++i) {
            kernels::cpu::ReadKvRow(view.layout, view.layer_data[static_cast<size_t>(l)], nullptr,
                                    table[static_cast<size_t>(i / kBlockSize)], 0, h, static_cast<int>(i % kBlockSize),
                                    key_rows.data() + i * c.head_dim);
          }
          o.keys->Add(l, h, key_rows.data(), c.head_dim, len);
        }
      }
    }
    if ((w + 1) % 16 == 0 || w + 1 == num_windows) {
      o.logger.info("calibrate: window %d/%d, %d query rows per layer", w + 1, num_windows, acc.num_tokens(0));
    }
  }
  return acc.Finish(c.num_kv_heads, m.rope_inv_freq(), o.source);
}

}  // namespace kvserve::compression
