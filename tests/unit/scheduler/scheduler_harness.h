// Test harness: a Scheduler over a real KvCacheManager, driven with the FakeModelRunner,
// with the cache invariant checker after every step. Records a golden trace
// (StepPlan::ToString of every step) and every sequence's generated tokens.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cache/cache_invariants.h"
#include "cache/kv_cache_manager.h"
#include "scheduler/scheduler.h"
#include "tests/support/engine/fake_model_runner.h"

namespace kvserve::scheduler::testing {

struct HarnessOptions {
  SchedulerOptions sched;
  int block_size = 4;
  int32_t num_blocks = 64;       // including the null block
  int32_t num_host_blocks = 0;   // host pool (swap + host prefix tier)
  int32_t host_cache_blocks = 0;  // host prefix tier's share
  bool prefix_caching = false;
  int vocab_size = 1000;
};

class Harness {
 public:
  explicit Harness(HarnessOptions o) : options_(std::move(o)) {
    cache::KvCacheManagerOptions co;
    co.layout.block_size = options_.block_size;
    co.num_blocks = options_.num_blocks;
    co.num_host_blocks = options_.num_host_blocks;
    co.host_cache_blocks = options_.host_cache_blocks;
    co.enable_prefix_caching = options_.prefix_caching;
    cache_ = std::make_unique<cache::KvCacheManager>(co, base::Logger());
    engine::FakeModelRunnerOptions ro;
    ro.vocab_size = options_.vocab_size;
    ro.block_size = options_.block_size;
    ro.num_device_blocks = options_.num_blocks;
    ro.num_host_blocks = options_.num_host_blocks;
    runner_ = std::make_unique<engine::FakeModelRunner>(ro);
    sched_ = std::make_unique<Scheduler>(options_.sched, *cache_);
  }

  // Adds a request of `n` samples; returns the id of sample 0 (samples get consecutive ids).
  cache::SeqId Add(int prompt_len, int max_tokens, int tenant = 0, int priority = 0,
                   uint64_t seed = 1, int n = 1, int prompt_salt = 0) {
    std::vector<int32_t> prompt;
    for (int i = 0; i < prompt_len; ++i) prompt.push_back((i * 7 + prompt_salt * 13 + 3) % options_.vocab_size);
    cache::SeqId first{next_id_};
    for (int k = 0; k < n; ++k) {
      SequenceState s;
      s.id = cache::SeqId{next_id_++};
      s.request_key = static_cast<uint64_t>(first.value());
      s.tenant = tenant;
      s.priority = priority;
      s.arrival = arrival_;
      s.arrival_seq = arrival_++;
      s.sampling.seed = seed;
      s.sampling.sample_index = k;
      s.stop.max_tokens = max_tokens;
      s.tokens = prompt;
      s.num_prompt_tokens = prompt_len;
      if (k > 0) s.fork_parent = first;
      s.compression = compression;
      s.compression.prompt_len = prompt_len;
      s.max_chunk = compression.kind == config::CompressionPolicyKind::kFull ? 0 : max_chunk;
      s.spec = spec;
      s.lora_id = lora_id;
      sched_->Add(std::move(s));
    }
    return first;
  }

  // One engine step. Returns false when there was nothing to run.
  bool Step() {
    sched_->Schedule(plan_);
    if (plan_.empty() && plan_.finished.empty()) return false;
    trace_ += plan_.ToString();
    absl::Status st = runner_->Execute(plan_, result_);
    EXPECT_TRUE(st.ok()) << st << "\n" << plan_.ToString();
    if (!st.ok()) return false;
    for (const auto& c : result_.compactions) {
      trace_ += absl::StrCat("  compact seq ", c.seq.value(), ": ", c.phys_len_before, "->", c.new_phys_len,
                             " slots, ", c.blocks_freed, " blocks freed\n");
    }
    updates_.clear();
    sched_->Update(plan_, result_, updates_);
    for (const auto& u : updates_) {
      if (u.token) outputs_[u.seq.value()].push_back(u.token->token_id);
      if (u.finish) finished_[u.seq.value()] = *u.finish;
    }
    absl::Status inv = cache::CheckCacheInvariants(*cache_);
    EXPECT_TRUE(inv.ok()) << inv << " after step " << plan_.step_id;
    ++steps_;
    return inv.ok();
  }

  int RunUntilIdle(int max_steps = 10000) {
    int n = 0;
    while (n < max_steps && Step()) ++n;
    return n;
  }

  // Compares the recorded trace with tests/fixtures/scheduler/<name>.trace, or rewrites it
  // when KVSERVE_UPDATE_GOLDEN=1 (review the diff before committing).
  void ExpectGolden(const std::string& name) {
    std::string path = std::string(KVSERVE_SOURCE_DIR) + "/tests/fixtures/scheduler/" + name + ".trace";
    const char* update = std::getenv("KVSERVE_UPDATE_GOLDEN");
    if (update != nullptr && std::string(update) == "1") {
      std::ofstream(path) << trace_;
      return;
    }
    std::ifstream in(path);
    ASSERT_TRUE(in.good()) << "missing golden trace " << path
                           << " (run with KVSERVE_UPDATE_GOLDEN=1 to create it)";
    std::stringstream ss;
    ss << in.rdbuf();
    EXPECT_EQ(trace_, ss.str()) << "golden trace " << name << " differs";
  }

  void ExpectAllFree() {
    cache::CacheUsage u = cache_->usage();
    EXPECT_EQ(u.used_blocks, 0) << u.ToString();
    EXPECT_EQ(u.free_blocks, u.total_blocks) << u.ToString();
    EXPECT_EQ(u.swap_used_blocks, 0) << u.ToString();
    EXPECT_EQ(cache_->num_sequences(), 0);
    EXPECT_FALSE(sched_->has_work());
  }

  // Compression settings of the sequences Add creates from now on (prompt_len is filled in).
  compression::PolicyParams compression;
  int max_chunk = 0;
  // Speculative decoding of the sequences Add creates from now on (needs sched.speculation).
  speculative::SpecParams spec;
  int32_t lora_id = -1;  // LoRA adapter id of the sequences Add makes next (-1: base)

  Scheduler& sched() { return *sched_; }
  cache::KvCacheManager& cache() { return *cache_; }
  engine::FakeModelRunner& runner() { return *runner_; }
  const std::string& trace() const { return trace_; }
  const std::vector<int32_t>& output(cache::SeqId s) { return outputs_[s.value()]; }
  std::map<int64_t, SeqFinish>& finished() { return finished_; }
  const StepPlan& last_plan() const { return plan_; }

 private:
  HarnessOptions options_;
  std::unique_ptr<cache::KvCacheManager> cache_;
  std::unique_ptr<engine::FakeModelRunner> runner_;
  std::unique_ptr<Scheduler> sched_;
  StepPlan plan_;
  StepResult result_;
  std::vector<SeqUpdate> updates_;
  std::string trace_;
  std::map<int64_t, std::vector<int32_t>> outputs_;
  std::map<int64_t, SeqFinish> finished_;
  int64_t next_id_ = 1;
  uint64_t arrival_ = 0;
  int steps_ = 0;
};

}  // namespace kvserve::scheduler::testing
