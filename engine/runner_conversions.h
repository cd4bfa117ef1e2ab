// Conversions every model runner (CPU, CUDA) makes between the scheduler's types and the
// model's/compression's, in one place so the backends cannot drift apart.
#pragma once

#include <cstdint>

#include "compression/kv_compressor.h"
#include "model/sampler.h"
#include "scheduler/step_plan.h"

namespace kvserve::engine {

// The scheduler's sampling parameters as model::Sampler takes them.
model::SamplingParams ToModelParams(const scheduler::SamplingParams& s);

// A compression round's result as the scheduler receives it.
scheduler::Compaction ToCompaction(cache::SeqId seq, int64_t next_position, compression::RoundResult r);

}  // namespace kvserve::engine
