// Offline TriAttention calibration: run the model over plain text and average its pre-RoPE
// queries per (layer, query head, frequency pair).
//
//   text tokens ──► windows of `window` tokens, each a fresh sequence (BOS first when the
//                   tokenizer adds one), prefilled in chunks of max_tokens_per_step through
//                   a private HostKvBuffer
//        forward ──► ForwardObservers::pre_rope_queries [L][T][q_size], read after each step
//                     = the q_proj output (+ bias), before RoPE: Llama-family models have no
//                       q_norm, so this is exactly where queries enter RoPE
//    accumulator ──► per (l, h, f): sum q_f (complex), sum |q_f|   (float64)
//         Finish ──► A = mean q_f, M = mean |q_f|, plus the model's shape and RoPE table
//  optional keys ──► after each window, its post-RoPE keys read back from the fp32 buffer,
//                     and after each step its queries rotated by their positions
//                     ──► KeyCovarianceAccumulator (low-rank key basis, key_pca.h)
//
// Every query row of every window counts (no sink exclusion, no windowing inside a window).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/logger.h"
#include "compression/key_pca.h"
#include "compression/triattention_stats.h"
#include "model/forward_model.h"

namespace kvserve::compression {

// The paper's calibration length; `kvserve calibrate` refuses shorter texts unless asked.
inline constexpr int64_t kDefaultCalibrationTokens = 32768;

class QueryStatsAccumulator {
 public:
  QueryStatsAccumulator(int num_layers, int num_q_heads, int head_dim);

  // q: [num_tokens][q_stride]; each row starts with num_q_heads * head_dim pre-RoPE floats.
  void Add(int layer, const float* q, int64_t q_stride, int64_t num_tokens);
  int64_t num_tokens(int layer) const { return counts_[static_cast<size_t>(layer)]; }

  // Means over everything added. FailedPrecondition when a layer saw no rows or the layers
  // saw different numbers of rows (a forward pass was cut short).
  absl::StatusOr<TriAttentionStats> Finish(int num_kv_heads, std::span<const float> inv_freq,
                                           std::string source) const;

 private:
  int num_layers_, num_q_heads_, head_dim_;
  std::vector<double> sums_;    // [L][Hq][F][3]: sum Re, sum Im, sum |.|
  std::vector<int64_t> counts_;  // [L]
};

struct CalibrationOptions {
  int64_t max_tokens = kDefaultCalibrationTokens;  // text tokens to run; the text must hold as many
  // Tokens per fresh sequence; 0: the model's context length (the paper calibrates on
  // context-length windows, so late positions' queries are represented). Capped at the context.
  int64_t window = 0;
  std::optional<int32_t> bos;      // prepended to every window (counts toward `window`)
  std::string source;              // provenance recorded in the stats file
  // When set, the post-RoPE keys every window wrote (all layers and KV heads, each once) are
  // added to it after the window: the low-rank key PCA (key_pca.h) on the same text.
  KeyCovarianceAccumulator* keys = nullptr;
  base::Logger logger;             // progress lines
};

// InvalidArgument when text_tokens holds fewer than max_tokens tokens.
absl::StatusOr<TriAttentionStats> CalibrateModel(model::ForwardModel& model, std::span<const int32_t> text_tokens,
                                                 const CalibrationOptions& options);

}  // namespace kvserve::compression
