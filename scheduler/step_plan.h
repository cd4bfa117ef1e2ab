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
#include "compression/policy_params.h"
#include "scheduler/sampling.h"

namespace kvserve::scheduler {

struct NewSeq {
  cache::SeqId seq;
  SamplingParams sampling;
  int32_t num_prompt_tokens = 0;
  std::vector<int32_t> history;  // every token known so far: prompt then generated
  // KV compression of the sequence (kind full: none); the runner owns the policy state.
  compression::PolicyParams compression;
  bool compression_auto = false;  // rounds only in steps with StepPlan::compress_auto
  bool resume = false;            // back from the host tier: reuse the parked policy state
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
  // Speculative decoding: the last num_draft of the num_tokens fed are guesses (a decode row
  // then the draft). The runner wants logits for all 1 + num_draft rows, keeps the longest
  // verified prefix and samples one token after it: 1 .. num_draft + 1 SampledTokens for this
  // sequence, consecutive in StepResult::sampled. kv_len_after counts the draft's slots; the
  // scheduler truncates the rejected ones after the step.
  int32_t num_draft = 0;
  int32_t num_generated = 0;   // tokens this sequence generated before this step
  int32_t lora_id = -1;        // its LoRA adapter's id (SequenceState::lora_id); -1: base
  // Layer groups (cache/layer_groups.h): the window tables' new entries, group-major, in
  // StepPlan::window_blocks[window_blocks_begin, + num_window_blocks): group j's entries
  // [window_table_offset, + num_window_blocks / groups). With table_reset they are the whole
  // tables (their released front as kNullBlock). Window tables are indexed by position.
  int32_t window_blocks_begin = 0;
  int32_t num_window_blocks = 0;
  int32_t window_table_offset = 0;
};

// Demotion tier blocks granted to a sequence this step (KvCacheManager::reserve_tier_blocks):
// appended to its table of demotion tier tier + 1; the ids are
// StepPlan::tier_blocks[blocks_begin, blocks_begin + num_blocks). Applied before the forward
// pass; a sequence's grants are dropped with it (finished or preempted: always recomputed).
struct TierGrant {
  cache::SeqId seq;
  int32_t tier = 0;
  int32_t blocks_begin = 0;
  int32_t num_blocks = 0;
};

struct StepPlan {
  int64_t step_id = 0;
  std::vector<NewSeq> new_seqs;
  std::vector<ScheduledSeq> seqs;
  std::vector<int32_t> token_ids;         // inputs of all scheduled sequences
  std::vector<cache::BlockId> new_blocks; // appended table entries of all sequences
  std::vector<cache::BlockId> window_blocks;  // window table entries (layer groups)
  std::vector<cache::BlockCopy> swap_out; // device src -> host dst
  std::vector<cache::BlockCopy> swap_in;  // host src -> device dst
  std::vector<cache::BlockCopy> copies;   // copy-on-write inside the device pool
  std::vector<cache::SeqId> finished;
  std::vector<cache::SeqId> preempted;
  std::vector<cache::SeqId> parked;        // of `preempted`: swapped, keep compression state
  std::vector<TierGrant> tier_grants;      // demotion tier blocks granted this step
  std::vector<cache::BlockId> tier_blocks; // their ids
  int32_t total_tokens = 0;
  bool compress_auto = false;  // pool under pressure: `auto` sequences compress this step

  void clear();
  // Whether the runner must move KV blocks this step (swap or copy-on-write), even if it
  // computes nothing: the cache manager already counts the moved blocks where they go.
  bool moves_kv() const { return !swap_out.empty() || !swap_in.empty() || !copies.empty(); }
  // Nothing for the runner to compute or move (it may still have sequences to forget).
  bool empty() const { return seqs.empty() && !moves_kv(); }
  std::string ToString() const;
};

struct SampledToken {
  cache::SeqId seq;
  int32_t token_id = -1;
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top_logprobs;  // only when requested
};

// The logprob of one prompt token under the prefill's logits of the position before it
// (SamplingParams::prompt_logprobs). A recomputed prefill (preemption) reports its positions
// again: the engine keeps the first report of each position.
struct PromptLogprob {
  cache::SeqId seq;
  int32_t position = 0;  // of the scored token, in [1, num_prompt_tokens)
  int32_t token_id = -1;
  float logprob = 0.0f;
  int32_t rank = 1;  // 1 + the number of tokens with a strictly higher logit
  std::vector<std::pair<int32_t, float>> top_logprobs;  // prompt_logprobs entries, best first
};

// Prompt hidden states of an embedding sequence (SamplingParams::embed) from one prefill chunk:
// the sum of the rows at positions [first_position, first_position + num_rows) (mean pooling),
// or the last prompt token's row (last pooling: num_rows 1). Recomputed chunks come again.
struct HiddenPart {
  cache::SeqId seq;
  int32_t first_position = 0;
  int32_t num_rows = 0;
  std::vector<float> values;  // [hidden_size]
};

// One compression round the runner ran after a step's forward pass. The scheduler
// truncates the sequence's blocks to new_phys_len; the engine reports the rest.
struct Compaction {
  cache::SeqId seq;
  int64_t next_position = 0;     // tokens the sequence had seen when the round ran
  int64_t phys_len_before = 0;
  int64_t new_phys_len = 0;
  int32_t blocks_freed = 0;      // must equal what truncating the block table releases
  std::vector<int64_t> evicted_positions;  // ascending; see compression_policy.h (audit)
  int64_t evicted_prompt_tokens = 0;
  int64_t score_ns = 0, select_ns = 0, compact_ns = 0;
  int64_t bytes_moved = 0;
  int64_t demoted_tokens = 0;    // tokens that entered a demotion tier (per KV row)
};

struct StepResult {
  int64_t step_id = 0;
  // One per ScheduledSeq with sample == true, in plan order; a drafting one (num_draft > 0)
  // has 1 + accepted entries: the accepted guesses, then the runner's own token.
  std::vector<SampledToken> sampled;
  std::vector<Compaction> compactions;  // rounds run after the forward pass, in plan order
  std::vector<PromptLogprob> prompt_logprobs;  // prefill rows of prompt_logprobs sequences
  std::vector<HiddenPart> hidden;              // prefill rows of embedding sequences
  absl::Status status;

  void clear();
  std::string ToString() const;
};

}  // namespace kvserve::scheduler
