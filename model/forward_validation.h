// The checks every forward pass (model::LlamaModel, cuda::CudaLlamaModel) makes before it
// touches a cache, in one place so the backends accept and refuse the same batches. A bad
// batch is an InvalidArgument that names the field ("forward batch: ..."); the device model
// relies on them: it never sees a block id, slot or token id outside its arrays.
#pragma once

#include <cstdint>
#include <span>

#include "absl/status/status.h"
#include "cache/kv_layout.h"
#include "model/forward_batch.h"
#include "model/model_config.h"

namespace kvserve::model {

// The batch against a model of `config` accepting `max_tokens` rows, over a pool of
// `num_blocks` blocks laid out as `layout`.
// Entries of block_tables may name demotion tiers (TieredBlock, `lower_tiers`).
absl::Status ValidateForwardBatch(const ModelConfig& config, int max_tokens, const ForwardBatch& batch,
                                  const cache::KvLayout& layout, int64_t num_blocks,
                                  std::span<const kernels::cpu::KvTierStorage> lower_tiers = {});

// One data (and, for scaled dtypes, scale) pointer per layer.
absl::Status ValidateKvView(const KvCacheView& kv);

// Layer groups: the window tables cover every row's position and name blocks of the pool.
absl::Status ValidateWindowTables(const ForwardBatch& b, const KvCacheView& kv);

// The side-output buffers `observers` asks for are large enough for `batch` (null: none).
absl::Status ValidateObservers(const ModelConfig& config, const ForwardBatch& batch,
                               const ForwardObservers* observers);

}  // namespace kvserve::model
