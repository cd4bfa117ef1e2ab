#include "compression/streaming_llm_policy.h"

namespace kvserve::compression {

absl::Status StreamingLlmPolicy::SelectKeep(const RoundInput& in, int64_t /*lo*/, int64_t num_keep,
                                            std::span<int32_t> keep, RoundResult& timings) {
  const base::Nanos t0 = context().clock->now_ns();
  const int64_t first = in.phys_len - num_keep;  // the recent window
  const int64_t rows = static_cast<int64_t>(context().num_layers) * context().num_kv_heads;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < num_keep; ++i) keep[static_cast<size_t>(r * num_keep + i)] = static_cast<int32_t>(first + i);
  }
  timings.select_ns += context().clock->now_ns() - t0;
  return absl::OkStatus();
}

}  // namespace kvserve::compression
