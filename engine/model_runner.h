// ModelRunner: turns a StepPlan into a StepResult. Implementations: CpuModelRunner (the real
// model on the CPU backend), FakeModelRunner (tests/support/engine: deterministic tokens, for
// scheduler and engine tests), later a CUDA runner. Called only from the engine thread.
#pragma once

#include "absl/status/status.h"
#include "scheduler/step_plan.h"

namespace kvserve::engine {

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;
  // Applies the plan's copies, runs the forward pass and samples. `result` is cleared and
  // refilled (its capacity is reused). A non-OK status fails every sequence of the step.
  virtual absl::Status Execute(const scheduler::StepPlan& plan, scheduler::StepResult& result) = 0;
  virtual int vocab_size() const = 0;
  // Whether Execute verifies drafts (ScheduledSeq::num_draft > 0, docs/speculative.md). The
  // scheduler drafts only for runners that do.
  virtual bool verifies_drafts() const { return false; }
  // Whether Execute reports StepResult::prompt_logprobs for sequences that ask
  // (SamplingParams::prompt_logprobs >= 0). The engine refuses such requests otherwise.
  virtual bool scores_prompts() const { return false; }
};

}  // namespace kvserve::engine
