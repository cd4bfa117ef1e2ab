// TriAttention calibration statistics: per (layer, query head, RoPE frequency pair f) the
// complex mean A of the pre-RoPE query pair q_f = q[f] + i*q[f + head_dim/2] ("half" /
// rotate_half pairing) and the mean magnitude M = E|q_f|, measured offline over plain text
// (compression/calibrator.h, `kvserve calibrate`). Read-only once loaded; shared by every
// request of a model.
//
// File format v1 (little-endian, no padding):
//
//   off  size  field
//   0    8     magic "KVSTRIAT"
//   8    4     u32 version = 1
//   12   4     u32 num_layers
//   16   4     u32 num_q_heads
//   20   4     u32 num_kv_heads
//   24   4     u32 head_dim                 (even)
//   28   4     u32 num_freqs = head_dim / 2 (every pair is rotary)
//   32   4     u32 rope_style               1 = "half" (HF rotate_half: pair f = dims f, f + d/2)
//   36   4     u32 payload_dtype            1 = float64
//   40   8     f64 attention_scaling        RoPE cos/sin multiplier s (1 for vanilla RoPE)
//   48   8     u64 num_tokens               query rows per (layer, head) the means are over
//   56   4     u32 source_len (<= 4096), then source_len bytes of UTF-8 provenance text
//   ..   8*F   f64 inv_freq[num_freqs]      the model's RoPE table at calibration time
//   ..   8*3*L*Hq*F  f64 [num_layers][num_q_heads][num_freqs][3] = (Re A, Im A, M)
//   ..   8     u64 FNV-1a-64 of every preceding byte
//
// Loading never trusts the file: sizes are checked against the header before anything is
// read, the checksum must match, values must be finite with M >= 0, and any failure is a
// Status naming the file and the problem (never a crash or a silent default).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/model_config.h"

namespace kvserve::compression {

enum class RopeStyle : uint32_t { kHalf = 1 };

inline constexpr uint32_t kStatsVersion = 1;
inline constexpr std::string_view kStatsMagic = "KVSTRIAT";

struct FreqStat {
  double a_re = 0.0;  // Re E[q_f]
  double a_im = 0.0;  // Im E[q_f]
  double m = 0.0;     // E|q_f|
};

struct TriAttentionStats {
  int num_layers = 0;
  int num_q_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  RopeStyle rope_style = RopeStyle::kHalf;
  double attention_scaling = 1.0;
  int64_t num_tokens = 0;
  std::string source;              // provenance (model dir, text file); informational
  std::vector<double> inv_freq;    // [num_freqs]
  std::vector<FreqStat> entries;   // [num_layers][num_q_heads][num_freqs]

  int num_freqs() const { return head_dim / 2; }
  const FreqStat& at(int layer, int head, int f) const {
    return entries[(static_cast<size_t>(layer) * num_q_heads + head) * num_freqs() + f];
  }
  FreqStat& at(int layer, int head, int f) {
    return entries[(static_cast<size_t>(layer) * num_q_heads + head) * num_freqs() + f];
  }
};

// Consistency of the in-memory struct (sizes, finiteness, M >= 0).
absl::Status ValidateStats(const TriAttentionStats& stats);

std::string SerializeStats(const TriAttentionStats& stats);
// `origin` (usually the path) prefixes every error.
absl::StatusOr<TriAttentionStats> ParseStats(std::string_view bytes, std::string_view origin);

// Writes atomically (temporary file + rename).
absl::Status SaveStats(const TriAttentionStats& stats, const std::string& path);
absl::StatusOr<TriAttentionStats> LoadStats(const std::string& path);

// Refuses stats calibrated for a different model: layer and head counts, head_dim, rope
// style, attention scaling (the CPU model's RoPE has none), and the RoPE table (each
// inv_freq within 1e-6 relative of the model's). FailedPrecondition with a message such as
// "triattention stats were calibrated for 4 layers, model has 6".
absl::Status CheckCompatible(const TriAttentionStats& stats, const model::ModelConfig& config,
                             std::span<const float> inv_freq);

// LoadStats, then CheckCompatible against the model: the one way a server or tool takes a
// statistics file into use.
absl::StatusOr<TriAttentionStats> LoadStatsForModel(const std::string& path, const model::ModelConfig& config,
                                                    std::span<const float> inv_freq);

// Where the statistics of a model live: `configured` (compression.stats_path) when set, else
// <model_dir>/triattention_stats.bin (a model given as one GGUF file: beside the file).
std::string StatsPathFor(const std::string& configured, const std::string& model_dir);

}  // namespace kvserve::compression
