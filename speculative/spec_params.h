// SpecParams: how one sequence speculates, resolved once at Submit (request > server config)
// and carried by the scheduler. A plain value; method kNone means the sequence never drafts.
#pragma once

#include <cstdint>

#include "config/config.h"

namespace kvserve::speculative {

// Measured on the CPU backend (docs/benchmarks.md, "Speculative decoding, n-gram"): one fp32 row
// of the 124.7 M bench model costs about a tenth of a one-row decode step, which streams the
// weights. Not a config field yet.
inline constexpr double kDefaultRowCost = 0.1;

struct SpecParams {
  config::SpeculativeMethod method = config::SpeculativeMethod::kNone;
  int num_tokens = 4;  // k: draft tokens per step
  int ngram_min = 2;
  int ngram_max = 4;
  double min_acceptance = 0.3;  // adaptive switch-off threshold (AcceptanceGate)
  // Adaptive draft length (DraftLength): one verify row's compute relative to streaming the
  // weights once; 0 turns sizing off (every draft is num_tokens guesses).
  double row_cost = kDefaultRowCost;

  bool enabled() const { return method != config::SpeculativeMethod::kNone && num_tokens > 0; }
};

// The server default of config.speculative.
inline SpecParams FromConfig(const config::SpeculativeConfig& c) {
  return {c.method, c.num_tokens, c.ngram_min, c.ngram_max, c.min_acceptance, kDefaultRowCost};
}

}  // namespace kvserve::speculative
