// StepPlan / StepResult: the contract between the scheduler and a model runner.
// Plain values with no back-pointers; ToString() renders them for logs and golden traces.
//
// Flat layout: the token ids and new block ids of every scheduled sequence live in two
// shared arrays indexed by [begin, begin + count), so a plan reuses its capacity from step
// to step and building it does not allocate once warm.
//
// Runner-side state (sent once, then deltas): a sequence the runner has not seen, or one
// resumed after preemption, arrives with `table_reset` and its whole block table in
// new_blocks, plus a NewSeq entry (sampling parameters, full token history). After that a
// sequence only brings the blocks appended this step.
//
// Order of effects the runner applies, all before the forward pass:
//   1. swap_out (device -> host tier)   2. swap_in (host tier -> device)
//   3. copies (copy-on-write)           4. forward over `seqs`, sample where `sample`
// and it forgets the state of `finished` and `preempted` sequences after the step.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "cache/cache_types.h"
#include "scheduler/sampling.h"

namespace kvserve::scheduler {

struct NewSeq {
  cache::SeqId seq;
  SamplingParams sampling;
  int32_t num_prompt_tokens = 0;
  std::vector<int32_t> history;  // every token known so far: prompt then generated
};

struct ScheduledSeq {
  cache::SeqId seq;
  int64_t first_position = 0;  // absolute position (RoPE) of the first token fed this step
  int32_t token_begin = 0;     // into StepPlan::token_ids
  int32_t num_tokens = 0;
  int32_t kv_len_after = 0;    // physical KV slots held after this step's writes
  int32_t blocks_begin = 0;    // into StepPlan::new_blocks
  int32_t num_new_blocks = 0;
  int32_t table_offset = 0;    // the new blocks overwrite/extend the table from this index
                               // (copy-on-write replaces the shared tail block)
  bool table_reset = false;    // the table is exactly the new blocks (table_offset == 0)
  bool sample = false;         // last prompt chunk or decode: produce one token
  int32_t num_generated = 0;   // tokens this sequence generated before this step
};

struct StepPlan {
  int64_t step_id = 0;
  std::vector<NewSeq> new_seqs;
  std::vector<ScheduledSeq> seqs;
  std::vector<int32_t> token_ids;         // inputs of all scheduled sequences
  std::vector<cache::BlockId> new_blocks; // appended table entries of all sequences
  std::vector<cache::BlockCopy> swap_out; // device src -> host dst
  std::vector<cache::BlockCopy> swap_in;  // host src -> device dst
  std::vector<cache::BlockCopy> copies;   // copy-on-write inside the device pool
  std::vector<cache::SeqId> finished;
  std::vector<cache::SeqId> preempted;
  int32_t total_tokens = 0;

  void clear();
  bool empty() const { return seqs.empty() && swap_out.empty(); }
  std::string ToString() const;
};

struct SampledToken {
  cache::SeqId seq;
  int32_t token_id = -1;
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top_logprobs;  // only when requested
};

struct StepResult {
  int64_t step_id = 0;
  std::vector<SampledToken> sampled;  // one per ScheduledSeq with sample == true, in plan order
  absl::Status status;

  void clear();
  std::string ToString() const;
};

}  // namespace kvserve::scheduler
