// The mixture-of-experts feed-forward of one layer on a CUDA device (Mixtral, Qwen3-MoE, gpt-oss),
// the twin of model/moe_layer.h:
//
//   device   z = h · routerᵀ (fp32 GEMM, router kept fp32)          [T][E]
//   host     RouteTokens + GroupByExpert on z (model/moe_layer.h):   the CPU's code, so the
//            experts chosen, their order and the grouping are the CPU's for the same logits
//   device   xg = h[row_token] (GatherRows), bf16 codes for a bf16 model
//            per chosen expert e: gu[rows of e] = xg[rows of e] · gate_upₑᵀ (one cuBLAS GEMM)
//            act = SiluMul(gu), or gpt-oss's ClampedSwiglu, over all T·k rows
//            per chosen expert e: y[rows of e] = act[rows of e] · downₑᵀ
//            x[t] += Σ_j weight[t][j] · y[slot_row[t k + j]]       (MoeCombine, routing order)
//
// The router logits go to the host and the grouping comes back each layer (one stream
// synchronisation per MoE layer): routing stays exactly the CPU's, which batch invariance and
// the parity tests rely on; a device top-k is the optimisation to come. gpt-oss's router and
// expert biases are added after their GEMMs (as the CPU's Project does); its MXFP4 experts
// arrive unpacked to bf16 by the loader. Buffers are sized at Create for max_tokens rows;
// Forward never allocates.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/cuda/gemm.h"
#include "model/model_config.h"

namespace kvserve::cuda {

// Device pointers of one layer's experts (model/device_weight_layout.h).
struct DeviceMoeWeights {
  const float* router = nullptr;       // [E][D] fp32
  const std::byte* gate_up = nullptr;  // expert e at gate_up + e * gate_up_stride: [2 Ie][D]
  size_t gate_up_stride = 0;
  const std::byte* down = nullptr;  // expert e at down + e * down_stride: [D][Ie]
  size_t down_stride = 0;
  // gpt-oss (fp32; null when the model has none): the [E] router bias, and per expert e the
  // [2 Ie] gate | up bias at gate_up_bias + e * gate_up_bias_stride and the [D] down bias at
  // down_bias + e * down_bias_stride (strides in floats).
  const float* router_bias = nullptr;
  const float* gate_up_bias = nullptr;
  size_t gate_up_bias_stride = 0;
  const float* down_bias = nullptr;
  size_t down_bias_stride = 0;
};

class CudaMoeLayer {
 public:
  static absl::StatusOr<std::unique_ptr<CudaMoeLayer>> Create(const model::ModelConfig& config,
                                                              int max_tokens, bool bf16);
  ~CudaMoeLayer();
  CudaMoeLayer(const CudaMoeLayer&) = delete;
  CudaMoeLayer& operator=(const CudaMoeLayer&) = delete;

  // x[r][0, D) += the experts' mixture of h[r] for r < rows (rows <= max_tokens); h: the
  // feed-forward input (normed, fp32, [rows][D] dense, device). Runs on `stream` and waits for
  // it once (the routing round trip).
  absl::Status Forward(const DeviceMoeWeights& w, kernels::cuda::CublasGemm& blas, const float* h,
                       int64_t rows, float* x, void* stream);

 private:
  CudaMoeLayer(const model::ModelConfig& config, int max_tokens, bool bf16);

  model::MoeConfig moe_;
  int hidden_ = 0;
  int max_tokens_ = 0;
  bool bf16_ = false;
  // Device: one allocation holding logits [T][E], xg [T k][D] fp32, xgb [T k][D] bf16,
  // gu [T k][2 Ie], act [T k][Ie] fp32 (or bf16 codes), y [T k][D], and the uploaded
  // grouping: row_token, slot_row [T k] int32 and weights [T k] fp32.
  void* device_ = nullptr;
  float* logits_ = nullptr;
  float* xg_ = nullptr;
  uint16_t* xgb_ = nullptr;
  float* gu_ = nullptr;
  void* act_ = nullptr;
  float* y_ = nullptr;
  int32_t* d_row_token_ = nullptr;
  int32_t* d_slot_row_ = nullptr;
  float* d_weights_ = nullptr;
  // Pinned host mirrors: logits [T][E], then row_token | slot_row | weights (one upload).
  float* h_logits_ = nullptr;
  void* h_group_ = nullptr;
  // Host scratch of the routing and grouping.
  std::vector<int32_t> chosen_, offsets_, fill_;
};

}  // namespace kvserve::cuda
