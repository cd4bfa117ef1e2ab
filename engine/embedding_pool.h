// EmbeddingPool: one embedding request's pooled prompt hidden states, as the engine collects
// them from step results (scheduler::HiddenPart, see CpuModelRunner). Mean pooling adds the
// chunks in position order, each position once (a preempted sequence recomputes its prefill
// and reports it again); last pooling keeps the last prompt token's row.
#pragma once

#include <cstdint>
#include <vector>

#include "scheduler/sampling.h"
#include "scheduler/step_plan.h"

namespace kvserve::engine {

class EmbeddingPool {
 public:
  void set_pooling(scheduler::Pooling pooling) { pooling_ = pooling; }
  void Add(const scheduler::HiddenPart& part);
  // The pooled vector once every row came (empty otherwise, and on later calls).
  std::vector<float> Take();

 private:
  scheduler::Pooling pooling_ = scheduler::Pooling::kNone;
  std::vector<float> sum_;
  int32_t rows_ = 0;  // mean: positions [0, rows_) are in sum_
  bool taken_ = false;
};

}  // namespace kvserve::engine
