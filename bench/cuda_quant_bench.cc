// Quantized-weight CUDA kernel figures (prints; no targets asserted), on the linear shapes of
// Llama-3-8B (q/o 4096x4096, gate/up 14336x4096, down 4096x14336), random weights:
//   decode (rows 1..8)  W4A16 and W8A16 GEMV (group 128, zero points: AWQ-like) against the
//                       bf16 GEMV on the same shape: µs, GB/s of bytes read (codes + scales +
//                       zeros + activations), % of the device's copy bandwidth
//   batched (16..1024)  dequantize-then-cuBLAS against cuBLAS on bf16 weights: TFLOP/s
//   FP8 W8A8            cuBLASLt e4m3 GEMM with per-tensor scales (sm_89+), with and without the
//                       dynamic activation quantization: TFLOP/s
// Medians of 20 timed runs after 3 warm-ups, CUDA events around each launch.
//
// Usage: cuda_quant_bench     Needs a CUDA device.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <random>
#include <vector>

#include "cuda_bench_util.h"
#include "kernels/cuda/fp8_gemm.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/gemv_bf16.h"
#include "kernels/cuda/quant_gemv.h"
#include "kernels/cuda/quant_linear.h"

namespace {

using kvserve::bench::DeviceCopyGbps;
using kvserve::bench::Median;
namespace kc = kvserve::kernels::cuda;

struct Shape {
  const char* name;
  int out, in;
};
constexpr Shape kShapes[] = {{"q/o 4096x4096", 4096, 4096},
                             {"gate/up 14336x4096", 14336, 4096},
                             {"down 4096x14336", 4096, 14336}};

void* DeviceRandom(size_t bytes, std::mt19937& rng, uint8_t mask = 0xff, uint8_t set = 0) {
  std::vector<uint8_t> h(bytes);
  for (auto& b : h) b = static_cast<uint8_t>((rng() & mask) | set);
  void* d = nullptr;
  if (cudaMalloc(&d, bytes) != cudaSuccess) return nullptr;
  cudaMemcpy(d, h.data(), bytes, cudaMemcpyHostToDevice);
  return d;
}

// Median ms of `fn` (which launches on the default stream).
double TimeMs(const std::function<void()>& fn) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  std::vector<double> ms;
  for (int i = 0; i < 23; ++i) {
    cudaEventRecord(a);
    fn();
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float t = 0.0f;
    cudaEventElapsedTime(&t, a, b);
    if (i >= 3) ms.push_back(t);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return Median(ms);
}

// The W8 and W4 versions of one shape (group 128, zero points), random codes, fp16 scales near
// 2^-7.
struct QuantPair {
  QuantPair(const Shape& s, std::mt19937& rng) {
    for (int b = 0; b < 2; ++b) {
      const kc::GroupQuantShape qs{b == 0 ? 8 : 4, s.out, s.in, 128, true};
      bufs[b][0] = DeviceRandom(static_cast<size_t>(s.out) * qs.code_row_bytes(), rng);
      bufs[b][1] =
          DeviceRandom(static_cast<size_t>(s.out) * qs.groups_per_row() * 2, rng, 0x03, 0x20);
      bufs[b][2] =
          DeviceRandom(static_cast<size_t>(s.out) * qs.groups_per_row(), rng, b == 0 ? 0xff : 0x0f);
      w[b] = {qs, static_cast<uint8_t*>(bufs[b][0]), static_cast<uint16_t*>(bufs[b][1]),
              static_cast<uint8_t*>(bufs[b][2])};
    }
  }
  ~QuantPair() {
    for (auto& b : bufs) {
      for (void* p : b) cudaFree(p);
    }
  }
  QuantPair(const QuantPair&) = delete;
  QuantPair& operator=(const QuantPair&) = delete;
  kc::QuantWeightView w[2];
  void* bufs[2][3] = {};
};

}  // namespace

int main() {
  int dev = 0;
  cudaDeviceProp prop{};
  if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&prop, dev) != cudaSuccess) {
    std::fprintf(stderr, "cuda_quant_bench: no usable CUDA device\n");
    return 1;
  }
  auto gemm = kc::CublasGemm::Create(nullptr);
  if (!gemm.ok()) {
    std::fprintf(stderr, "cuda_quant_bench: %s\n", gemm.status().ToString().c_str());
    return 1;
  }
  const double copy = DeviceCopyGbps(size_t{1} << 30);
  std::printf("## Quantized-weight kernels (%s, sm_%d%d)\n\n", prop.name, prop.major, prop.minor);
  std::printf("Device-to-device copy, 1 GiB, read + write: %.0f GB/s (the reference below).\n\n",
              copy);
  std::mt19937 rng(7);
  // Activations: bf16 in [1, 2), up to 4096 rows of the longest input.
  constexpr size_t kMaxRows = 4096;
  void* x = nullptr;
  {
    std::vector<uint16_t> h(kMaxRows * 14336);
    for (auto& v : h) v = static_cast<uint16_t>(0x3f80 | (rng() & 0x7f));
    if (cudaMalloc(&x, h.size() * 2) == cudaSuccess)
      cudaMemcpy(x, h.data(), h.size() * 2, cudaMemcpyHostToDevice);
  }
  float* y = nullptr;
  void* workspace = nullptr;
  cudaMalloc(&y, kMaxRows * 14336 * 4);
  cudaMalloc(&workspace, size_t{14336} * 4096 * 2);
  void* bf16_w = DeviceRandom(size_t{14336} * 4096 * 2, rng, 0x7f, 0x3c);  // bf16 values near 0.01
  if (x == nullptr || y == nullptr || workspace == nullptr || bf16_w == nullptr) {
    std::fprintf(stderr, "cuda_quant_bench: allocation failed\n");
    return 1;
  }

  std::printf(
      "### Decode GEMV (bf16 activations, fp32 out; W8/W4: group 128 with zero points)\n\n");
  std::printf(
      "| shape | rows | bf16 µs | bf16 GB/s | W8A16 µs | W8A16 GB/s | W4A16 µs | W4A16 GB/s | "
      "W4A16 %% of copy | W4A16 speed-up over bf16 "
      "|\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const Shape& s : kShapes) {
    QuantPair q(s, rng);
    for (const kc::QuantWeightView& w : q.w) {
      if (const int err =
              kc::QuantGemv(kc::GemmDtype::kBf16, x, s.in, w, y, s.out, 1, false, nullptr);
          err != 0) {
        std::fprintf(stderr, "cuda_quant_bench: W%dA16 GEMV failed: %s\n", w.shape.bits,
                     cudaGetErrorString(static_cast<cudaError_t>(err)));
        return 1;
      }
    }
    for (int rows : {1, 2, 4, 8}) {
      const double xbytes = 2.0 * rows * s.in;
      const double t16 = TimeMs([&] {
        kc::GemvBf16(static_cast<const uint16_t*>(x), s.in, static_cast<const uint16_t*>(bf16_w), y,
                     s.out, rows, s.in, s.out, false, nullptr);
      });
      double t[2], gbps[2];
      for (int b = 0; b < 2; ++b) {
        t[b] = TimeMs([&] {
          kc::QuantGemv(kc::GemmDtype::kBf16, x, s.in, q.w[b], y, s.out, rows, false, nullptr);
        });
        const kc::GroupQuantShape& qs = q.w[b].shape;
        const double bytes =
            static_cast<double>(s.out) * (qs.code_row_bytes() + 3.0 * qs.groups_per_row()) + xbytes;
        gbps[b] = bytes / (t[b] * 1e-3) / 1e9;
      }
      const double g16 = (2.0 * s.out * s.in + xbytes) / (t16 * 1e-3) / 1e9;
      std::printf("| %s | %d | %.1f | %.0f | %.1f | %.0f | %.1f | %.0f | %.1f | %.2fx |\n", s.name,
                  rows, t16 * 1e3, g16, t[0] * 1e3, gbps[0], t[1] * 1e3, gbps[1],
                  copy > 0 ? 100.0 * gbps[1] / copy : 0.0, t16 / t[1]);
    }
  }

  std::printf("\n### Batched: dequantize-then-cuBLAS against cuBLAS on bf16 weights (TFLOP/s)\n\n");
  std::printf(
      "| shape | rows | bf16 µs | bf16 TFLOP/s | W8A16 µs | W8A16 TFLOP/s | W4A16 µs | W4A16 "
      "TFLOP/s |\n"
      "|---|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const Shape& s : kShapes) {
    QuantPair q(s, rng);
    if (const absl::Status st =
            kc::QuantLinear(**gemm, kc::GemmDtype::kBf16, x, s.in, q.w[1], y, s.out, 16, false,
                            workspace, kc::QuantLinearWorkspaceBytes(q.w[1].shape));
        !st.ok()) {
      std::fprintf(stderr, "cuda_quant_bench: batched W4A16 failed: %s\n", st.ToString().c_str());
      return 1;
    }
    for (int rows : {16, 64, 256, 1024}) {
      const double flops = 2.0 * rows * s.out * s.in;
      const double t16 = TimeMs([&] {
        (void)(*gemm)->Linear(kc::GemmDtype::kBf16, x, s.in, bf16_w, y, s.out, rows, s.in, s.out,
                              false);
      });
      double t[2];
      for (int b = 0; b < 2; ++b) {
        t[b] = TimeMs([&] {
          (void)kc::QuantLinear(**gemm, kc::GemmDtype::kBf16, x, s.in, q.w[b], y, s.out, rows,
                                false, workspace, kc::QuantLinearWorkspaceBytes(q.w[b].shape));
        });
      }
      std::printf("| %s | %d | %.1f | %.0f | %.1f | %.0f | %.1f | %.0f |\n", s.name, rows,
                  t16 * 1e3, flops / (t16 * 1e-3) / 1e12, t[0] * 1e3, flops / (t[0] * 1e-3) / 1e12,
                  t[1] * 1e3, flops / (t[1] * 1e-3) / 1e12);
    }
  }

  std::printf("\n### FP8 e4m3 W8A8 (cuBLASLt, per-tensor scales, fp32 out)\n\n");
  auto fp8 = kc::Fp8Gemm::Create(nullptr);
  if (!fp8.ok()) {
    std::printf("not run: %s\n", fp8.status().ToString().c_str());
  } else {
    void* xq = DeviceRandom(size_t{4096} * 14336, rng, 0x77, 0);  // no NaN codes
    void* wq = DeviceRandom(size_t{14336} * 4096, rng, 0x77, 0);
    float* scales = nullptr;
    cudaMalloc(&scales, 2 * sizeof(float));
    const float one[2] = {1.0f, 1.0f};
    cudaMemcpy(scales, one, sizeof(one), cudaMemcpyHostToDevice);
    float* y8 = nullptr;
    cudaMalloc(&y8, size_t{4096} * 14336 * 4);
    std::printf(
        "| shape | rows | GEMM µs | TFLOP/s | with activation quantization µs | TFLOP/s |\n"
        "|---|---:|---:|---:|---:|---:|\n");
    if (const absl::Status st = (*fp8)->Linear(static_cast<const uint8_t*>(xq), 4096, scales,
                                               static_cast<const uint8_t*>(wq), scales + 1, y8,
                                               4096, 16, 4096, 4096, false);
        !st.ok()) {
      std::printf("FP8 GEMM failed: %s\n", st.ToString().c_str());
    }
    for (const Shape& s : kShapes) {
      for (int rows : {16, 128, 1024, 4096}) {
        const double flops = 2.0 * rows * s.out * s.in;
        auto gemm8 = [&] {
          (void)(*fp8)->Linear(static_cast<const uint8_t*>(xq), s.in, scales,
                               static_cast<const uint8_t*>(wq), scales + 1, y8, s.out, rows, s.in,
                               s.out, false);
        };
        const double tg = TimeMs(gemm8);
        const double tq = TimeMs([&] {
          kc::QuantizeFp8PerTensor(kc::GemmDtype::kBf16, x, s.in, rows, s.in,
                                   static_cast<uint8_t*>(xq), scales, nullptr);
          gemm8();
        });
        std::printf("| %s | %d | %.1f | %.0f | %.1f | %.0f |\n", s.name, rows, tg * 1e3,
                    flops / (tg * 1e-3) / 1e12, tq * 1e3, flops / (tq * 1e-3) / 1e12);
      }
    }
    cudaFree(xq);
    cudaFree(wq);
    cudaFree(scales);
    cudaFree(y8);
  }
  cudaFree(x);
  cudaFree(y);
  cudaFree(workspace);
  cudaFree(bf16_w);
  return 0;
}
