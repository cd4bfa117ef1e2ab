#include "cuda/cuda_llama_model.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "kernels/cpu/kv_quant.h"
#include "kernels/cuda/gemma_kernels.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/llama_kernels.h"
#include "kernels/cuda/paged_attention.h"

namespace kvserve::cuda {
namespace {

absl::Status CudaStatus(int err, absl::string_view what) {
  if (err == 0) return absl::OkStatus();
  const auto e = static_cast<cudaError_t>(err);
  cudaGetLastError();
  const absl::StatusCode code =
      e == cudaErrorMemoryAllocation ? absl::StatusCode::kResourceExhausted : absl::StatusCode::kInternal;
  return absl::Status(code, absl::StrCat("cuda model: ", what, ": ", cudaGetErrorName(e), ": ", cudaGetErrorString(e)));
}

#define KVS_CUDA_OK(expr, what) KVS_RETURN_IF_ERROR(CudaStatus(static_cast<int>(expr), what))

constexpr size_t kAlign = 256;
size_t AlignUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// Split-KV attention: the workspace every step may use, and the smallest split.
constexpr size_t kAttnWorkspaceFloor = size_t{64} << 20;
constexpr int kMinSplitTokens = 64;

}  // namespace

struct CudaLlamaModel::Gemm {
  std::unique_ptr<kernels::cuda::CublasGemm> blas;
};

CudaLlamaModel::CudaLlamaModel(const model::ModelConfig& config, model::DeviceWeightDtype dtype,
                               const CudaModelOptions& options)
    : config_(config),
      options_(options),
      plan_(model::PlanDeviceWeights(config, dtype)),
      inv_freq_(model::RopeInvFreq(config)),
      rope_factor_(model::ComputeRopeTable(config, config.rope_theta, /*scaled=*/true).attention_factor) {
  if (config.rope_local_theta) {
    local_inv_freq_ = model::ComputeRopeTable(config, *config.rope_local_theta, /*scaled=*/false).inv_freq;
  }
}

CudaLlamaModel::~CudaLlamaModel() {
  if (stream_ != nullptr) cudaStreamSynchronize(static_cast<cudaStream_t>(stream_));
  gemm_.reset();
  cudaFree(weights_);
  cudaFree(scratch_);
  cudaFree(prerope_);
  cudaFree(mass_dev_);
  cudaFree(meta_dev_);
  if (meta_host_ != nullptr) cudaFreeHost(meta_host_);
  if (own_stream_ != nullptr) cudaStreamDestroy(static_cast<cudaStream_t>(own_stream_));
}

namespace {

// What the device forward pass does not compute yet (the CPU backend does): refused with
// the feature named, never approximated.
// Every field of model/model_config.h the CPU forward pass honours has a device twin here;
// what a future config field adds must be refused in this function until it does.
absl::Status CheckImplemented(const model::ModelConfig& c) {
  if (c.activation != model::Activation::kSilu && c.activation != model::Activation::kGeluTanh) {
    return absl::UnimplementedError(absl::StrCat("cuda model: ", c.architecture_name,
                                                 " needs an MLP activation not implemented on the CUDA backend yet "
                                                 "(engine.backend=cpu serves it)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<CudaLlamaModel>> CudaLlamaModel::Create(const model::ModelConfig& config,
                                                                       const model::LlamaWeights& weights,
                                                                       const CudaModelOptions& options) {
  if (weights.num_layers() != config.num_layers) {
    return absl::InvalidArgumentError("cuda model: weights and config disagree on the number of layers");
  }
  KVS_RETURN_IF_ERROR(CheckImplemented(config));
  const auto dtype = weights.bf16_projections() ? model::DeviceWeightDtype::kBf16 : model::DeviceWeightDtype::kFp32;
  std::unique_ptr<CudaLlamaModel> m(new CudaLlamaModel(config, dtype, options));
  KVS_RETURN_IF_ERROR(m->Init());
  KVS_RETURN_IF_ERROR(m->Upload(weights));
  return m;
}

absl::StatusOr<std::unique_ptr<CudaLlamaModel>> CudaLlamaModel::CreateRandom(const model::ModelConfig& config,
                                                                             model::DeviceWeightDtype dtype,
                                                                             uint64_t seed,
                                                                             const CudaModelOptions& options) {
  std::unique_ptr<CudaLlamaModel> m(new CudaLlamaModel(config, dtype, options));
  KVS_RETURN_IF_ERROR(m->Init());
  KVS_RETURN_IF_ERROR(m->FillRandom(seed));
  return m;
}

absl::Status CudaLlamaModel::Init() {
  const auto& c = config_;
  if (options_.max_tokens_per_step < 1 || options_.max_logits_rows < 1) {
    return absl::InvalidArgumentError("cuda model: max_tokens_per_step and max_logits_rows must be >= 1");
  }
  if (c.head_dim > kernels::cuda::kMaxAttentionHeadDim || c.head_dim % 2 != 0 || c.num_kv_heads < 1 ||
      c.num_heads % c.num_kv_heads != 0 || c.num_heads / c.num_kv_heads > kernels::cuda::kMaxAttentionGroup) {
    return absl::InvalidArgumentError(absl::StrCat("cuda model: unsupported attention shape (head_dim ", c.head_dim,
                                                   ", heads ", c.num_heads, "/", c.num_kv_heads,
                                                   "); the CUDA kernels take even head_dim <= ",
                                                   kernels::cuda::kMaxAttentionHeadDim, " and GQA groups <= ",
                                                   kernels::cuda::kMaxAttentionGroup));
  }
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || options_.device < 0 || options_.device >= count) {
    cudaGetLastError();
    return absl::FailedPreconditionError(absl::StrCat("cuda model: no usable CUDA device ", options_.device));
  }
  KVS_CUDA_OK(cudaSetDevice(options_.device), "cudaSetDevice");
  KVS_CUDA_OK(cudaDeviceGetAttribute(&num_sms_, cudaDevAttrMultiProcessorCount, options_.device), "SM count");
  if (options_.stream != nullptr) {
    stream_ = options_.stream;
  } else {
    cudaStream_t s = nullptr;
    KVS_CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
    stream_ = s;
    own_stream_ = s;
  }
  gemm_ = std::make_unique<Gemm>();
  KVS_ASSIGN_OR_RETURN(gemm_->blas, kernels::cuda::CublasGemm::Create(stream_));
  if (c.any_moe_layer()) {
    KVS_ASSIGN_OR_RETURN(moe_, CudaMoeLayer::Create(c, options_.max_tokens_per_step,
                                                    plan_.dtype == model::DeviceWeightDtype::kBf16));
  }
  KVS_CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&weights_), plan_.total_bytes),
              absl::StrCat("allocating ", plan_.total_bytes, " bytes of weights"));

  const auto t = static_cast<size_t>(options_.max_tokens_per_step);
  const auto d = static_cast<size_t>(c.hidden_size), q = static_cast<size_t>(c.q_size());
  const auto qkv = static_cast<size_t>(c.q_size() + 2 * c.kv_size());
  const auto inter = static_cast<size_t>(c.intermediate_size);
  const auto rows = static_cast<size_t>(options_.max_logits_rows);
  const size_t widest = std::max({d, q, inter});
  // One split per row must always fit (ChooseSplitTokens guarantees the rest).
  attn_ws_bytes_ = std::max(kAttnWorkspaceFloor, t * static_cast<size_t>(c.num_heads) *
                                                     (static_cast<size_t>(c.head_dim) + 2) * sizeof(float));
  size_t at = 0;
  auto take = [&at](size_t bytes) {
    const size_t off = at;
    at = AlignUp(at + bytes);
    return off;
  };
  const size_t o_x = take(t * d * 4), o_h = take(t * d * 4), o_qkv = take(t * qkv * 4), o_attn = take(t * q * 4),
               o_gu = take(t * 2 * inter * 4), o_act = take(t * inter * 4), o_xb = take(t * widest * 2),
               o_ws = take(attn_ws_bytes_), o_logits = take(rows * static_cast<size_t>(c.vocab_size) * 4),
               o_lp = take(rows * 4), o_tok = take(rows * 4), o_mask_index = take(rows * 4),
               o_masks = take(rows * static_cast<size_t>(mask_words()) * 8);
  scratch_bytes_ = at;
  KVS_CUDA_OK(cudaMalloc(&scratch_, scratch_bytes_), absl::StrCat("allocating ", scratch_bytes_, " bytes of scratch"));
  auto* base = static_cast<std::byte*>(scratch_);
  x_ = reinterpret_cast<float*>(base + o_x);
  h_ = reinterpret_cast<float*>(base + o_h);
  qkv_ = reinterpret_cast<float*>(base + o_qkv);
  attn_ = reinterpret_cast<float*>(base + o_attn);
  gate_up_ = reinterpret_cast<float*>(base + o_gu);
  act_ = reinterpret_cast<float*>(base + o_act);
  xb_ = reinterpret_cast<uint16_t*>(base + o_xb);
  attn_ws_ = base + o_ws;
  logits_ = reinterpret_cast<float*>(base + o_logits);
  logprobs_ = reinterpret_cast<float*>(base + o_lp);
  tokens_ = reinterpret_cast<int32_t*>(base + o_tok);
  mask_index_ = reinterpret_cast<int32_t*>(base + o_mask_index);
  masks_ = reinterpret_cast<uint64_t*>(base + o_masks);
  // Metadata for a step of max_tokens rows over short tables; grows when needed.
  KVS_RETURN_IF_ERROR(EnsureMetaCapacity(static_cast<int64_t>(t) * 8 + 1024,
                                         static_cast<int64_t>(t) * c.head_dim));
  options_.logger.info("cuda model: %d layers, hidden %d, heads %d/%d x %d, vocab %d, %s weights %.1f MiB, "
                       "scratch %.1f MiB for %d rows, %d SMs",
                       c.num_layers, c.hidden_size, c.num_heads, c.num_kv_heads, c.head_dim, c.vocab_size,
                       plan_.dtype == model::DeviceWeightDtype::kBf16 ? "bf16" : "fp32",
                       static_cast<double>(plan_.total_bytes) / (1 << 20),
                       static_cast<double>(scratch_bytes_) / (1 << 20), options_.max_tokens_per_step, num_sms_);
  return absl::OkStatus();
}

absl::Status CudaLlamaModel::EnsureMetaCapacity(int64_t int32s, int64_t cos_sin_floats) {
  const size_t need = AlignUp(static_cast<size_t>(int32s) * 4) + static_cast<size_t>(cos_sin_floats) * 4;
  if (need <= meta_bytes_) return absl::OkStatus();
  // Growth only: the previous step's copies must be done before the buffers go away.
  KVS_CUDA_OK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)), "synchronizing before growing metadata");
  cudaFree(meta_dev_);
  if (meta_host_ != nullptr) cudaFreeHost(meta_host_);
  meta_dev_ = nullptr;
  meta_host_ = nullptr;
  meta_bytes_ = 0;
  const size_t bytes = need + need / 2;
  KVS_CUDA_OK(cudaMalloc(&meta_dev_, bytes), "allocating step metadata");
  KVS_CUDA_OK(cudaMallocHost(&meta_host_, bytes), "allocating pinned step metadata");
  meta_bytes_ = bytes;
  return absl::OkStatus();
}

absl::Status CudaLlamaModel::Upload(const model::LlamaWeights& w) {
  const bool bf16 = plan_.dtype == model::DeviceWeightDtype::kBf16;
  const model::SafetensorsCheckpoint& ckpt = w.checkpoint();
  const model::CheckpointMap& map = w.map();
  // Streams each weight from the mapped checkpoint to the device through one host staging
  // buffer the size of the largest weight: fp32 tensors as fp32, projections in the plan's
  // dtype (bf16 checkpoint bytes go as they are). The source pages leave the resident set as
  // each weight is read (model/tensor_reader.h), so the host never holds a copy of the model.
  std::vector<std::byte> staging;
  auto put = [&](size_t off, const model::WeightSpec& spec, bool as_bf16) -> absl::Status {
    const size_t n = static_cast<size_t>(spec.elements());
    staging.resize(n * (as_bf16 ? 2 : 4));
    if (as_bf16) {
      KVS_RETURN_IF_ERROR(model::ReadBf16(ckpt, spec, {reinterpret_cast<uint16_t*>(staging.data()), n}));
    } else {
      auto* f = reinterpret_cast<float*>(staging.data());
      KVS_RETURN_IF_ERROR(model::ReadF32(ckpt, spec, {f, n}));
      // Gemma's RMSNorm scales by (1 + w): the 1 is added once here, as model/llama_weights.cc does.
      if (config_.norm_weight_offset && spec.is_norm) {
        for (size_t i = 0; i < n; ++i) f[i] += 1.0f;
      }
    }
    KVS_CUDA_OK(cudaMemcpy(weights_ + off, staging.data(), staging.size(), cudaMemcpyHostToDevice),
                "uploading weights");
    return absl::OkStatus();
  };
  KVS_RETURN_IF_ERROR(put(plan_.embed, map.embed, false));
  if (config_.scale_embedding) {
    // As model/llama_model.cc EmbeddingScale: sqrt(hidden) in the embedding's own dtype.
    const float sc = std::sqrt(static_cast<float>(config_.hidden_size));
    KVS_ASSIGN_OR_RETURN(const model::WeightDtype ed, model::SpecDtype(ckpt, map.embed));
    embed_scale_ = ed == model::WeightDtype::kBf16   ? kernels::cpu::Bf16ToFloat(kernels::cpu::FloatToBf16(sc))
                   : ed == model::WeightDtype::kF16 ? kernels::cpu::HalfToFloat(kernels::cpu::FloatToHalf(sc))
                                                    : sc;
  }
  KVS_RETURN_IF_ERROR(put(plan_.final_norm, map.final_norm, false));
  KVS_RETURN_IF_ERROR(put(plan_.lm_head, map.lm_head, bf16));
  for (size_t l = 0; l < map.layers.size(); ++l) {
    const model::LayerWeightSpecs& s = map.layers[l];
    const model::DeviceLayerOffsets& o = plan_.layers[l];
    KVS_RETURN_IF_ERROR(put(o.input_norm, s.input_norm, false));
    KVS_RETURN_IF_ERROR(put(o.qkv, s.qkv, bf16));
    if (o.qkv_bias != model::kNoTensor) KVS_RETURN_IF_ERROR(put(o.qkv_bias, s.qkv_bias, false));
    if (o.q_norm != model::kNoTensor) {
      KVS_RETURN_IF_ERROR(put(o.q_norm, s.q_norm, false));
      KVS_RETURN_IF_ERROR(put(o.k_norm, s.k_norm, false));
    }
    if (o.sinks != model::kNoTensor) KVS_RETURN_IF_ERROR(put(o.sinks, s.sinks, false));
    KVS_RETURN_IF_ERROR(put(o.o, s.o, bf16));
    if (o.o_bias != model::kNoTensor) KVS_RETURN_IF_ERROR(put(o.o_bias, s.o_bias, false));
    KVS_RETURN_IF_ERROR(put(o.post_norm, s.pre_ff_norm, false));
    if (o.post_attn_norm != model::kNoTensor) {
      KVS_RETURN_IF_ERROR(put(o.post_attn_norm, s.post_attn_norm, false));
      KVS_RETURN_IF_ERROR(put(o.post_ff_norm, s.post_ff_norm, false));
    }
    if (o.router != model::kNoTensor) {
      KVS_RETURN_IF_ERROR(put(o.router, s.router, false));
      if (o.router_bias != model::kNoTensor) KVS_RETURN_IF_ERROR(put(o.router_bias, s.router_bias, false));
      for (size_t e = 0; e < s.experts.size(); ++e) {
        KVS_RETURN_IF_ERROR(put(o.expert_gate_up + e * o.expert_gate_up_stride, s.experts[e].gate_up, bf16));
        KVS_RETURN_IF_ERROR(put(o.expert_down + e * o.expert_down_stride, s.experts[e].down, bf16));
        if (o.expert_gate_up_bias != model::kNoTensor) {
          KVS_RETURN_IF_ERROR(
              put(o.expert_gate_up_bias + e * o.expert_gate_up_bias_stride, s.experts[e].gate_up_bias, false));
          KVS_RETURN_IF_ERROR(put(o.expert_down_bias + e * o.expert_down_bias_stride, s.experts[e].down_bias, false));
        }
      }
      continue;
    }
    KVS_RETURN_IF_ERROR(put(o.gate_up, s.gate_up, bf16));
    KVS_RETURN_IF_ERROR(put(o.down, s.down, bf16));
  }
  return absl::OkStatus();
}

absl::Status CudaLlamaModel::FillRandom(uint64_t seed) {
  const auto& c = config_;
  const bool bf16 = plan_.dtype == model::DeviceWeightDtype::kBf16;
  void* s = stream_;
  uint64_t tensor = 0;
  auto f32 = [&](size_t off, int64_t n, float scale, float shift) {
    return CudaStatus(kernels::cuda::RandomFillF32(reinterpret_cast<float*>(weights_ + off), n, seed + 977 * ++tensor,
                                                   scale, shift, s),
                      "random weights");
  };
  auto proj = [&](size_t off, int64_t n) {
    if (!bf16) return f32(off, n, 0.02f, 0.0f);
    return CudaStatus(kernels::cuda::RandomFillBf16(reinterpret_cast<uint16_t*>(weights_ + off), n,
                                                    seed + 977 * ++tensor, 0.02f, 0.0f, s),
                      "random weights");
  };
  const int64_t d = c.hidden_size, v = c.vocab_size, q = c.q_size(), inter = c.intermediate_size;
  const int64_t qkv = c.q_size() + 2 * c.kv_size();
  KVS_RETURN_IF_ERROR(f32(plan_.embed, v * d, 1.0f, 0.0f));
  KVS_RETURN_IF_ERROR(f32(plan_.final_norm, d, 0.0f, 1.0f));
  KVS_RETURN_IF_ERROR(proj(plan_.lm_head, v * d));
  for (const model::DeviceLayerOffsets& o : plan_.layers) {
    KVS_RETURN_IF_ERROR(f32(o.input_norm, d, 0.0f, 1.0f));
    KVS_RETURN_IF_ERROR(proj(o.qkv, qkv * d));
    if (o.qkv_bias != model::kNoTensor) KVS_RETURN_IF_ERROR(f32(o.qkv_bias, qkv, 0.0f, 0.0f));
    if (o.q_norm != model::kNoTensor) {
      KVS_RETURN_IF_ERROR(f32(o.q_norm, c.head_dim, 0.0f, 1.0f));
      KVS_RETURN_IF_ERROR(f32(o.k_norm, c.head_dim, 0.0f, 1.0f));
    }
    if (o.sinks != model::kNoTensor) KVS_RETURN_IF_ERROR(f32(o.sinks, c.num_heads, 1.0f, 0.0f));
    KVS_RETURN_IF_ERROR(proj(o.o, d * q));
    if (o.o_bias != model::kNoTensor) KVS_RETURN_IF_ERROR(f32(o.o_bias, d, 0.0f, 0.0f));
    KVS_RETURN_IF_ERROR(f32(o.post_norm, d, 0.0f, 1.0f));
    if (o.post_attn_norm != model::kNoTensor) {
      KVS_RETURN_IF_ERROR(f32(o.post_attn_norm, d, 0.0f, 1.0f));
      KVS_RETURN_IF_ERROR(f32(o.post_ff_norm, d, 0.0f, 1.0f));
    }
    if (o.router != model::kNoTensor) {
      const int64_t ie = c.moe.intermediate_size;
      KVS_RETURN_IF_ERROR(f32(o.router, c.moe.num_experts * d, 0.02f, 0.0f));
      if (o.router_bias != model::kNoTensor) KVS_RETURN_IF_ERROR(f32(o.router_bias, c.moe.num_experts, 0.0f, 0.0f));
      for (size_t e = 0; e < static_cast<size_t>(c.moe.num_experts); ++e) {
        KVS_RETURN_IF_ERROR(proj(o.expert_gate_up + e * o.expert_gate_up_stride, 2 * ie * d));
        KVS_RETURN_IF_ERROR(proj(o.expert_down + e * o.expert_down_stride, d * ie));
        if (o.expert_gate_up_bias != model::kNoTensor) {
          KVS_RETURN_IF_ERROR(f32(o.expert_gate_up_bias + e * o.expert_gate_up_bias_stride, 2 * ie, 0.0f, 0.0f));
          KVS_RETURN_IF_ERROR(f32(o.expert_down_bias + e * o.expert_down_bias_stride, d, 0.0f, 0.0f));
        }
      }
      continue;
    }
    KVS_RETURN_IF_ERROR(proj(o.gate_up, 2 * inter * d));
    KVS_RETURN_IF_ERROR(proj(o.down, d * inter));
  }
  return Synchronize();
}

absl::Status CudaLlamaModel::Linear(const float* x, int64_t x_stride, size_t w, float* y, int64_t y_stride,
                                    int64_t rows, int in, int out, bool accumulate) {
  if (plan_.dtype == model::DeviceWeightDtype::kBf16) {
    KVS_CUDA_OK(kernels::cuda::ToBf16(x, x_stride, rows, in, xb_, stream_), "bf16 GEMM input");
    return LinearFromBf16(w, y, y_stride, rows, in, out, accumulate);
  }
  return gemm_->blas->Linear(kernels::cuda::GemmDtype::kFp32, x, x_stride, weights_ + w, y, y_stride, rows, in, out,
                             accumulate);
}

absl::Status CudaLlamaModel::LinearFromBf16(size_t w, float* y, int64_t y_stride, int64_t rows, int in, int out,
                                            bool accumulate) {
  return gemm_->blas->Linear(kernels::cuda::GemmDtype::kBf16, xb_, in, weights_ + w, y, y_stride, rows, in, out,
                             accumulate);
}

absl::Status CudaLlamaModel::NormLinear(const int32_t* rows_index, size_t norm_w, size_t w, float* y,
                                        int64_t y_stride, int64_t rows, int out) {
  const int d = config_.hidden_size;
  const auto* norm = reinterpret_cast<const float*>(weights_ + norm_w);
  if (plan_.dtype == model::DeviceWeightDtype::kBf16) {
    KVS_CUDA_OK(kernels::cuda::RmsNormBf16(x_, d, rows_index, norm, xb_, d, rows, d, config_.rms_norm_eps, stream_),
                "rmsnorm");
    return LinearFromBf16(w, y, y_stride, rows, d, out, false);
  }
  KVS_CUDA_OK(kernels::cuda::RmsNorm(x_, d, rows_index, norm, h_, d, rows, d, config_.rms_norm_eps, stream_),
              "rmsnorm");
  return Linear(h_, d, w, y, y_stride, rows, d, out, false);
}

absl::Status CudaLlamaModel::RunLayers(const model::ForwardBatch& b, const model::KvCacheView& kv,
                                       const model::ForwardObservers* observers) {
  const auto& c = config_;
  KVS_RETURN_IF_ERROR(model::ValidateForwardBatch(c, options_.max_tokens_per_step, b, kv.layout, kv.num_blocks));
  KVS_RETURN_IF_ERROR(model::ValidateKvView(kv));
  KVS_RETURN_IF_ERROR(model::ValidateObservers(c, b, observers));
  // Fail closed until the grouped LoRA kernels exist on the device: never the base alone.
  if (b.lora != nullptr) {
    return absl::UnimplementedError("LoRA adapters are not implemented by the CUDA forward yet");
  }
  const int64_t t = b.num_tokens();
  const int d = c.hidden_size, q_size = c.q_size(), kv_size = c.kv_size();
  const int qkv_stride = q_size + 2 * kv_size, inter = c.intermediate_size, hd = c.head_dim;
  const bool want_queries = observers != nullptr && !observers->pre_rope_queries.empty();
  const bool want_mass = observers != nullptr && !observers->attention_mass.empty();
  const int s_count = b.num_seqs();
  const size_t mass_floats = want_mass ? static_cast<size_t>(c.num_layers) * static_cast<size_t>(s_count) *
                                             static_cast<size_t>(c.num_kv_heads) *
                                             static_cast<size_t>(observers->mass_stride)
                                       : 0;
  if (t == 0) {
    if (want_mass) std::fill(observers->attention_mass.begin(), observers->attention_mass.end(), 0.0f);
    return absl::OkStatus();
  }

  // Host side: pack the batch and the RoPE table (as kernels::cpu::RopeCosSin: angle in double).
  // Where the vectorised split-KV kernel covers the layout every row takes it: on an H200 it
  // beats the tiled prefill kernel 3x even for 512-row chunks over 8K contexts (cuda_kv_bench,
  // docs/benchmarks.md). Otherwise prefill chunks go to the tiled kernel, decode rows to the
  // general split-KV kernel.
  const int tile_rows =
      !options_.force_tiled_prefill && kernels::cuda::VecSplitCovers(kv.layout, c.num_heads)
          ? 0
          : model::PrefillTileRows(hd, c.num_heads / c.num_kv_heads, kernels::cuda::kMaxPrefillTileFloats);
  packed_ = model::PackForwardBatch(b, staging_, tile_rows);
  // [T][rotary_dim] per table (the global one, then Gemma 3's local one), as model/llama_model.cc
  // CosSin: angles in double, rounded, then the attention factor.
  const int rd = c.rotary_dim, half = rd / 2;
  const int tables = local_inv_freq_.empty() ? 1 : 2;
  cos_sin_host_.resize(static_cast<size_t>(tables) * t * rd);
  for (int tb = 0; tb < tables; ++tb) {
    const std::vector<float>& freq = tb == 0 ? inv_freq_ : local_inv_freq_;
    const float factor = tb == 0 ? rope_factor_ : 1.0f;
    for (int64_t i = 0; i < t; ++i) {
      float* row = cos_sin_host_.data() + (tb * t + i) * rd;
      const double p = b.positions[static_cast<size_t>(i)];
      for (int f = 0; f < half; ++f) {
        const double angle = p * static_cast<double>(freq[static_cast<size_t>(f)]);
        row[f] = static_cast<float>(std::cos(angle));
        row[half + f] = static_cast<float>(std::sin(angle));
      }
      if (factor != 1.0f) {
        for (int f = 0; f < rd; ++f) row[f] *= factor;
      }
    }
  }
  // The pinned mirror is rewritten below: the previous step's upload must have completed.
  KVS_CUDA_OK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)), "synchronizing before a step");
  KVS_RETURN_IF_ERROR(EnsureMetaCapacity(packed_.total_int32, static_cast<int64_t>(cos_sin_host_.size())));
  const size_t meta_ints = AlignUp(static_cast<size_t>(packed_.total_int32) * 4);
  std::memcpy(meta_host_, staging_.data(), staging_.size() * 4);
  std::memcpy(static_cast<std::byte*>(meta_host_) + meta_ints, cos_sin_host_.data(), cos_sin_host_.size() * 4);
  KVS_CUDA_OK(cudaMemcpyAsync(meta_dev_, meta_host_, meta_ints + cos_sin_host_.size() * 4, cudaMemcpyHostToDevice,
                              static_cast<cudaStream_t>(stream_)),
              "uploading step metadata");
  d_meta_ = static_cast<int32_t*>(meta_dev_);
  d_cos_sin_ = reinterpret_cast<float*>(static_cast<std::byte*>(meta_dev_) + meta_ints);
  d_cos_sin_local_ = tables == 2 ? d_cos_sin_ + t * rd : nullptr;
  const int32_t* token_ids = d_meta_ + packed_.token_ids;
  const auto* slots = reinterpret_cast<const int64_t*>(d_meta_ + packed_.slot_mapping);

  kernels::cuda::DevicePagedSeqs seqs;
  seqs.num_seqs = packed_.num_seqs;
  seqs.num_rows = static_cast<int>(t);
  seqs.max_kv_len = packed_.max_kv_len;
  seqs.seq_starts = d_meta_ + packed_.seq_starts;
  seqs.kv_lens = d_meta_ + packed_.kv_lens;
  seqs.block_table_offsets = d_meta_ + packed_.table_offsets;
  seqs.block_tables = d_meta_ + packed_.block_tables;
  seqs.row_seq = d_meta_ + packed_.row_seq;
  if (tile_rows > 0) {
    seqs.num_split_rows = packed_.num_split_rows;
    seqs.split_rows = d_meta_ + packed_.split_rows;
    seqs.num_tiles = packed_.num_tiles;
    seqs.tile_rows = packed_.tile_rows;
    seqs.tiles = d_meta_ + packed_.tiles;
  }  // else tiles stays null: every row through split-KV
  const int split_kv_rows = tile_rows > 0 ? std::max(1, packed_.num_split_rows) : static_cast<int>(t);
  const int split = model::ChooseSplitTokens(split_kv_rows, c.num_kv_heads, c.num_heads, hd, packed_.max_kv_len,
                                             2 * num_sms_, kMinSplitTokens, attn_ws_bytes_);
  const auto scale = static_cast<float>(c.attention_scale);  // Gemma: query_pre_attn_scalar^-1/2

  if (want_queries) {
    const size_t need = static_cast<size_t>(c.num_layers) * static_cast<size_t>(t) * q_size * sizeof(float);
    if (need > prerope_bytes_) {
      cudaFree(prerope_);
      prerope_ = nullptr;
      prerope_bytes_ = 0;
      // Sized for a full step once, so later steps do not reallocate.
      const size_t full =
          static_cast<size_t>(c.num_layers) * static_cast<size_t>(options_.max_tokens_per_step) * q_size * sizeof(float);
      KVS_CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&prerope_), full), "allocating the pre-RoPE query buffer");
      prerope_bytes_ = full;
    }
  }

  if (want_mass) {
    const size_t need = mass_floats * sizeof(float) +
                        AlignUp(static_cast<size_t>(options_.max_tokens_per_step) * c.num_heads * sizeof(float));
    if (need > mass_bytes_) {
      cudaFree(mass_dev_);
      mass_dev_ = nullptr;
      mass_bytes_ = 0;
      const size_t bytes = need + need / 2;  // grows with the longest context seen
      KVS_CUDA_OK(cudaMalloc(&mass_dev_, bytes), "allocating the attention-mass buffer");
      mass_bytes_ = bytes;
    }
  }
  // [T][H] log-sum-exp of each row's scores (mass only), then [L][S][Hkv][stride] mass.
  float* lse = want_mass ? static_cast<float*>(mass_dev_) : nullptr;
  float* mass = want_mass ? lse + AlignUp(static_cast<size_t>(options_.max_tokens_per_step) * c.num_heads *
                                          sizeof(float)) / sizeof(float)
                          : nullptr;
  if (want_mass) {
    KVS_CUDA_OK(cudaMemsetAsync(mass, 0, mass_floats * sizeof(float), static_cast<cudaStream_t>(stream_)),
                "zeroing attention mass");
  }

  void* s = stream_;
  KVS_CUDA_OK(kernels::cuda::EmbeddingGather(reinterpret_cast<const float*>(weights_ + plan_.embed), d, token_ids, t,
                                             x_, s),
              "embedding");
  if (embed_scale_ != 1.0f) KVS_CUDA_OK(kernels::cuda::ScaleRows(x_, d, t, d, embed_scale_, s), "embedding scale");
  for (int layer = 0; layer < c.num_layers; ++layer) {
    const model::DeviceLayerOffsets& o = plan_.layers[static_cast<size_t>(layer)];
    auto f32 = [this](size_t off) { return reinterpret_cast<const float*>(weights_ + off); };
    std::byte* data = kv.layer_data[static_cast<size_t>(layer)];
    float* scales = kv.layout.has_scales() ? kv.layer_scales[static_cast<size_t>(layer)] : nullptr;

    KVS_RETURN_IF_ERROR(NormLinear(nullptr, o.input_norm, o.qkv, qkv_, qkv_stride, t, qkv_stride));
    if (o.qkv_bias != model::kNoTensor) {
      KVS_CUDA_OK(kernels::cuda::AddBias(qkv_, qkv_stride, f32(o.qkv_bias), t, qkv_stride, s), "qkv bias");
    }
    if (o.q_norm != model::kNoTensor) {
      // Qwen3: per-head RMSNorm of q and k before RoPE (and before the pre-RoPE queries the
      // policies observe, as on the CPU).
      KVS_CUDA_OK(kernels::cuda::HeadRmsNorm(qkv_, t, qkv_stride, c.num_heads, hd, f32(o.q_norm), c.rms_norm_eps, s),
                  "q norm");
      KVS_CUDA_OK(kernels::cuda::HeadRmsNorm(qkv_ + q_size, t, qkv_stride, c.num_kv_heads, hd, f32(o.k_norm),
                                             c.rms_norm_eps, s),
                  "k norm");
    }
    if (want_queries) {
      KVS_CUDA_OK(cudaMemcpy2DAsync(prerope_ + static_cast<size_t>(layer) * t * q_size, q_size * sizeof(float), qkv_,
                                    qkv_stride * sizeof(float), q_size * sizeof(float), static_cast<size_t>(t),
                                    cudaMemcpyDeviceToDevice, static_cast<cudaStream_t>(s)),
                  "pre-RoPE queries");
    }
    // q and k are adjacent in the row: one rotation over H + Hkv heads (Gemma 3's window layers
    // with the local table).
    const float* angles =
        d_cos_sin_local_ != nullptr && c.layer_window[static_cast<size_t>(layer)] > 0 ? d_cos_sin_local_ : d_cos_sin_;
    KVS_CUDA_OK(kernels::cuda::ApplyRope(qkv_, t, c.num_heads + c.num_kv_heads, hd, qkv_stride, angles, s, c.rotary_dim),
                "rope");
    KVS_CUDA_OK(kernels::cuda::WriteKv(kv.layout, data, scales, qkv_ + q_size, qkv_ + q_size + kv_size, qkv_stride,
                                       slots, t, s),
                "kv write");
    // Sliding window, Gemma 2's soft-cap, gpt-oss's sinks (kernels::cuda::DeviceAttentionVariant).
    const kernels::cuda::DeviceAttentionVariant variant{
        c.layer_window[static_cast<size_t>(layer)], static_cast<float>(c.attn_logit_softcap),
        o.sinks != model::kNoTensor ? f32(o.sinks) : nullptr};
    KVS_CUDA_OK(kernels::cuda::PagedAttention(kv.layout, data, scales, seqs, qkv_, qkv_stride, c.num_heads, scale,
                                              attn_, q_size, lse, attn_ws_, attn_ws_bytes_, split, s, variant),
                "paged attention");
    if (want_mass) {
      float* layer_mass = mass + static_cast<size_t>(layer) * static_cast<size_t>(s_count) *
                                     static_cast<size_t>(c.num_kv_heads) * static_cast<size_t>(observers->mass_stride);
      KVS_CUDA_OK(kernels::cuda::AttentionMass(kv.layout, data, scales, seqs, qkv_, qkv_stride, c.num_heads, scale, lse,
                                               layer_mass, observers->mass_stride, s, variant),
                  "attention mass");
    }
    // Gemma's sandwich norms: x += norm(attn · Woᵀ) (the branch in h_); else x += attn · Woᵀ.
    const bool sandwich = o.post_attn_norm != model::kNoTensor;
    float* branch = sandwich ? h_ : x_;
    KVS_RETURN_IF_ERROR(Linear(attn_, q_size, o.o, branch, d, t, q_size, d, !sandwich));
    if (o.o_bias != model::kNoTensor) {
      KVS_CUDA_OK(kernels::cuda::AddBias(branch, d, f32(o.o_bias), t, d, s), "o bias");
    }
    if (sandwich) KVS_RETURN_IF_ERROR(AddNormed(o.post_attn_norm));
    if (o.router != model::kNoTensor) {  // the experts add into the residual; the layer ends here
      KVS_CUDA_OK(kernels::cuda::RmsNorm(x_, d, nullptr, f32(o.post_norm), h_, d, t, d, c.rms_norm_eps, s),
                  "expert input norm");
      DeviceMoeWeights mw{f32(o.router), weights_ + o.expert_gate_up, o.expert_gate_up_stride,
                          weights_ + o.expert_down, o.expert_down_stride};
      if (o.router_bias != model::kNoTensor) mw.router_bias = f32(o.router_bias);
      if (o.expert_gate_up_bias != model::kNoTensor) {
        mw.gate_up_bias = f32(o.expert_gate_up_bias);
        mw.gate_up_bias_stride = o.expert_gate_up_bias_stride / sizeof(float);
        mw.down_bias = f32(o.expert_down_bias);
        mw.down_bias_stride = o.expert_down_bias_stride / sizeof(float);
      }
      KVS_RETURN_IF_ERROR(moe_->Forward(mw, *gemm_->blas, h_, t, x_, s));
      continue;
    }
    KVS_RETURN_IF_ERROR(NormLinear(nullptr, o.post_norm, o.gate_up, gate_up_, 2 * inter, t, 2 * inter));
    const bool gelu = c.activation == model::Activation::kGeluTanh;  // Gemma's GeGLU
    if (plan_.dtype == model::DeviceWeightDtype::kBf16) {
      KVS_CUDA_OK(gelu ? kernels::cuda::GeluTanhMulBf16(gate_up_, t, inter, xb_, s)
                       : kernels::cuda::SiluMulBf16(gate_up_, t, inter, xb_, s),
                  "gated activation");
      KVS_RETURN_IF_ERROR(LinearFromBf16(o.down, branch, d, t, inter, d, !sandwich));
    } else {
      KVS_CUDA_OK(gelu ? kernels::cuda::GeluTanhMul(gate_up_, t, inter, act_, s)
                       : kernels::cuda::SiluMul(gate_up_, t, inter, act_, s),
                  "gated activation");
      KVS_RETURN_IF_ERROR(Linear(act_, inter, o.down, branch, d, t, inter, d, !sandwich));
    }
    if (sandwich) KVS_RETURN_IF_ERROR(AddNormed(o.post_ff_norm));
  }
  if (want_mass) {
    KVS_CUDA_OK(cudaMemcpyAsync(observers->attention_mass.data(), mass, mass_floats * sizeof(float),
                                cudaMemcpyDeviceToHost, static_cast<cudaStream_t>(s)),
                "attention mass to the host");
    // The CPU model zeroes the whole span; entries past this step's shape stay zero here too.
    std::fill(observers->attention_mass.begin() + static_cast<int64_t>(mass_floats), observers->attention_mass.end(),
              0.0f);
    KVS_RETURN_IF_ERROR(Synchronize());
  }
  if (want_queries) {
    KVS_CUDA_OK(cudaMemcpyAsync(observers->pre_rope_queries.data(), prerope_,
                                static_cast<size_t>(c.num_layers) * static_cast<size_t>(t) * q_size * sizeof(float),
                                cudaMemcpyDeviceToHost, static_cast<cudaStream_t>(s)),
                "pre-RoPE queries to the host");
    KVS_RETURN_IF_ERROR(Synchronize());
  }
  return absl::OkStatus();
}

absl::Status CudaLlamaModel::LmHead(int begin, int n) {
  const int vocab = config_.vocab_size;
  KVS_RETURN_IF_ERROR(
      NormLinear(d_meta_ + packed_.logits_rows + begin, plan_.final_norm, plan_.lm_head, logits_, vocab, n, vocab));
  if (config_.final_logit_softcap > 0) {  // Gemma 2: before sampling, as the CPU
    KVS_CUDA_OK(kernels::cuda::SoftcapLogits(logits_, vocab, n, vocab, static_cast<float>(config_.final_logit_softcap),
                                             stream_),
                "final logit soft-cap");
  }
  return absl::OkStatus();
}

absl::Status CudaLlamaModel::AddNormed(size_t norm_w) {
  const int d = config_.hidden_size;
  const int64_t t = packed_.num_tokens;
  KVS_CUDA_OK(kernels::cuda::RmsNorm(h_, d, nullptr, reinterpret_cast<const float*>(weights_ + norm_w), h_, d, t, d,
                                     config_.rms_norm_eps, stream_),
              "sandwich norm");
  KVS_CUDA_OK(kernels::cuda::AddRows(x_, d, h_, d, t, d, stream_), "sandwich residual");
  return absl::OkStatus();
}

absl::Status CudaLlamaModel::Forward(const model::ForwardBatch& b, const model::KvCacheView& kv,
                                     std::span<float> logits, const model::ForwardObservers* observers) {
  const size_t vocab = static_cast<size_t>(config_.vocab_size);
  if (logits.size() < b.logits_rows.size() * vocab) {
    return absl::InvalidArgumentError("forward batch: logits buffer too small");
  }
  KVS_RETURN_IF_ERROR(RunLayers(b, kv, observers));
  const int rows = static_cast<int>(b.logits_rows.size());
  for (int begin = 0; begin < rows; begin += options_.max_logits_rows) {
    const int n = std::min(options_.max_logits_rows, rows - begin);
    KVS_RETURN_IF_ERROR(LmHead(begin, n));
    KVS_CUDA_OK(cudaMemcpyAsync(logits.data() + static_cast<size_t>(begin) * vocab, logits_,
                                static_cast<size_t>(n) * vocab * sizeof(float), cudaMemcpyDeviceToHost,
                                static_cast<cudaStream_t>(stream_)),
                "logits to the host");
    KVS_RETURN_IF_ERROR(Synchronize());
  }
  last_logits_rows_ = 0;
  return Synchronize();
}

absl::Status CudaLlamaModel::ForwardDevice(const model::ForwardBatch& b, const model::KvCacheView& kv,
                                           const model::ForwardObservers* observers) {
  const int rows = static_cast<int>(b.logits_rows.size());
  if (rows > options_.max_logits_rows) {
    return absl::InvalidArgumentError(absl::StrCat("forward batch: ", rows, " logits rows exceed max_logits_rows ",
                                                   options_.max_logits_rows));
  }
  KVS_RETURN_IF_ERROR(ForwardLayers(b, kv, observers));
  return rows > 0 ? ComputeLogits(0, rows) : absl::OkStatus();
}

absl::Status CudaLlamaModel::ForwardLayers(const model::ForwardBatch& b,
                                           const model::KvCacheView& kv,
                                           const model::ForwardObservers* observers) {
  last_logits_rows_ = 0;
  return RunLayers(b, kv, observers);
}

absl::Status CudaLlamaModel::ComputeLogits(int begin, int n) {
  last_logits_rows_ = 0;
  if (begin < 0 || n < 1 || n > options_.max_logits_rows || begin + n > packed_.num_logits_rows) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda model: logits rows [", begin, ", ", begin + n, ") outside the step's ",
                     packed_.num_logits_rows, " (at most ", options_.max_logits_rows, " at once)"));
  }
  KVS_RETURN_IF_ERROR(LmHead(begin, n));
  last_logits_rows_ = n;
  return absl::OkStatus();
}

absl::Status CudaLlamaModel::SampleGreedy(int rows, std::span<int32_t> tokens, std::span<float> logprobs,
                                          const model::DeviceMasks* masks) {
  if (rows > last_logits_rows_ || tokens.size() < static_cast<size_t>(rows) ||
      logprobs.size() < static_cast<size_t>(rows)) {
    return absl::InvalidArgumentError("cuda model: greedy sampling over rows the last step did not compute");
  }
  if (rows == 0) return absl::OkStatus();
  auto st = static_cast<cudaStream_t>(stream_);
  const bool masked = masks != nullptr && masks->num_masks > 0;
  if (masked) {
    // Only the constrained rows' masks cross: [rows] indices, then num_masks x mask_words words.
    if (masks->mask_words != mask_words() || static_cast<int>(masks->mask_index.size()) != rows ||
        masks->words.size() != static_cast<size_t>(masks->num_masks) * static_cast<size_t>(mask_words()) ||
        masks->num_masks > rows) {
      return absl::InvalidArgumentError("cuda model: structured-output masks do not match the sampled rows");
    }
    for (int32_t i : masks->mask_index) {
      if (i < -1 || i >= masks->num_masks) {
        return absl::InvalidArgumentError("cuda model: a row names a structured-output mask that does not exist");
      }
    }
    KVS_CUDA_OK(cudaMemcpyAsync(mask_index_, masks->mask_index.data(), static_cast<size_t>(rows) * 4,
                                cudaMemcpyHostToDevice, st),
                "mask indices to the device");
    KVS_CUDA_OK(cudaMemcpyAsync(masks_, masks->words.data(), masks->words.size() * 8, cudaMemcpyHostToDevice, st),
                "structured-output masks to the device");
  }
  KVS_CUDA_OK(kernels::cuda::GreedySampleMasked(logits_, rows, config_.vocab_size, masked ? mask_index_ : nullptr,
                                                masks_, mask_words(), tokens_, logprobs_, stream_),
              "greedy sampling");
  KVS_CUDA_OK(cudaMemcpyAsync(tokens.data(), tokens_, static_cast<size_t>(rows) * 4, cudaMemcpyDeviceToHost, st),
              "sampled tokens to the host");
  KVS_CUDA_OK(cudaMemcpyAsync(logprobs.data(), logprobs_, static_cast<size_t>(rows) * 4, cudaMemcpyDeviceToHost, st),
              "logprobs to the host");
  return Synchronize();
}

absl::Status CudaLlamaModel::CopyLogitsRows(int first, int n, std::span<float> out) {
  const size_t vocab = static_cast<size_t>(config_.vocab_size);
  if (first < 0 || n < 1 || first + n > last_logits_rows_ ||
      out.size() < static_cast<size_t>(n) * vocab) {
    return absl::InvalidArgumentError("cuda model: logits rows the last step did not compute");
  }
  KVS_CUDA_OK(cudaMemcpyAsync(out.data(), logits_ + static_cast<size_t>(first) * vocab,
                              static_cast<size_t>(n) * vocab * sizeof(float),
                              cudaMemcpyDeviceToHost, static_cast<cudaStream_t>(stream_)),
              "logits rows to the host");
  return Synchronize();
}

absl::Status CudaLlamaModel::UseStream(void* stream) {
  KVS_RETURN_IF_ERROR(Synchronize());
  KVS_RETURN_IF_ERROR(gemm_->blas->SetStream(stream));
  stream_ = stream;
  return absl::OkStatus();
}

absl::Status CudaLlamaModel::Synchronize() {
  KVS_CUDA_OK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)), "synchronizing the model stream");
  return absl::OkStatus();
}

}  // namespace kvserve::cuda
