// Quantized linear layers (kernels/cpu/quant) against the packed fp16 / bf16 kernels on the
// same shapes:
//   batch 1:   GB/s of weight bytes streamed (QuantMatrix::bytes() per call), cycling through
//              enough copies of the matrix that none stays in the last-level cache, and the
//              fraction of a measured read roofline (a plain AVX-512 read loop, same threads)
//   rows 8/32: GB/s and GFLOP/s;  rows 512 (prefill): GFLOP/s (2 * rows * in * out per call)
// Medians of wall time, and GFLOP per process CPU second (what idle cores would give on the
// shared machine; it counts the workers' spinning too). Weights: our quantizer on random normal
// values.
//
//   build/bin/quant_linear_bench [--threads N] [--repeats R] [--shapes 0|1|2] [--rows N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

// GCC 12's _mm512_reduce_add_ps passes an undefined vector through its shuffles (bug 105593).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#include "bench/cpu_clock.h"
#include "kernels/cpu/compute_pool.h"
#include "kernels/cpu/kv_quant.h"
#include "kernels/cpu/packed_linear.h"
#include "kernels/cpu/quant/fp8_segment.h"
#include "kernels/cpu/quant/quant_linear.h"
#include "quant/block_type.h"

namespace {

namespace cpu = kvserve::kernels::cpu;
namespace kq = kvserve::kernels::cpu::quant;
using kvserve::quant::BlockType;

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

constexpr size_t kColdBytes = size_t{384} << 20;  // copies cycled through at batch 1

#if defined(__x86_64__)
// Four sequential streams at once (as the kernels read four panels at batch 1): one stream
// per core reads markedly slower on this VM.
__attribute__((target("avx512f"))) float ReadRange(const float* p, int64_t n) {
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  const int64_t q = n / 4;
  for (int64_t i = 0; i + 32 <= q; i += 32) {
    a0 = _mm512_add_ps(a0, _mm512_add_ps(_mm512_load_ps(p + i), _mm512_load_ps(p + i + 16)));
    a1 =
        _mm512_add_ps(a1, _mm512_add_ps(_mm512_load_ps(p + q + i), _mm512_load_ps(p + q + i + 16)));
    a2 = _mm512_add_ps(
        a2, _mm512_add_ps(_mm512_load_ps(p + 2 * q + i), _mm512_load_ps(p + 2 * q + i + 16)));
    a3 = _mm512_add_ps(
        a3, _mm512_add_ps(_mm512_load_ps(p + 3 * q + i), _mm512_load_ps(p + 3 * q + i + 16)));
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}
#else
float ReadRange(const float* p, int64_t n) {
  float s = 0;
  for (int64_t i = 0; i < n; ++i) s += p[i];
  return s;
}
#endif

// GB/s of a read-only sweep over kColdBytes on the compute team (chunks of 8 MiB).
double ReadRooflineGBs(int repeats) {
  const int64_t n = kColdBytes / 4;
  float* buf = static_cast<float*>(std::aligned_alloc(64, kColdBytes));
  uint32_t lcg = 1;  // distinct page contents (identical pages may be merged by the host)
  for (int64_t i = 0; i < n; ++i) {
    lcg = lcg * 1664525u + 1013904223u;
    buf[i] = static_cast<float>(lcg >> 8) * 1e-7f;
  }
  const int64_t chunk = (8 << 20) / 4;  // 8 MiB per chunk: four 2 MiB streams
  std::vector<float> sink(64);
  std::vector<double> t;
  for (int r = 0; r < repeats + 1; ++r) {
    const double t0 = Now();
    cpu::ParallelFor(n / chunk, true,
                     [&](int64_t c, int slot) { sink[slot] += ReadRange(buf + c * chunk, chunk); });
    if (r > 0) t.push_back(Now() - t0);
  }
  std::free(buf);
  if (sink[0] == 12345.0f) std::printf(" ");
  return kColdBytes / Median(t) / 1e9;
}

// The int8 dot-product peak of one thread: a chain-free stream of vpdpbusd (12 independent
// accumulators, more than the instruction's latency times its throughput), as int8 operations
// per CPU second (64 multiply-adds = 128 operations per 512-bit instruction). The prefill rows'
// "GFLOP/cpu-s" set beside it is the stated fraction of the int8 peak; 0 without AVX-512 VNNI.
#if defined(__x86_64__)
__attribute__((target("avx512f,avx512bw,avx512vnni"))) double VnniPeakGops() {
  if (!__builtin_cpu_supports("avx512vnni")) return 0;
  constexpr int kAcc = 12;  // zmm0..zmm11, sources zmm16/zmm17: no dependence between them
  constexpr int64_t kIters = 20'000'000;
  std::vector<double> t;
  for (int r = 0; r < 3; ++r) {
    const double c0 = kvserve::bench::ProcessCpuSeconds();
    for (int64_t k = 0; k < kIters; ++k) {
      asm volatile(
          "vpdpbusd %%zmm16, %%zmm17, %%zmm0\n\tvpdpbusd %%zmm16, %%zmm17, %%zmm1\n\t"
          "vpdpbusd %%zmm16, %%zmm17, %%zmm2\n\tvpdpbusd %%zmm16, %%zmm17, %%zmm3\n\t"
          "vpdpbusd %%zmm16, %%zmm17, %%zmm4\n\tvpdpbusd %%zmm16, %%zmm17, %%zmm5\n\t"
          "vpdpbusd %%zmm16, %%zmm17, %%zmm6\n\tvpdpbusd %%zmm16, %%zmm17, %%zmm7\n\t"
          "vpdpbusd %%zmm16, %%zmm17, %%zmm8\n\tvpdpbusd %%zmm16, %%zmm17, %%zmm9\n\t"
          "vpdpbusd %%zmm16, %%zmm17, %%zmm10\n\tvpdpbusd %%zmm16, %%zmm17, %%zmm11"
          :
          :
          : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10",
            "xmm11");
    }
    t.push_back(kvserve::bench::ProcessCpuSeconds() - c0);
  }
  return 128.0 * kAcc * static_cast<double>(kIters) / Median(t) / 1e9;
}
#else
double VnniPeakGops() { return 0; }
#endif

struct Shape {
  int out, in;
};

std::vector<float> RandomWeights(const Shape& s, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 0.02f);
  std::vector<float> w(static_cast<size_t>(s.out) * s.in);
  for (float& v : w) v = g(rng);
  return w;
}

struct Timing {
  double wall = 0;  // median seconds per call
  double cpu = 0;   // median process CPU seconds per call (all threads)
};

// Times fn(copy) per call, cycling through `copies`.
template <typename Fn>
Timing TimeCalls(int copies, int calls, Fn&& fn) {
  std::vector<double> wall, cpu;
  for (int i = 0; i < calls + copies; ++i) {
    const double t0 = Now(), c0 = kvserve::bench::ProcessCpuSeconds();
    fn(i % copies);
    if (i >= copies) {  // the first pass warms up
      wall.push_back(Now() - t0);
      cpu.push_back(kvserve::bench::ProcessCpuSeconds() - c0);
    }
  }
  return {Median(wall), Median(cpu)};
}

void BenchShape(const Shape& s, int repeats, double roofline, int only_rows) {
  const std::vector<float> w = RandomWeights(s, 1);
  std::vector<int> row_counts = {1, 8, 32, 512};
  if (only_rows > 0) row_counts = {only_rows};
  const int max_rows = 512;
  std::vector<float> x(static_cast<size_t>(max_rows) * s.in),
      y(static_cast<size_t>(max_rows) * s.out);
  std::mt19937 rng(2);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (float& v : x) v = g(rng);
  std::printf("\nshape out %d x in %d\n", s.out, s.in);
  std::printf("%-6s %-12s %7s %5s %10s %8s %6s %9s %12s\n", "type", "kernel", "MB", "rows",
              "us/call", "GB/s", "%roof", "GFLOP/s", "GFLOP/cpu-s");
  auto report = [&](const char* name, const char* kernel, double bytes, int rows, const Timing& t) {
    const double gbs = bytes / t.wall / 1e9;
    const double flop = 2.0 * rows * s.in * static_cast<double>(s.out);
    std::printf("%-6s %-12s %7.1f %5d %10.1f %8.2f %6.1f %9.1f %12.1f\n", name, kernel, bytes / 1e6,
                rows, t.wall * 1e6, gbs, 100.0 * gbs / roofline, flop / t.wall / 1e9,
                flop / t.cpu / 1e9);
  };
  // Q4_0 / U4_F32 / U8_F32: what Hugging Face AWQ / GPTQ / compressed-tensors files run as.
  for (BlockType type : {BlockType::kQ8_0, BlockType::kQ4_K, BlockType::kQ6_K, BlockType::kQ4_0,
                         BlockType::kU4_F32, BlockType::kU8_F32}) {
    const kvserve::quant::BlockTraits& tr = kvserve::quant::Traits(type);
    const int64_t row_bytes = s.in / tr.block_elements * tr.block_bytes;
    std::vector<std::byte> file(static_cast<size_t>(s.out) * row_bytes);
    kvserve::quant::QuantizeRows(type, w.data(), s.out, s.in, file.data());
    const kq::QuantSource src{type, file.data(), s.out, row_bytes};
    std::vector<kq::QuantMatrix> mats;
    auto first = kq::QuantMatrix::Pack({&src, 1}, s.in);
    if (!first.ok()) {
      std::printf("pack failed: %s\n", std::string(first.status().message()).c_str());
      return;
    }
    const double bytes = static_cast<double>(first->bytes());
    mats.push_back(std::move(*first));
    const int copies = only_rows > 1 ? 1 : std::max<int>(1, static_cast<int>(kColdBytes / bytes));
    for (int c = 1; c < copies; ++c) {
      // Every copy different (identical pages may be merged by the host and then share the
      // cache): flip code bits, never the scale fields, so every block stays valid.
      std::vector<std::byte> f = file;
      const int blocks = static_cast<int>(f.size() / tr.block_bytes);
      const int lo = type == BlockType::kQ8_0 || type == BlockType::kQ4_0       ? 2
                     : type == BlockType::kQ4_K                                 ? 16
                     : type == BlockType::kU4_F32 || type == BlockType::kU8_F32 ? 8
                                                                                : 0;
      const int hi = type == BlockType::kQ6_K ? 192 : tr.block_bytes;
      std::mt19937 bits(c);
      for (int b = 0; b < blocks; ++b)
        for (int i = lo; i < hi; ++i)
          f[static_cast<size_t>(b) * tr.block_bytes + i] = std::byte(bits() & 0xff);
      const kq::QuantSource fs{type, f.data(), s.out, row_bytes};
      mats.push_back(std::move(*kq::QuantMatrix::Pack({&fs, 1}, s.in)));
    }
    for (int rows : row_counts) {
      const int n_copies = rows == 1 ? copies : 1;
      const int calls = rows >= 512 ? std::max(3, repeats / 10) : repeats;
      const Timing sec = TimeCalls(n_copies, calls, [&](int c) {
        kq::QuantLinear(x.data(), s.in, mats[c], nullptr, y.data(), s.out, rows, false);
      });
      report(std::string(tr.name).c_str(), kq::QuantKernelName(type), bytes, rows, sec);
    }
  }
  // ---- FP8 e4m3 segments (kernels/cpu/quant/fp8_format.h): random non-NaN codes with
  // 128 x 128 block scales (the values do not change the speed), fp32 activations. ----
  {
    const int64_t kblocks = (s.in + 127) / 128;
    std::vector<float> scales(static_cast<size_t>(s.out * kblocks), 1.0f / 448);
    auto random_codes = [&](uint32_t seed) {
      std::mt19937 bits(seed);
      std::vector<uint8_t> codes(static_cast<size_t>(s.out) * s.in);
      for (uint8_t& c : codes) c = static_cast<uint8_t>(bits() & 0xf7);  // never s 1111 111
      return codes;
    };
    auto pack = [&](const std::vector<uint8_t>& codes) {
      kq::QuantSource src{};
      src.data = reinterpret_cast<const std::byte*>(codes.data());
      src.rows = s.out;
      src.row_stride = s.in;
      src.fp8_scales = scales.data();
      return std::move(*kq::QuantMatrix::Pack({&src, 1}, s.in));
    };
    std::vector<kq::QuantMatrix> mats;
    mats.push_back(pack(random_codes(0)));
    const double bytes = static_cast<double>(mats[0].bytes());
    const int copies = only_rows > 1 ? 1 : std::max<int>(1, static_cast<int>(kColdBytes / bytes));
    for (int c = 1; c < copies; ++c) mats.push_back(pack(random_codes(static_cast<uint32_t>(c))));
    for (int rows : row_counts) {
      const int n_copies = rows == 1 ? copies : 1;
      const int calls = rows >= 512 ? std::max(3, repeats / 10) : repeats;
      const Timing sec = TimeCalls(n_copies, calls, [&](int c) {
        kq::QuantLinear(x.data(), s.in, mats[c], nullptr, y.data(), s.out, rows, false);
      });
      report("FP8", kq::Fp8KernelName(kq::Fp8ProcessIsa()), bytes, rows, sec);
    }
    // The AVX2 kernels on the same matrices (what a CPU without AVX-512 runs).
    for (int rows : row_counts) {
      if (kq::Fp8ProcessIsa() != kq::Fp8Isa::kAvx512 || !kq::internal::HasAvx2Kernels()) break;
      const int n_copies = rows == 1 ? copies : 1;
      const int calls = rows >= 512 ? std::max(3, repeats / 10) : repeats;
      const Timing sec = TimeCalls(n_copies, calls, [&](int c) {
        kq::internal::QuantLinearAvx2(x.data(), s.in, mats[c], nullptr, y.data(), s.out, rows,
                                      false);
      });
      report("FP8", kq::Fp8KernelName(kq::Fp8Isa::kAvx2), bytes, rows, sec);
    }
  }
  // Packed fp16 / bf16 on the same values.
  for (int kind = 0; kind < 2; ++kind) {
    std::vector<uint16_t> h(w.size());
    for (size_t i = 0; i < w.size(); ++i) {
      if (kind == 0) {
        h[i] = cpu::FloatToHalf(w[i]);
      } else {
        uint32_t bits;
        std::memcpy(&bits, &w[i], 4);
        h[i] = static_cast<uint16_t>(bits >> 16);
      }
    }
    const size_t elems = cpu::PackedLinearFloats(s.out, s.in);
    const double bytes = 2.0 * elems;
    const int copies = only_rows > 1 ? 1 : std::max<int>(1, static_cast<int>(kColdBytes / bytes));
    std::vector<std::vector<uint16_t>> packed(copies, std::vector<uint16_t>(elems));
    for (size_t c = 0; c < packed.size(); ++c) {
      auto& p = packed[c];
      std::mt19937 bits(static_cast<uint32_t>(c));  // distinct copies: random values below 1
      if (c > 0)
        for (uint16_t& v : h) v = static_cast<uint16_t>(bits() & (kind == 0 ? 0x3bff : 0x3f7f));
      if (kind == 0) {
        cpu::PackLinearWeightsFp16(h.data(), s.out, s.in, p.data());
      } else {
        cpu::PackLinearWeightsBf16(h.data(), s.out, s.in, p.data());
      }
    }
    for (int rows : row_counts) {
      const int n_copies = rows == 1 ? copies : 1;
      const int calls = rows >= 512 ? std::max(3, repeats / 10) : repeats;
      const Timing sec = TimeCalls(n_copies, calls, [&](int c) {
        if (kind == 0) {
          cpu::PackedLinearFp16(x.data(), s.in, packed[c].data(), nullptr, y.data(), s.out, rows,
                                s.in, s.out, false);
        } else {
          cpu::PackedLinearBf16(x.data(), s.in, packed[c].data(), nullptr, y.data(), s.out, rows,
                                s.in, s.out, false);
        }
      });
      report(kind == 0 ? "F16" : "BF16", cpu::PackedLinearKernelName(), bytes, rows, sec);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2, repeats = 40, shapes = 2, only_rows = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--threads") == 0) threads = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--repeats") == 0) repeats = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--shapes") == 0) shapes = std::atoi(argv[i + 1]);  // 0: roofline only
    if (std::strcmp(argv[i], "--rows") == 0) only_rows = std::atoi(argv[i + 1]);
  }
  cpu::SetComputeThreads(threads);
  const double roofline = ReadRooflineGBs(7);
  std::printf("threads %d, read roofline %.2f GB/s (median of 7 sweeps over %zu MiB)\n",
              cpu::ComputeThreads(), roofline, kColdBytes >> 20);
  std::printf("int8 (VNNI vpdpbusd) peak: %.1f GOP per CPU second (one thread, no memory)\n",
              VnniPeakGops());
  const Shape all[] = {Shape{4096, 4096}, Shape{2048, 8192}};
  for (int i = 0; i < std::min(shapes, 2); ++i) BenchShape(all[i], repeats, roofline, only_rows);
  return 0;
}
