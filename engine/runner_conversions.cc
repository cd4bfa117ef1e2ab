#include "engine/runner_conversions.h"

#include <utility>

namespace kvserve::engine {

model::SamplingParams ToModelParams(const scheduler::SamplingParams& s) {
  model::SamplingParams p;
  p.temperature = s.temperature;
  p.top_k = s.top_k;
  p.top_p = s.top_p;
  p.min_p = s.min_p;
  p.seed = s.seed;
  p.repetition_penalty = s.repetition_penalty;
  p.presence_penalty = s.presence_penalty;
  p.frequency_penalty = s.frequency_penalty;
  for (const auto& b : s.logit_bias) p.logit_bias.emplace_back(b.token, b.bias);
  // The sampled token's own logprob is always reported; top-N only when asked.
  p.logprobs = s.logprobs;
  p.min_tokens = s.min_tokens;
  p.min_tokens_banned = s.min_tokens_banned;
  p.allowed_token_ids = s.allowed_token_ids;
  p.bad_words = s.bad_words;
  return p;
}

scheduler::Compaction ToCompaction(cache::SeqId seq, int64_t next_position, compression::RoundResult r) {
  scheduler::Compaction c;
  c.seq = seq;
  c.next_position = next_position;
  c.phys_len_before = r.phys_len_before;
  c.new_phys_len = r.new_phys_len;
  c.blocks_freed = static_cast<int32_t>(r.blocks_freed());
  c.evicted_positions = std::move(r.evicted_positions);
  c.evicted_prompt_tokens = r.evicted_prompt_tokens;
  c.score_ns = r.score_ns;
  c.select_ns = r.select_ns;
  c.compact_ns = r.compact_ns;
  c.bytes_moved = r.bytes_moved;
  c.demoted_tokens = r.demoted_tokens;
  return c;
}

}  // namespace kvserve::engine
