// The Llama-family forward pass on a CUDA device: the twin of model::LlamaModel (same
// ForwardModel contract, same math per step), reading and writing a CudaKvStorage.
//
//   host:   ValidateForwardBatch ─► PackForwardBatch + RoPE cos/sin (model's own inv_freq)
//           ─► one pinned staging buffer ─► one H2D copy per step
//   device: x = embed[token_ids]                                   EmbeddingGather
//           per layer: h = rmsnorm(x)                              RmsNorm
//                      qkv = h·Wqkvᵀ (+b)                          cuBLAS (+ AddBias)
//                      q, k = rope(q, k)                           ApplyRope (one call, H + Hkv heads)
//                      cache[slot_mapping] = k, v                  WriteKv (codes = CPU's)
//                      a = paged_attention(q, cache)               PagedAttention: split-KV decode, tiled prefill
//                      x += a·Woᵀ (+b)                             cuBLAS beta = 1 (+ AddBias)
//                      x += silu_mul(rmsnorm(x)·Wguᵀ)·Wdownᵀ       cuBLAS, SiluMul, cuBLAS beta = 1
//           logits = rmsnorm(x[logits_rows])·lm_headᵀ              RmsNorm (gathering), cuBLAS
//
// Weights: one device allocation laid out by model::PlanDeviceWeights, uploaded from
// model::LlamaWeights (fp32, or bf16 when the checkpoint is bf16: activations are then rounded
// to bf16 at each GEMM input and accumulated in fp32), or random (benchmarks). Scratch is
// sized once for max_tokens_per_step rows, so a step allocates nothing on the device (the
// metadata buffer grows only when a step carries more block-table entries than any before).
//
// Everything runs on one stream (the KV storage's, so swap and copy-on-write copies issued
// there are ordered before the step). Forward (the ForwardModel entry) returns host logits
// and synchronizes; the runner uses ForwardDevice + SampleGreedy/CopyLogitsRow, so only
// sampled ids, logprobs and the logits rows the host sampler needs cross to the host.
//
// Side outputs: pre-RoPE queries are gathered on the device, attention mass (H2O) is computed
// by kernels::cuda::AttentionMass from the attention's log-sum-exp; each is copied to the host
// once per step. Not thread-safe: one engine thread owns a model.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "base/logger.h"
#include "cache/kv_layout.h"
#include "cuda/cuda_moe_layer.h"
#include "model/device_plan.h"
#include "model/device_weight_layout.h"
#include "model/forward_model.h"
#include "model/llama_weights.h"
#include "model/model_config.h"
#include "model/rope_table.h"

namespace kvserve::cuda {

struct CudaModelOptions {
  int max_tokens_per_step = 2048;  // rows per Forward; sizes the scratch
  int max_logits_rows = 256;       // logits rows held on the device at once (>= max_num_seqs)
  int device = 0;
  void* stream = nullptr;          // cudaStream_t to run on; null: the model creates its own
  base::Logger logger;
  // Prefill rows go through the tiled kernel even where the vectorised split-KV kernel covers
  // the layout (kernels::cuda::VecSplitCovers): the gpu tests compare both routes.
  bool force_tiled_prefill = false;
};

class CudaLlamaModel final : public model::ForwardModel {
 public:
  static absl::StatusOr<std::unique_ptr<CudaLlamaModel>> Create(const model::ModelConfig& config,
                                                                const model::LlamaWeights& weights,
                                                                const CudaModelOptions& options);
  // Random weights drawn on the device (uniform, projections in [-0.02, 0.02), norms 1):
  // for benchmarks of a model shape without a checkpoint.
  static absl::StatusOr<std::unique_ptr<CudaLlamaModel>> CreateRandom(const model::ModelConfig& config,
                                                                      model::DeviceWeightDtype dtype, uint64_t seed,
                                                                      const CudaModelOptions& options);
  ~CudaLlamaModel() override;
  CudaLlamaModel(const CudaLlamaModel&) = delete;
  CudaLlamaModel& operator=(const CudaLlamaModel&) = delete;

  const model::ModelConfig& config() const override { return config_; }
  std::span<const float> rope_inv_freq() const override { return inv_freq_; }
  int max_tokens_per_step() const override { return options_.max_tokens_per_step; }

  // kv.layer_data / layer_scales hold DEVICE pointers (CudaKvStorage::device_layer_data).
  // Logits of every batch.logits_rows row to the host (chunks of max_logits_rows); synchronizes.
  absl::Status Forward(const model::ForwardBatch& batch, const model::KvCacheView& kv, std::span<float> logits,
                       const model::ForwardObservers* observers = nullptr) override;

  // The runner's path: the same step, logits (at most max_logits_rows rows) left on the device.
  absl::Status ForwardDevice(const model::ForwardBatch& batch, const model::KvCacheView& kv,
                             const model::ForwardObservers* observers = nullptr);
  // The same step in two halves, for steps with more logits rows than max_logits_rows (drafting
  // sequences need 1 + k rows each): ForwardLayers runs the layers and computes no logits; then
  // ComputeLogits puts logits rows [begin, begin + n) of batch.logits_rows (n <= max_logits_rows)
  // on the device, and SampleGreedy / CopyLogitsRows index that window (row 0 = `begin`) until
  // the next ComputeLogits or forward pass.
  absl::Status ForwardLayers(const model::ForwardBatch& batch, const model::KvCacheView& kv,
                             const model::ForwardObservers* observers = nullptr);
  absl::Status ComputeLogits(int begin, int n);
  int max_logits_rows() const { return options_.max_logits_rows; }
  // After ForwardDevice: greedy token and raw log-softmax of it for each of the step's
  // `rows` logits rows (kernels/cuda/llama_kernels.h GreedySample); synchronizes.
  // `masks` (may be null): structured-output masks of the constrained rows
  // (model::PackDeviceMasks); those rows take the argmax over their allowed tokens, the
  // reported logprob stays the raw row's, as model::Sampler. Only these masks are uploaded.
  absl::Status SampleGreedy(int rows, std::span<int32_t> tokens, std::span<float> logprobs,
                            const model::DeviceMasks* masks = nullptr);
  // 64-bit words of one token mask for this vocabulary.
  int mask_words() const { return (config_.vocab_size + 63) / 64; }
  // After ForwardDevice: logits row `row` (index into batch.logits_rows) to the host; synchronizes.
  absl::Status CopyLogitsRow(int row, std::span<float> out) { return CopyLogitsRows(row, 1, out); }
  // Rows [first, first + n) of the logits on the device, in one copy; synchronizes.
  absl::Status CopyLogitsRows(int first, int n, std::span<float> out);
  absl::Status Synchronize();
  // Moves the model onto `stream` (a cudaStream_t that must outlive the model, e.g. the KV
  // storage's), after finishing everything queued on the current one.
  absl::Status UseStream(void* stream);

  void* stream() const { return stream_; }
  int device() const { return options_.device; }
  model::DeviceWeightDtype weight_dtype() const { return plan_.dtype; }
  size_t weight_bytes() const { return plan_.total_bytes; }
  size_t scratch_bytes() const { return scratch_bytes_; }

 private:
  CudaLlamaModel(const model::ModelConfig& config, model::DeviceWeightDtype dtype, const CudaModelOptions& options);
  absl::Status Init();  // stream, cuBLAS, weights allocation, scratch
  absl::Status Upload(const model::LlamaWeights& weights);
  absl::Status FillRandom(uint64_t seed);
  // Runs embedding + all layers for `batch`; leaves the final hidden states in x_.
  absl::Status RunLayers(const model::ForwardBatch& batch, const model::KvCacheView& kv,
                         const model::ForwardObservers* observers);
  // Final norm + LM head of logits rows [begin, begin + n) into logits_.
  absl::Status LmHead(int begin, int n);
  // Gemma's sandwich norms: x += RmsNorm(h) with the norm at weights_ + norm_w, over the step's
  // rows (the branch output is in h_).
  absl::Status AddNormed(size_t norm_w);
  // y (=|+=) x·Wᵀ (W at weight offset `w`) for `rows` rows; bf16 weights round x to bf16 first.
  absl::Status Linear(const float* x, int64_t x_stride, size_t w, float* y, int64_t y_stride, int64_t rows, int in,
                      int out, bool accumulate);
  // y = xb_ · W[w]ᵀ for bf16 weights whose input the producing kernel already wrote to xb_ as
  // bf16 codes (RmsNormBf16, SiluMulBf16): the ToBf16 pass saved, the same result.
  absl::Status LinearFromBf16(size_t w, float* y, int64_t y_stride, int64_t rows, int in, int out, bool accumulate);
  // h = RmsNorm(x rows) feeding Linear(h, w): fused into bf16 codes for bf16 weights.
  absl::Status NormLinear(const int32_t* rows_index, size_t norm_w, size_t w, float* y, int64_t y_stride,
                          int64_t rows, int out);
  absl::Status EnsureMetaCapacity(int64_t int32s, int64_t cos_sin_floats);

  model::ModelConfig config_;
  CudaModelOptions options_;
  model::DeviceWeightLayout plan_;
  std::vector<float> inv_freq_;
  // yarn / longrope: cos and sin both carry this factor (model/rope_table.h), as on the CPU.
  float rope_factor_ = 1.0f;
  // Gemma 3's sliding-window layers rotate with their own base, unscaled (empty otherwise).
  std::vector<float> local_inv_freq_;
  // Gemma: the embedding's sqrt(hidden), rounded to the checkpoint's embedding dtype (1: none).
  float embed_scale_ = 1.0f;
  void* stream_ = nullptr;
  void* own_stream_ = nullptr;  // the stream this model created (destroyed with it), if any
  struct Gemm;
  std::unique_ptr<Gemm> gemm_;
  std::unique_ptr<CudaMoeLayer> moe_;  // mixture-of-experts layers' scratch; null for a dense model
  int num_sms_ = 1;

  std::byte* weights_ = nullptr;  // device
  // Device scratch (one allocation): activations for max_tokens rows, attention workspace,
  // logits, sampling outputs.
  void* scratch_ = nullptr;
  size_t scratch_bytes_ = 0;
  float *x_ = nullptr, *h_ = nullptr, *qkv_ = nullptr, *attn_ = nullptr, *gate_up_ = nullptr, *act_ = nullptr,
        *logits_ = nullptr, *logprobs_ = nullptr;
  uint16_t* xb_ = nullptr;  // bf16 GEMM input staging
  int32_t* tokens_ = nullptr;
  int32_t* mask_index_ = nullptr;  // [max_logits_rows]
  uint64_t* masks_ = nullptr;      // [max_logits_rows][mask_words]
  void* attn_ws_ = nullptr;
  size_t attn_ws_bytes_ = 0;
  float* prerope_ = nullptr;  // [L][T][q], allocated on first use
  size_t prerope_bytes_ = 0;
  void* mass_dev_ = nullptr;  // [T][H] lse, then [L][S][Hkv][stride] attention mass (H2O); grows
  size_t mass_bytes_ = 0;
  // Per-step metadata: packed batch then the cos/sin table, device + pinned host mirror.
  void* meta_dev_ = nullptr;
  void* meta_host_ = nullptr;
  size_t meta_bytes_ = 0;
  model::PackedBatch packed_;
  int32_t* d_meta_ = nullptr;  // device view of the packed batch
  float* d_cos_sin_ = nullptr;        // [T][rotary_dim], then the local table when there is one
  float* d_cos_sin_local_ = nullptr;
  std::vector<int32_t> staging_;
  std::vector<float> cos_sin_host_;
  int last_logits_rows_ = 0;
};

}  // namespace kvserve::cuda
