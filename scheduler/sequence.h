// SequenceState: the scheduler's record of one sequence (one sample of one request).
//
//   tokens: [ prompt ............ | generated ...... ]
//            0       num_prompt_tokens            tokens.size()
//   num_computed: tokens already fed through the model (their KV was written, whether or
//   not compression later evicted it). The next step feeds tokens[num_computed, ...).
//
// A sequence is waiting (no KV), running (holds KV blocks in the device pool), swapped
// (its KV sits in the host tier) or finished. Preemption by recompute resets num_computed
// to 0 and keeps `tokens`, so the resumed sequence re-reads its generated tokens as
// prompt and continues exactly where it stopped.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/clock.h"
#include "cache/block_hasher.h"
#include "cache/cache_types.h"
#include "compression/policy_params.h"
#include "scheduler/sampling.h"
#include "speculative/acceptance_gate.h"
#include "speculative/draft_length.h"
#include "speculative/spec_params.h"

namespace kvserve::scheduler {

// kWaitingForRemote: its prompt may continue in the remote KV tier; it holds no KV and waits,
// outside the waiting queue, until the lookup's blocks landed in the host tier (or failed).
enum class SeqStatus { kWaiting, kWaitingForRemote, kRunning, kSwapped, kFinished };
enum class SeqFinish { kStopToken, kEos, kLength, kMaxModelLen, kAborted };

struct StopConditions {
  int max_tokens = 16;
  int min_tokens = 0;
  bool ignore_eos = false;
  std::vector<int32_t> stop_token_ids;
};

struct SequenceState {
  cache::SeqId id;
  uint64_t request_key = 0;     // the engine's handle of the owning request
  int tenant = 0;               // index into the scheduler's tenant table
  int priority = 0;             // lower runs first
  base::Nanos arrival = 0;
  uint64_t arrival_seq = 0;     // tie-break for equal arrival times (submission order)
  SamplingParams sampling;
  StopConditions stop;
  cache::PrefixKey prefix_key;  // extra keys of the prefix-cache hash chain (tenant group, salt)
  // LoRA adapter (lora/active_adapters.h id; -1: the base model alone). The scheduler keeps the
  // running sequences' distinct adapters within SchedulerOptions::max_loras.
  int32_t lora_id = -1;

  std::vector<int32_t> tokens;
  int32_t num_prompt_tokens = 0;
  int32_t num_computed = 0;
  SeqStatus status = SeqStatus::kWaiting;
  bool known_to_runner = false;  // the runner holds our table and history
  bool remote_checked = false;   // the remote tier was asked once; never again
  int num_preemptions = 0;
  int64_t last_scheduled_step = -1;  // step in which it last ran (victim selection)
  std::optional<SeqFinish> finish;

  // n > 1: samples 1..n-1 start as children waiting on sample 0. They fork from it once its
  // prompt is computed up to the last token, then each feeds that last token itself and so
  // samples its own first token from identical logits.
  std::optional<cache::SeqId> fork_parent;
  int pending_children = 0;  // on a parent: children still waiting to fork

  // KV compression, resolved by the engine (kind full: none). The scheduler only needs its
  // shape: prefix hits and publishing stop at the first evictable slot (compacted blocks
  // must never become cache hits), and prefill chunks are capped at max_chunk so the
  // sequence's footprint stays bounded by target + divide_length + max_chunk.
  compression::PolicyParams compression;
  bool compression_auto = false;     // `auto`: rounds only while the engine reports pressure
  int32_t max_chunk = 0;             // 0: no cap beyond the step's token budget
  bool runner_keeps_state = false;   // swapped out: the runner parked its compression state
  // Demotion tiers granted (bit t: tier t + 1 holds its blocks for compression.demote_tokens[t]);
  // cleared whenever the sequence's KV is freed.
  uint32_t tiers_granted = 0;

  // Speculative decoding (docs/speculative.md): how it drafts (method none: never) and its
  // adaptive switch-off. Compressing sequences never draft.
  speculative::SpecParams spec;
  speculative::AcceptanceGate spec_gate;
  speculative::DraftLength spec_length;  // guesses per draft, from acceptance and the batch
  int64_t spec_draft_tokens = 0;     // guesses verified so far (usage)
  int64_t spec_accepted_tokens = 0;  // of them, accepted

  bool compressing() const { return compression.kind != config::CompressionPolicyKind::kFull; }

  int32_t num_generated() const { return static_cast<int32_t>(tokens.size()) - num_prompt_tokens; }
  bool prefill_done() const { return num_computed >= static_cast<int32_t>(tokens.size()); }
};

}  // namespace kvserve::scheduler
