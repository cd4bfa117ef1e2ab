// Times the two dense-linear paths of kernels/cpu on the model's GEMM shapes, alternating them
// call by call so machine noise hits both alike:
//   blas:   kernels::cpu::Linear        (OpenBLAS sgemm/sgemv on row-major weights, per chunk)
//   packed: kernels::cpu::PackedLinear  (weights packed once, own AVX-512 / portable kernels)
//   bf16:   kernels::cpu::PackedLinearBf16 (the same on bf16 weights: half the bytes)
// and a register-only FMA loop for the core's peak (the "fraction of peak" column).
// Prints GFLOP/s per second of process CPU time and per wall second (medians).
//
//   build/bin/linear_bench [--threads N] [--repeats R]
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "bench/cpu_clock.h"
#include "kernels/cpu/compute_pool.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/packed_linear.h"

namespace {

using kvserve::kernels::cpu::Linear;
using kvserve::kernels::cpu::PackedLinear;

double CpuSeconds() { return kvserve::bench::ProcessCpuSeconds(); }
double WallSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Timing {
  double cpu = 0, wall = 0;
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

#if defined(__x86_64__)
// 24 independent FMA chains on 16 lanes: the core's fp32 FMA throughput.
__attribute__((target("avx512f,fma"))) double PeakGflopsAvx512(double seconds) {
  __m512 acc[24];
  for (int i = 0; i < 24; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i) * 1e-3f);
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  int64_t iters = 0;
  const double c0 = CpuSeconds();
  double c1 = c0;
  while (c1 - c0 < seconds) {
    for (int rep = 0; rep < 100000; ++rep) {
#pragma GCC unroll 24
      for (int i = 0; i < 24; ++i) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
    }
    iters += 100000;
    c1 = CpuSeconds();
  }
  float sink = 0;
  for (int i = 0; i < 24; ++i) {
    float lanes[16];
    _mm512_storeu_ps(lanes, acc[i]);
    sink += lanes[0] + lanes[15];
  }
  if (sink == 12345.0f) std::puts("");
  return static_cast<double>(iters) * 24 * 16 * 2 / (c1 - c0) * 1e-9;
}
#endif

}  // namespace

int main(int argc, char** argv) {
  int threads = 1, repeats = 7;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--threads") == 0) threads = std::atoi(argv[i + 1]);
    else if (std::strcmp(argv[i], "--repeats") == 0) repeats = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: linear_bench [--threads N] [--repeats R]\n");
      return 2;
    }
  }
  threads = kvserve::kernels::cpu::SetComputeThreads(threads);
  double peak = 0;
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx512f")) peak = PeakGflopsAvx512(0.3);
#endif
  std::printf("linear_bench: %d thread(s), packed kernel %s, fp32 FMA peak %.1f GFLOP/s per CPU-second\n", threads,
              kvserve::kernels::cpu::PackedLinearKernelName(), peak);
  struct Shape {
    const char* what;
    int in, out;
  };
  // kvs-tiny (hidden 192, inter 512) and a ~137M Llama (hidden 768, inter 2048, vocab 32000).
  const Shape shapes[] = {{"tiny gate_up", 192, 1024}, {"tiny down", 512, 192},   {"137M qkv", 768, 2304},
                          {"137M gate_up", 768, 4096}, {"137M down", 2048, 768}, {"137M lm_head", 768, 32000}};
  std::printf("| shape | in x out | rows | blas GFLOP/s (cpu) | packed GFLOP/s (cpu) | packed / blas | packed %% of peak | bf16 GFLOP/s (cpu) | bf16 / packed | blas wall | packed wall |\n");
  std::printf("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  std::mt19937 gen(1);
  std::normal_distribution<float> dist(0.0f, 0.1f);
  for (const Shape& s : shapes) {
    std::vector<float> w(static_cast<size_t>(s.in) * s.out);
    for (float& v : w) v = dist(gen);
    std::vector<float> packed(kvserve::kernels::cpu::PackedLinearFloats(s.out, s.in));
    kvserve::kernels::cpu::PackLinearWeights(w.data(), s.out, s.in, packed.data());
    std::vector<uint16_t> wb(w.size()), packed_bf16(packed.size());
    for (size_t i = 0; i < w.size(); ++i) {
      uint32_t bits;
      std::memcpy(&bits, &w[i], 4);
      wb[i] = static_cast<uint16_t>(bits >> 16);
    }
    kvserve::kernels::cpu::PackLinearWeightsBf16(wb.data(), s.out, s.in, packed_bf16.data());
    for (int64_t rows : {1, 8, 32, 128, 512}) {
      if (rows >= 128 && std::string(s.what).find("lm_head") != std::string::npos) continue;
      std::vector<float> x(static_cast<size_t>(rows * s.in)), y(static_cast<size_t>(rows * s.out));
      for (float& v : x) v = dist(gen);
      const double flops = 2.0 * static_cast<double>(rows) * s.in * s.out;
      // Enough calls per sample for ~20 ms of work at 20 GFLOP/s.
      const int calls = std::max(1, static_cast<int>(4e8 / flops));
      std::vector<double> bc, bw, pc, pw, hc, hw;
      for (int rep = 0; rep < repeats; ++rep) {
        for (int which = 0; which < 3; ++which) {
          const double c0 = CpuSeconds(), w0 = WallSeconds();
          for (int i = 0; i < calls; ++i) {
            if (which == 0) {
              Linear(x.data(), s.in, w.data(), nullptr, y.data(), s.out, rows, s.in, s.out, false);
            } else if (which == 1) {
              PackedLinear(x.data(), s.in, packed.data(), nullptr, y.data(), s.out, rows, s.in, s.out, false);
            } else {
              kvserve::kernels::cpu::PackedLinearBf16(x.data(), s.in, packed_bf16.data(), nullptr, y.data(), s.out,
                                                      rows, s.in, s.out, false);
            }
          }
          const double gc = flops * calls / (CpuSeconds() - c0) * 1e-9, gw = flops * calls / (WallSeconds() - w0) * 1e-9;
          (which == 0 ? bc : which == 1 ? pc : hc).push_back(gc);
          (which == 0 ? bw : which == 1 ? pw : hw).push_back(gw);
        }
      }
      const double mb = Median(bc), mp = Median(pc);
      const double mh = Median(hc);
      std::printf("| %s | %d x %d | %lld | %.1f | %.1f | %.2fx | %.0f%% | %.1f | %.2fx | %.1f | %.1f |\n", s.what,
                  s.in, s.out, static_cast<long long>(rows), mb, mp, mp / mb,
                  peak > 0 ? 100.0 * mp / (peak * threads) : 0.0, mh, mh / mp, Median(bw), Median(pw));
      std::fflush(stdout);
    }
  }
  return 0;
}
