#include "kernels/cuda/fp8_gemm.h"

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <tuple>

#include "absl/strings/str_cat.h"

namespace kvserve::kernels::cuda {
namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;

cublasLtHandle_t AsHandle(void* h) { return static_cast<cublasLtHandle_t>(h); }

absl::Status LtError(cublasStatus_t s, absl::string_view what) {
  return absl::InternalError(absl::StrCat("cuBLASLt FP8 GEMM: ", what, ": ", cublasGetStatusName(s),
                                          ": ", cublasGetStatusString(s)));
}

// Owns the per-call cuBLASLt descriptors (created and destroyed in Linear: a few microseconds,
// small next to the GEMMs this path is for).
struct LtDescriptors {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~LtDescriptors() {
    if (pref != nullptr) cublasLtMatmulPreferenceDestroy(pref);
    if (c != nullptr) cublasLtMatrixLayoutDestroy(c);
    if (b != nullptr) cublasLtMatrixLayoutDestroy(b);
    if (a != nullptr) cublasLtMatrixLayoutDestroy(a);
    if (op != nullptr) cublasLtMatmulDescDestroy(op);
  }
};

template <bool kFp16>
__device__ __forceinline__ float ActAt(const uint16_t* x, int64_t k) {
  if constexpr (kFp16) {
    return __half2float(__ushort_as_half(x[k]));
  } else {
    return __uint_as_float(static_cast<uint32_t>(x[k]) << 16);
  }
}

// max |x| over the rows, as the bits of a non-negative float (ordered like unsigned ints),
// atomically maxed into *amax_bits (zeroed before the launch).
template <bool kFp16>
__global__ void AmaxKernel(const uint16_t* x, int64_t x_stride, int64_t rows, int in,
                           unsigned* amax_bits) {
  const int64_t n = rows * in;
  float m = 0.0f;
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < n;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    m = fmaxf(m, fabsf(ActAt<kFp16>(x, (k / in) * x_stride + k % in)));
  }
  for (int s = 16; s > 0; s >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, s));
  if (threadIdx.x % 32 == 0) atomicMax(amax_bits, __float_as_uint(m));
}

__global__ void FinalizeScaleKernel(float* scale) {
  const float amax = __uint_as_float(*reinterpret_cast<const unsigned*>(scale));
  *scale = amax > 0.0f ? amax / kFp8E4m3Max : 1.0f;
}

template <bool kFp16>
__global__ void QuantizeFp8Kernel(const uint16_t* x, int64_t x_stride, int64_t rows, int in,
                                  const float* scale, uint8_t* x_fp8) {
  const int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (k >= rows * in) return;
  const float v = __fdiv_rn(ActAt<kFp16>(x, (k / in) * x_stride + k % in), *scale);
  x_fp8[k] = static_cast<uint8_t>(__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3));
}

__global__ void DequantizeFp8ScaledKernel(const uint8_t* w, const float* scales, int out, int in,
                                          int block_out, int block_in, uint16_t* dst) {
  const int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (k >= static_cast<int64_t>(out) * in) return;
  const int64_t o = k / in;
  const int i = static_cast<int>(k % in);
  const int blocks_per_row = (in + block_in - 1) / block_in;
  __nv_fp8_e4m3 q;
  q.__x = w[k];
  const float v = static_cast<float>(q) * scales[(o / block_out) * blocks_per_row + i / block_in];
  dst[k] = __bfloat16_as_ushort(__float2bfloat16_rn(v));
}

unsigned BlocksFor(int64_t n) { return static_cast<unsigned>((n + 255) / 256); }

}  // namespace

absl::StatusOr<std::unique_ptr<Fp8Gemm>> Fp8Gemm::Create(void* stream) {
  int device = 0, major = 0, minor = 0;
  cudaError_t e = cudaGetDevice(&device);
  if (e == cudaSuccess)
    e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  if (e == cudaSuccess)
    e = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return absl::FailedPreconditionError(
        absl::StrCat("FP8 W8A8: no usable CUDA device: ", cudaGetErrorString(e)));
  }
  if (major * 10 + minor < 89) {
    cudaDeviceProp prop{};
    cudaGetDeviceProperties(&prop, device);
    return absl::FailedPreconditionError(absl::StrCat(
        "FP8 W8A8 needs FP8 tensor cores (compute capability 8.9 or newer: Ada, Hopper); device ",
        device, " (", prop.name, ") is sm_", major, minor,
        ": serve the checkpoint dequantized instead"));
  }
  cublasLtHandle_t h = nullptr;
  const cublasStatus_t s = cublasLtCreate(&h);
  if (s != CUBLAS_STATUS_SUCCESS) return LtError(s, "cublasLtCreate");
  void* ws = nullptr;
  if (cudaMalloc(&ws, kWorkspaceBytes) != cudaSuccess) {
    cudaGetLastError();
    cublasLtDestroy(h);
    return absl::ResourceExhaustedError("cuBLASLt FP8 GEMM: cannot allocate its 32 MiB workspace");
  }
  return std::unique_ptr<Fp8Gemm>(new Fp8Gemm(h, ws, stream));
}

Fp8Gemm::~Fp8Gemm() {
  cudaFree(workspace_);
  cublasLtDestroy(AsHandle(handle_));
}

absl::Status Fp8Gemm::Linear(const uint8_t* x_fp8, int64_t x_stride, const float* x_scale,
                             const uint8_t* w_fp8, const float* w_scale, float* y, int64_t y_stride,
                             int64_t rows, int in, int out, bool accumulate) {
  if (rows == 0) return absl::OkStatus();
  if (rows < 0 || rows > (int64_t{1} << 31) - 1 || in < 16 || out < 16 || in % 16 != 0 ||
      out % 16 != 0 || x_stride < in || x_stride % 16 != 0 || y_stride < out ||
      y_stride % 16 != 0 || x_scale == nullptr || w_scale == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "FP8 linear: bad shape rows=", rows, " in=", in, " out=", out, " x_stride=", x_stride,
        " y_stride=", y_stride, " (in, out and strides must be multiples of 16; scales set)"));
  }
  LtDescriptors d;
  cublasStatus_t s = cublasLtMatmulDescCreate(&d.op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  if (s != CUBLAS_STATUS_SUCCESS) return LtError(s, "cublasLtMatmulDescCreate");
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  // A is W, B is x: A's scale is the weight's.
  const void* a_scale = w_scale;
  const void* b_scale = x_scale;
  for (auto [attr, ptr, size] :
       {std::tuple{CUBLASLT_MATMUL_DESC_TRANSA, static_cast<const void*>(&ta), sizeof(ta)},
        std::tuple{CUBLASLT_MATMUL_DESC_TRANSB, static_cast<const void*>(&tb), sizeof(tb)},
        std::tuple{CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, static_cast<const void*>(&a_scale),
                   sizeof(a_scale)},
        std::tuple{CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, static_cast<const void*>(&b_scale),
                   sizeof(b_scale)}}) {
    s = cublasLtMatmulDescSetAttribute(d.op, attr, ptr, size);
    if (s != CUBLAS_STATUS_SUCCESS) return LtError(s, "cublasLtMatmulDescSetAttribute");
  }
  const auto n = static_cast<uint64_t>(rows);
  s = cublasLtMatrixLayoutCreate(&d.a, CUDA_R_8F_E4M3, static_cast<uint64_t>(in),
                                 static_cast<uint64_t>(out), in);
  if (s == CUBLAS_STATUS_SUCCESS) {
    s = cublasLtMatrixLayoutCreate(&d.b, CUDA_R_8F_E4M3, static_cast<uint64_t>(in), n, x_stride);
  }
  if (s == CUBLAS_STATUS_SUCCESS) {
    s = cublasLtMatrixLayoutCreate(&d.c, CUDA_R_32F, static_cast<uint64_t>(out), n, y_stride);
  }
  if (s != CUBLAS_STATUS_SUCCESS) return LtError(s, "cublasLtMatrixLayoutCreate");
  s = cublasLtMatmulPreferenceCreate(&d.pref);
  const uint64_t ws_bytes = kWorkspaceBytes;
  if (s == CUBLAS_STATUS_SUCCESS) {
    s = cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                             &ws_bytes, sizeof(ws_bytes));
  }
  if (s != CUBLAS_STATUS_SUCCESS) return LtError(s, "matmul preference");
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  s = cublasLtMatmulAlgoGetHeuristic(AsHandle(handle_), d.op, d.a, d.b, d.c, d.c, d.pref, 1,
                                     &result, &found);
  if (s != CUBLAS_STATUS_SUCCESS || found == 0) {
    return absl::UnimplementedError(absl::StrCat("cuBLASLt has no FP8 e4m3 GEMM for rows=", rows,
                                                 " in=", in, " out=", out, " (",
                                                 cublasGetStatusName(s), ")"));
  }
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  s = cublasLtMatmul(AsHandle(handle_), d.op, &alpha, w_fp8, d.a, x_fp8, d.b, &beta, y, d.c, y, d.c,
                     &result.algo, workspace_, kWorkspaceBytes, static_cast<cudaStream_t>(stream_));
  if (s != CUBLAS_STATUS_SUCCESS) return LtError(s, "cublasLtMatmul");
  return absl::OkStatus();
}

int QuantizeFp8PerTensor(GemmDtype act, const void* x, int64_t x_stride, int64_t rows, int in,
                         uint8_t* x_fp8, float* scale, void* stream) {
  if ((act != GemmDtype::kBf16 && act != GemmDtype::kFp16) || rows < 1 || in < 1 || x_stride < in ||
      scale == nullptr || x_fp8 == nullptr) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  auto st = static_cast<cudaStream_t>(stream);
  const auto* xs = static_cast<const uint16_t*>(x);
  const int64_t n = rows * in;
  cudaError_t e = cudaMemsetAsync(scale, 0, sizeof(float), st);
  if (e != cudaSuccess) return static_cast<int>(e);
  const unsigned amax_blocks = BlocksFor(n) < 1024u ? BlocksFor(n) : 1024u;
  auto* bits = reinterpret_cast<unsigned*>(scale);
  if (act == GemmDtype::kFp16) {
    AmaxKernel<true><<<amax_blocks, 256, 0, st>>>(xs, x_stride, rows, in, bits);
  } else {
    AmaxKernel<false><<<amax_blocks, 256, 0, st>>>(xs, x_stride, rows, in, bits);
  }
  FinalizeScaleKernel<<<1, 1, 0, st>>>(scale);
  if (act == GemmDtype::kFp16) {
    QuantizeFp8Kernel<true><<<BlocksFor(n), 256, 0, st>>>(xs, x_stride, rows, in, scale, x_fp8);
  } else {
    QuantizeFp8Kernel<false><<<BlocksFor(n), 256, 0, st>>>(xs, x_stride, rows, in, scale, x_fp8);
  }
  return static_cast<int>(cudaGetLastError());
}

int DequantizeFp8Scaled(const uint8_t* w, const float* scales, int out, int in, int block_out,
                        int block_in, uint16_t* dst, void* stream) {
  if (w == nullptr || scales == nullptr || dst == nullptr || out < 1 || in < 1 || block_out < 1 ||
      block_in < 1) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  const int64_t n = static_cast<int64_t>(out) * in;
  DequantizeFp8ScaledKernel<<<BlocksFor(n), 256, 0, static_cast<cudaStream_t>(stream)>>>(
      w, scales, out, in, block_out, block_in, dst);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace kvserve::kernels::cuda
