// The decoder forward pass on the CPU (fp32 compute) for every architecture of
// model_config.h, over a mixed batch of prefill chunks and decode tokens reading and writing
// a paged KV cache (see forward_batch.h). [brackets]: only where config.json switches it on.
//
//   x = embed[token_ids] [* sqrt(D) (Gemma)]                    [T][D]
//   per layer:  h   = rmsnorm(x)
//               qkv = h · Wqkvᵀ (+ b)                           [T][(H + 2 Hkv) hd]
//               [q, k = per-head rmsnorm(q), rmsnorm(k)]        (Qwen3, Gemma 3)
//               q, k = rope(q, k, positions)                    (the layer's table: rope_table.h)
//               cache[slot_mapping] = k, v
//               a   = paged_attention(q, cache, block tables)   [T][H hd]
//               x  += a · Woᵀ (+ b)                             [Gemma: x += rmsnorm(a · Woᵀ)]
//               x  += act_mul(rmsnorm(x) · Wgate_upᵀ) · Wdownᵀ   [Gemma: x += rmsnorm(...)]
//                     [MoE layer: x += experts(rmsnorm(x)), model/moe_layer.h]
//   logits = rmsnorm(x[logits_rows]) · lm_headᵀ                 [R][V] [cap tanh(logits / cap)]
//
// Threads: the compute team size (kernels/cpu/compute_pool.h) is fixed at construction (ModelOptions::threads; 0: all
// cores) and applied on whichever thread calls Forward; OpenBLAS runs single-threaded
// inside that team. Scratch is sized once for max_tokens_per_step rows, so a step does
// not allocate. Not thread-safe: one engine thread owns a model.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/logger.h"
#include "cache/kv_layout.h"
#include "model/forward_batch.h"
#include "model/forward_model.h"
#include "model/llama_weights.h"
#include "model/model_config.h"
#include "model/moe_layer.h"
#include "model/rope_table.h"
#include "model/stage_link.h"

namespace kvserve::model {

struct ModelOptions {
  int threads = 0;                 // 0: all cores
  int max_tokens_per_step = 2048;  // rows per Forward; sizes the scratch buffers
  // false: keep only the config, norms and the mapped checkpoint (a device backend uploads
  // from it); Forward is then a FailedPrecondition.
  bool pack_weights = true;
  // The longest sequence the server admits (model.max_model_len); 0: the model's own. It
  // fixes dynamic-NTK and longrope frequencies (rope_table.h).
  int64_t max_context = 0;
  base::Logger logger;
  // Pipeline stage (stage_link.h): this process holds and runs layers [layer_begin,
  // layer_end) only (layer_end 0: to the last), the embedding only when layer_begin is 0 and
  // the final norm and lm_head only when it runs the last layer; its KV layout has only its
  // layers (KvLayoutFor). A stage short of either end needs `stage_link` (not owned; must
  // outlive the model).
  int layer_begin = 0;
  int layer_end = 0;
  StageLink* stage_link = nullptr;
};

class LlamaModel final : public ForwardModel {
 public:
  // Reads <dir>/config.json and the safetensors checkpoint in <dir>.
  static absl::StatusOr<std::unique_ptr<LlamaModel>> Load(const std::string& model_dir,
                                                          const ModelOptions& options);
  static absl::StatusOr<std::unique_ptr<LlamaModel>> Create(ModelConfig config,
                                                            LlamaWeights weights,
                                                            const ModelOptions& options);

  const ModelConfig& config() const override { return config_; }
  const LlamaWeights& weights() const { return weights_; }
  // RoPE inverse frequencies after scaling, [head_dim / 2].
  std::span<const float> rope_inv_freq() const override { return rope_.inv_freq; }
  int threads() const { return threads_; }
  int max_tokens_per_step() const override { return max_tokens_; }
  // The KV layout this model needs for a given block size and KV dtype: its stage's layers.
  cache::KvLayout KvLayoutFor(int block_size, config::KvDtype dtype) const override {
    cache::KvLayout l = ForwardModel::KvLayoutFor(block_size, dtype);
    l.num_layers = layer_end_ - layer_begin_;
    return l;
  }
  // Pipeline stage: the layers this process runs, [layer_begin, layer_end).
  int layer_begin() const { return layer_begin_; }
  int layer_end() const { return layer_end_; }
  bool first_stage() const { return layer_begin_ == 0; }
  bool last_stage() const { return layer_end_ == config_.num_layers; }
  StageLink* stage_link() const { return stage_link_; }

  // Runs one step. Writes the K/V of every row with slot_mapping >= 0 into `kv` and the
  // logits of batch.logits_rows (in that order) into `logits` ([R][vocab], R =
  // logits_rows.size()). The batch is validated first (sizes, ranges, block ids); a bad
  // batch is an InvalidArgument naming the field and leaves the cache untouched.
  absl::Status Forward(const ForwardBatch& batch, const KvCacheView& kv, std::span<float> logits,
                       const ForwardObservers* observers = nullptr) override;
  // The last Forward's logits rows after the final norm, [logits_rows][hidden_size] (the
  // final hidden states embeddings pool); valid until the next Forward.
  std::span<const float> final_hidden_rows() const {
    return {h_.data(),
            static_cast<size_t>(last_logits_rows_) * static_cast<size_t>(config_.hidden_size)};
  }

 private:
  LlamaModel(ModelConfig config, LlamaWeights weights, const ModelOptions& options);
  // Layer groups: fills window_offsets_ / window_slots_ for the batch; returns the number of
  // window groups (0 without layer groups).
  int PrepareWindowGroups(const ForwardBatch& b, const KvCacheView& kv);
  absl::Status Validate(const ForwardBatch& batch, const KvCacheView& kv, std::span<float> logits,
                        const ForwardObservers* observers) const;

  ModelConfig config_;
  LlamaWeights weights_;
  RopeTable rope_;        // full-attention layers (and every layer but Gemma 3's local ones)
  RopeTable local_rope_;  // Gemma 3's sliding-window layers; empty otherwise
  int threads_;
  int max_tokens_;
  base::Logger logger_;
  int layer_begin_ = 0;
  int layer_end_ = 0;
  StageLink* stage_link_ = nullptr;

  // Scratch, [max_tokens_][...] each (see Forward for the roles).
  int64_t last_logits_rows_ = 0;
  std::vector<float> x_, h_, qkv_, attn_, gate_up_, act_, cos_sin_, cos_sin_local_, branch_, lse_, attn_workspace_;
  // Layer groups: per window group, the table starts of each sequence and the rows' slots.
  std::vector<int32_t> window_offsets_;
  std::vector<int64_t> window_slots_;
  std::unique_ptr<MoeLayer> moe_;  // scratch and kernels of the MoE layers; null for a dense model
};

}  // namespace kvserve::model
