// One scheduling step (Schedule + Update) with N running sequences in steady decode.
// The model is out of the loop: results are synthesized (one token per sampling sequence),
// so the figure is the scheduler's own cost. Target (docs/benchmarks.md): <= 1 us per
// running sequence per step.
#include <benchmark/benchmark.h>

#include <memory>

#include "cache/kv_cache_manager.h"
#include "scheduler/scheduler.h"

namespace kvserve::scheduler {
namespace {

void BM_ScheduleStep(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  cache::KvCacheManagerOptions co;
  co.layout.block_size = 16;
  co.num_blocks = n * 8 + 64;  // room for every sequence to grow for many steps
  co.enable_prefix_caching = true;
  co.expected_sequences = n;
  cache::KvCacheManager cache(co, base::Logger());
  SchedulerOptions so;
  so.max_num_seqs = n;
  so.max_num_batched_tokens = n * 16;
  so.max_model_len = 1 << 20;
  Scheduler sched(so, cache);
  int64_t next_id = 1;
  // Sequences live for 64 generated tokens and are replaced when they finish, so the step
  // measured is a steady state: N running, a few finishing and being admitted each step.
  auto add = [&] {
    SequenceState s;
    s.id = cache::SeqId{next_id};
    s.arrival_seq = static_cast<uint64_t>(next_id);
    s.stop.max_tokens = 64;
    s.sampling.seed = 1;
    for (int t = 0; t < 8; ++t) s.tokens.push_back(static_cast<int32_t>((next_id + t) % 1000));
    s.num_prompt_tokens = 8;
    sched.Add(std::move(s));
    ++next_id;
  };
  for (int i = 0; i < n; ++i) {
    // Stagger lengths so finishes spread over steps.
    add();
  }
  StepPlan plan;
  StepResult result;
  std::vector<SeqUpdate> updates;
  auto step = [&] {
    sched.Schedule(plan);
    result.clear();
    result.step_id = plan.step_id;
    for (const auto& q : plan.seqs) {
      if (q.sample) result.sampled.push_back(SampledToken{q.seq, 7, 0.0f, {}});
    }
    updates.clear();
    sched.Update(plan, result, updates);
    for (const auto& u : updates) {
      if (u.finish) add();
    }
  };
  for (int i = 0; i < 100; ++i) step();  // reach the steady state
  for (auto _ : state) {
    step();
    benchmark::DoNotOptimize(updates.data());
  }
  state.counters["seqs"] = n;
  // Seconds per (running sequence, step); printed with an SI suffix (n = nanoseconds).
  state.counters["per_seq"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * n, benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_ScheduleStep)->Arg(16)->Arg(256)->Arg(1024)->Arg(4096)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace kvserve::scheduler

BENCHMARK_MAIN();
