#include "cuda/cuda_moe_layer.h"

#include <cuda_runtime.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "kernels/cuda/llama_kernels.h"
#include "kernels/cuda/moe_kernels.h"
#include "model/moe_layer.h"

namespace kvserve::cuda {
namespace {

absl::Status Cuda(int err, const char* what) {
  if (err == 0) return absl::OkStatus();
  const auto e = static_cast<cudaError_t>(err);
  cudaGetLastError();
  return absl::Status(e == cudaErrorMemoryAllocation ? absl::StatusCode::kResourceExhausted
                                                     : absl::StatusCode::kInternal,
                      absl::StrCat("cuda moe layer: ", what, ": ", cudaGetErrorName(e), ": ",
                                   cudaGetErrorString(e)));
}

#define KVS_MOE_CUDA(expr, what) KVS_RETURN_IF_ERROR(Cuda(static_cast<int>(expr), what))

size_t Align(size_t n) { return (n + 255) / 256 * 256; }

}  // namespace

CudaMoeLayer::CudaMoeLayer(const model::ModelConfig& config, int max_tokens, bool bf16)
    : moe_(config.moe), hidden_(config.hidden_size), max_tokens_(max_tokens), bf16_(bf16) {}

CudaMoeLayer::~CudaMoeLayer() {
  cudaFree(device_);
  if (h_logits_ != nullptr) cudaFreeHost(h_logits_);
  if (h_group_ != nullptr) cudaFreeHost(h_group_);
}

absl::StatusOr<std::unique_ptr<CudaMoeLayer>> CudaMoeLayer::Create(const model::ModelConfig& config,
                                                                   int max_tokens, bool bf16) {
  const model::MoeConfig& m = config.moe;
  if (m.num_experts < 1 || m.top_k < 1 || m.top_k > m.num_experts || m.intermediate_size < 1 ||
      max_tokens < 1) {
    return absl::InvalidArgumentError("cuda moe layer: bad expert shape");
  }
  std::unique_ptr<CudaMoeLayer> l(new CudaMoeLayer(config, max_tokens, bf16));
  const auto t = static_cast<size_t>(max_tokens), e = static_cast<size_t>(m.num_experts);
  const size_t slots = t * static_cast<size_t>(m.top_k);
  const auto d = static_cast<size_t>(config.hidden_size),
             ie = static_cast<size_t>(m.intermediate_size);
  size_t at = 0;
  auto take = [&at](size_t bytes) {
    const size_t off = at;
    at = Align(at + bytes);
    return off;
  };
  const size_t o_logits = take(t * e * 4), o_xg = take(slots * d * 4), o_xgb = take(slots * d * 2),
               o_gu = take(slots * 2 * ie * 4), o_act = take(slots * ie * 4),
               o_y = take(slots * d * 4), o_group = take(slots * 3 * 4);
  KVS_MOE_CUDA(cudaMalloc(&l->device_, at), "allocating expert scratch");
  auto* base = static_cast<std::byte*>(l->device_);
  l->logits_ = reinterpret_cast<float*>(base + o_logits);
  l->xg_ = reinterpret_cast<float*>(base + o_xg);
  l->xgb_ = reinterpret_cast<uint16_t*>(base + o_xgb);
  l->gu_ = reinterpret_cast<float*>(base + o_gu);
  l->act_ = base + o_act;
  l->y_ = reinterpret_cast<float*>(base + o_y);
  l->d_row_token_ = reinterpret_cast<int32_t*>(base + o_group);
  l->d_slot_row_ = l->d_row_token_ + slots;
  l->d_weights_ = reinterpret_cast<float*>(l->d_slot_row_ + slots);
  KVS_MOE_CUDA(cudaMallocHost(reinterpret_cast<void**>(&l->h_logits_), t * e * 4),
               "allocating pinned logits");
  KVS_MOE_CUDA(cudaMallocHost(&l->h_group_, slots * 3 * 4), "allocating the pinned grouping");
  l->chosen_.resize(slots);
  l->offsets_.resize(e + 1);
  l->fill_.resize(e);
  return l;
}

absl::Status CudaMoeLayer::Forward(const DeviceMoeWeights& w, kernels::cuda::CublasGemm& blas,
                                   const float* h, int64_t rows, float* x, void* stream) {
  KVS_CHECK(rows >= 0 && rows <= max_tokens_, "CudaMoeLayer: more rows than max_tokens");
  if (rows == 0) return absl::OkStatus();
  const int d = hidden_, n = moe_.num_experts, k = moe_.top_k, ie = moe_.intermediate_size;
  const int64_t slots = rows * k;
  auto s = static_cast<cudaStream_t>(stream);
  using kernels::cuda::GemmDtype;

  // Router on the device, routing and grouping on the host (the CPU's code).
  KVS_RETURN_IF_ERROR(blas.Linear(GemmDtype::kFp32, h, d, w.router, logits_, n, rows, d, n, false));
  if (w.router_bias != nullptr) {
    KVS_MOE_CUDA(kernels::cuda::AddBias(logits_, n, w.router_bias, rows, n, stream), "router bias");
  }
  KVS_MOE_CUDA(cudaMemcpyAsync(h_logits_, logits_, static_cast<size_t>(rows) * n * 4,
                               cudaMemcpyDeviceToHost, s),
               "router logits to the host");
  KVS_MOE_CUDA(cudaStreamSynchronize(s), "waiting for the router logits");
  auto* row_token = static_cast<int32_t*>(h_group_);
  int32_t* slot_row = row_token + slots;
  auto* weights = reinterpret_cast<float*>(slot_row + slots);
  model::RouteTokens(moe_, h_logits_, rows, chosen_.data(), weights);
  model::GroupByExpert(chosen_.data(), rows, k, n, offsets_.data(), fill_.data(), slot_row,
                       row_token);
  // (The mirror is rewritten only after the next layer's synchronisation: these copies are done.)
  KVS_MOE_CUDA(cudaMemcpyAsync(d_row_token_, row_token, static_cast<size_t>(slots) * 4,
                               cudaMemcpyHostToDevice, s),
               "uploading the grouping");
  KVS_MOE_CUDA(cudaMemcpyAsync(d_slot_row_, slot_row, static_cast<size_t>(slots) * 4,
                               cudaMemcpyHostToDevice, s),
               "uploading the grouping");
  KVS_MOE_CUDA(cudaMemcpyAsync(d_weights_, weights, static_cast<size_t>(slots) * 4,
                               cudaMemcpyHostToDevice, s),
               "uploading the routing weights");

  KVS_MOE_CUDA(kernels::cuda::GatherRows(h, d, 4, d_row_token_, slots, d, xg_, stream),
               "gathering expert rows");
  if (bf16_) {
    KVS_MOE_CUDA(kernels::cuda::ToBf16(xg_, d, slots, d, xgb_, stream), "bf16 expert rows");
  }
  const GemmDtype dt = bf16_ ? GemmDtype::kBf16 : GemmDtype::kFp32;
  const size_t in_elem = bf16_ ? 2 : 4;
  const auto* xin = bf16_ ? static_cast<const std::byte*>(static_cast<const void*>(xgb_))
                          : static_cast<const std::byte*>(static_cast<const void*>(xg_));
  for (int e = 0; e < n; ++e) {
    const int64_t begin = offsets_[static_cast<size_t>(e)],
                  count = offsets_[static_cast<size_t>(e) + 1] - begin;
    if (count == 0) continue;
    KVS_RETURN_IF_ERROR(blas.Linear(dt, xin + static_cast<size_t>(begin) * d * in_elem, d,
                                    w.gate_up + static_cast<size_t>(e) * w.gate_up_stride,
                                    gu_ + begin * 2 * ie, 2 * ie, count, d, 2 * ie, false));
    if (w.gate_up_bias != nullptr) {
      KVS_MOE_CUDA(
          kernels::cuda::AddBias(gu_ + begin * 2 * ie, 2 * ie,
                                 w.gate_up_bias + static_cast<size_t>(e) * w.gate_up_bias_stride,
                                 count, 2 * ie, stream),
          "expert gate_up bias");
    }
  }
  const bool clamped = moe_.activation == model::ExpertActivation::kClampedSwiglu;
  const auto limit = static_cast<float>(moe_.swiglu_limit),
             alpha = static_cast<float>(moe_.swiglu_alpha);
  if (bf16_) {
    auto* out = static_cast<uint16_t*>(act_);
    KVS_MOE_CUDA(clamped
                     ? kernels::cuda::ClampedSwigluBf16(gu_, slots, ie, limit, alpha, out, stream)
                     : kernels::cuda::SiluMulBf16(gu_, slots, ie, out, stream),
                 "expert activation");
  } else {
    auto* out = static_cast<float*>(act_);
    KVS_MOE_CUDA(clamped ? kernels::cuda::ClampedSwiglu(gu_, slots, ie, limit, alpha, out, stream)
                         : kernels::cuda::SiluMul(gu_, slots, ie, out, stream),
                 "expert activation");
  }
  const auto* act = static_cast<const std::byte*>(act_);
  for (int e = 0; e < n; ++e) {
    const int64_t begin = offsets_[static_cast<size_t>(e)],
                  count = offsets_[static_cast<size_t>(e) + 1] - begin;
    if (count == 0) continue;
    KVS_RETURN_IF_ERROR(blas.Linear(dt, act + static_cast<size_t>(begin) * ie * in_elem, ie,
                                    w.down + static_cast<size_t>(e) * w.down_stride, y_ + begin * d,
                                    d, count, ie, d, false));
    if (w.down_bias != nullptr) {
      KVS_MOE_CUDA(kernels::cuda::AddBias(y_ + begin * d, d,
                                          w.down_bias + static_cast<size_t>(e) * w.down_bias_stride,
                                          count, d, stream),
                   "expert down bias");
    }
  }
  KVS_MOE_CUDA(kernels::cuda::MoeCombine(y_, d, d_slot_row_, d_weights_, rows, k, x, d, stream),
               "combining experts");
  return absl::OkStatus();
}

}  // namespace kvserve::cuda
