// The forward pass as the compression code, the quality evaluation and the calibrator see
// it: a model shape, its RoPE table and one batched step over a paged KV cache. LlamaModel
// (CPU) implements it; a device backend implements the same contract, so none of those
// callers depends on the concrete CPU model.
//
//   caller ──► KvLayoutFor(block, dtype)        the KV layout the caller allocates
//          ──► Forward(batch, kv, logits, obs)  writes K/V at batch.slot_mapping, logits of
//                                               batch.logits_rows, optional side outputs
//
// Not thread-safe: one thread owns a model.
#pragma once

#include <span>

#include "absl/status/status.h"
#include "cache/kv_layout.h"
#include "config/config.h"
#include "model/forward_batch.h"
#include "model/model_config.h"

namespace kvserve::model {

class ForwardModel {
 public:
  virtual ~ForwardModel() = default;

  virtual const ModelConfig& config() const = 0;
  // RoPE inverse frequencies after scaling, [head_dim / 2].
  virtual std::span<const float> rope_inv_freq() const = 0;
  // Most rows one Forward accepts.
  virtual int max_tokens_per_step() const = 0;
  // The KV layout this model needs for a given block size and KV dtype: the config's layers,
  // KV heads and head_dim (every Llama-family model, CPU or device).
  virtual cache::KvLayout KvLayoutFor(int block_size, config::KvDtype dtype) const {
    cache::KvLayout l;
    l.num_layers = config().num_layers;
    l.num_kv_heads = config().num_kv_heads;
    l.head_dim = config().head_dim;
    l.block_size = block_size;
    l.dtype = dtype;
    return l;
  }
  // One step (forward_batch.h). A bad batch is an InvalidArgument and leaves the cache as it was.
  virtual absl::Status Forward(const ForwardBatch& batch, const KvCacheView& kv, std::span<float> logits,
                               const ForwardObservers* observers = nullptr) = 0;
};

}  // namespace kvserve::model
