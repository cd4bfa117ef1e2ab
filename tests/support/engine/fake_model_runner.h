// FakeModelRunner: a deterministic stand-in for the model, for scheduler and engine tests.
//
// The next token of a sequence is a pure function of (its token history, its seed), so a
// sequence produces the same tokens alone, in any batch, and after any preemption. It also
// simulates the KV cache at token granularity: every device and host slot holds the token
// id written there, copies (swap, copy-on-write) move those ids, and each step checks that
// the slots a sequence's block table points at hold exactly its token history. A wrong
// block table, a missed copy or a block shared when it should not be fails the step.
//
// Compressing sequences (NewSeq::compression not `full`) get a deterministic stand-in round
// once they hold target + divide_length slots: keep the first evictable slot's prefix and the
// most recent slots (streaming-style), compact them to the front of the sequence's own
// blocks, and report a Compaction. The runner tracks which position each slot holds, so the
// per-step check still proves that every slot the scheduler points at is right.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "engine/model_runner.h"

namespace kvserve::engine {

struct FakeModelRunnerOptions {
  int vocab_size = 1000;
  int block_size = 16;
  int32_t num_device_blocks = 0;  // must match the cache manager's pool
  int32_t num_host_blocks = 0;
  // Called at the start of every Execute (tests use it to hold the engine mid-request).
  std::function<void(int64_t step)> before_step;
};

class FakeModelRunner final : public ModelRunner {
 public:
  explicit FakeModelRunner(FakeModelRunnerOptions options);

  absl::Status Execute(const scheduler::StepPlan& plan, scheduler::StepResult& result) override;
  int vocab_size() const override { return options_.vocab_size; }
  bool verifies_drafts() const override { return true; }

  // The deterministic "model": the token that follows `history`.
  static int32_t NextToken(const std::vector<int32_t>& history, uint64_t seed, int vocab_size);

  int64_t steps() const { return steps_; }
  // Steps whose plan only swapped blocks in (nothing computed): the engine must still run them.
  int64_t swap_in_only_steps() const { return swap_in_only_steps_; }
  int64_t tokens_processed() const { return tokens_processed_; }
  size_t known_sequences() const { return seqs_.size(); }

 private:
  struct Seq {
    std::vector<int32_t> history;
    std::vector<int32_t> table;
    uint64_t seed = 0;
    compression::PolicyParams compression;
    bool compression_auto = false;
    std::vector<int64_t> slot_pos;  // position held by physical slot i (compressing only)
  };
  absl::Status Compact(Seq& s, cache::SeqId id, int64_t next_position, scheduler::StepResult& result);

  FakeModelRunnerOptions options_;
  std::vector<int32_t> device_slots_;
  std::vector<int32_t> host_slots_;
  absl::flat_hash_map<int64_t, Seq> seqs_;
  absl::flat_hash_map<int64_t, std::vector<int64_t>> parked_;  // swapped out: slot positions
  int64_t steps_ = 0;
  int64_t swap_in_only_steps_ = 0;
  int64_t tokens_processed_ = 0;
};

}  // namespace kvserve::engine
