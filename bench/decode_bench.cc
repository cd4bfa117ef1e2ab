// CPU decode/prefill benchmark of the Llama forward pass (not a test: it prints figures).
//
//   decode_bench [--model DIR] [--threads N] [--context C] [--steps S] [--prefill P] [--repeats R]
//                [--batch B]   (one batch size instead of 1, 8, 32)
//                [--kv-dtype fp32|fp16|bf16|fp8_e4m3|int8]   (default fp32)
//
// For batch 1, 8 and 32 it prefills C tokens per sequence, then times S greedy decode steps
// (forward + sampling) and reports aggregate tokens/s (median of R runs). Prefill throughput
// is one sequence of P tokens in chunks of max_tokens_per_step. The roofline column is the
// memory-bound limit: bytes a decode step must stream (all weights but the embedding table,
// plus every sequence's KV) over the memory bandwidth this binary measures first (multi-
// threaded read of a buffer far larger than the caches). Default model: models/kvs-tiny.
//
// Every figure is given twice: per wall-clock second, and per second of process CPU time.
// On a machine shared with other busy processes the wall figures mostly measure the
// scheduler; with --threads 1 the CPU-time figures are what an idle core would do (with
// more threads CPU time also counts compute-team workers spinning between kernels, so use
// wall time).
#include <omp.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "bench/cpu_clock.h"
#include "kernels/cpu/packed_linear.h"
#include "kernels/cpu/paged_attention.h"
#include "model/batch_builder.h"
#include "model/host_kv_buffer.h"
#include "model/llama_model.h"
#include "model/sampler.h"

namespace kvserve {
namespace {

using Clock = std::chrono::steady_clock;

double CpuNow() { return bench::ProcessCpuSeconds(); }

// Wall and process-CPU seconds of one timed region.
struct Elapsed {
  double wall = 0;
  double cpu = 0;
};

class Stopwatch {
 public:
  Stopwatch() : wall0_(Clock::now()), cpu0_(CpuNow()) {}
  Elapsed Read() const {
    return {std::chrono::duration<double>(Clock::now() - wall0_).count(), CpuNow() - cpu0_};
  }

 private:
  Clock::time_point wall0_;
  double cpu0_;
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

Elapsed Median(const std::vector<Elapsed>& runs) {
  std::vector<double> wall, cpu;
  for (const Elapsed& e : runs) {
    wall.push_back(e.wall);
    cpu.push_back(e.cpu);
  }
  return {Median(wall), Median(cpu)};
}

// Read bandwidth (bytes per wall and per CPU second): every thread sums its share of a
// 512 MiB buffer; best of 5.
Elapsed MeasureReadBandwidth(int threads) {
  const size_t n = (512ull << 20) / sizeof(float);
  std::vector<float> buf(n);
#pragma omp parallel for num_threads(threads) schedule(static)
  for (size_t i = 0; i < n; ++i) buf[i] = static_cast<float>(i & 1023);
  Elapsed best;
  volatile float sink = 0;
  const double bytes = static_cast<double>(n * sizeof(float));
  for (int rep = 0; rep < 5; ++rep) {
    Stopwatch sw;
    float total = 0;
#pragma omp parallel for num_threads(threads) schedule(static) reduction(+ : total)
    for (size_t i = 0; i < n; ++i) total += buf[i];
    const Elapsed e = sw.Read();
    sink = sink + total;
    best.wall = std::max(best.wall, bytes / e.wall);
    best.cpu = std::max(best.cpu, bytes * threads / e.cpu);  // per thread-second, times threads
  }
  return best;
}

struct Args {
  std::string model_dir = std::string(KVSERVE_SOURCE_DIR) + "/models/kvs-tiny";
  int threads = 0;
  int context = 128;
  int steps = 64;
  int prefill = 512;
  int repeats = 5;
  std::vector<int> batches = {1, 8, 32};
  config::KvDtype kv_dtype = config::KvDtype::kFp32;
};

bool ParseKvDtype(const std::string& v, config::KvDtype& out) {
  static constexpr std::pair<const char*, config::KvDtype> kNames[] = {
      {"fp32", config::KvDtype::kFp32}, {"fp16", config::KvDtype::kFp16}, {"bf16", config::KvDtype::kBf16},
      {"fp8_e4m3", config::KvDtype::kFp8E4M3}, {"int8", config::KvDtype::kInt8}};
  for (const auto& [name, dtype] : kNames) {
    if (v == name) {
      out = dtype;
      return true;
    }
  }
  return false;
}

bool ParseArgs(int argc, char** argv, Args& a) {
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) return false;
    const char* v = argv[++i];
    if (flag == "--model") a.model_dir = v;
    else if (flag == "--threads") a.threads = std::atoi(v);
    else if (flag == "--context") a.context = std::atoi(v);
    else if (flag == "--steps") a.steps = std::atoi(v);
    else if (flag == "--prefill") a.prefill = std::atoi(v);
    else if (flag == "--repeats") a.repeats = std::atoi(v);
    else if (flag == "--batch") a.batches = {std::atoi(v)};
    else if (flag == "--kv-dtype") {
      if (!ParseKvDtype(v, a.kv_dtype)) return false;
    }
    else return false;
  }
  return a.context > 0 && a.steps > 0 && a.prefill > 0 && a.repeats > 0;
}

constexpr int kBlockSize = 16;

// Runs `batch` sequences: prefill `context` tokens each (untimed), then `steps` timed greedy
// decode steps. Returns the time spent in the decode steps.
Elapsed TimeDecode(model::LlamaModel& m, config::KvDtype dtype, int batch, int context, int steps) {
  const int vocab = m.config().vocab_size;
  const int per_seq_blocks = (context + steps + kBlockSize - 1) / kBlockSize;
  model::HostKvBuffer kv(m.KvLayoutFor(kBlockSize, dtype), int64_t{batch} * per_seq_blocks);
  std::vector<std::vector<int32_t>> tables(batch), tokens(batch);
  for (int s = 0; s < batch; ++s) {
    tables[s].resize(per_seq_blocks);
    std::iota(tables[s].begin(), tables[s].end(), s * per_seq_blocks);
    for (int i = 0; i < context; ++i) tokens[s].push_back((i * 7 + s * 13 + 5) % vocab);
  }
  model::BatchBuilder bb(kBlockSize);
  std::vector<float> logits(static_cast<size_t>(batch) * vocab);
  const int chunk = m.max_tokens_per_step();
  for (int s = 0; s < batch; ++s) {
    for (int pos = 0; pos < context; pos += chunk) {
      const int n = std::min(chunk, context - pos);
      bb.Clear();
      bb.AddSequence(std::span(tokens[s]).subspan(pos, n), pos, pos, tables[s], model::LogitsWanted::kLast);
      if (auto st = m.Forward(bb.batch(), kv.view(), logits); !st.ok()) {
        std::fprintf(stderr, "prefill failed: %s\n", std::string(st.message()).c_str());
        std::exit(1);
      }
    }
  }
  model::Sampler sampler(vocab);
  model::SamplingParams greedy;
  greedy.temperature = 0.0f;
  model::SamplerRng rng(0);
  std::vector<int32_t> next(batch, 1);
  Stopwatch sw;
  for (int step = 0; step < steps; ++step) {
    bb.Clear();
    const int32_t len = context + step;
    for (int s = 0; s < batch; ++s) {
      bb.AddSequence(std::span(&next[s], 1), len, len, tables[s], model::LogitsWanted::kLast);
    }
    if (auto st = m.Forward(bb.batch(), kv.view(), logits); !st.ok()) {
      std::fprintf(stderr, "decode failed: %s\n", std::string(st.message()).c_str());
      std::exit(1);
    }
    for (int s = 0; s < batch; ++s) {
      next[s] = sampler.Sample(std::span(logits).subspan(static_cast<size_t>(s) * vocab, vocab), greedy, {}, {}, rng).token;
    }
  }
  return sw.Read();
}

Elapsed TimePrefill(model::LlamaModel& m, config::KvDtype dtype, int length) {
  const int vocab = m.config().vocab_size;
  const int blocks = (length + kBlockSize - 1) / kBlockSize;
  model::HostKvBuffer kv(m.KvLayoutFor(kBlockSize, dtype), blocks);
  std::vector<int32_t> table(blocks), tokens(length);
  std::iota(table.begin(), table.end(), 0);
  for (int i = 0; i < length; ++i) tokens[i] = (i * 11 + 3) % vocab;
  model::BatchBuilder bb(kBlockSize);
  std::vector<float> logits(vocab);
  const int chunk = m.max_tokens_per_step();
  Stopwatch sw;
  for (int pos = 0; pos < length; pos += chunk) {
    const int n = std::min(chunk, length - pos);
    bb.Clear();
    bb.AddSequence(std::span(tokens).subspan(pos, n), pos, pos, table, model::LogitsWanted::kLast);
    if (auto st = m.Forward(bb.batch(), kv.view(), logits); !st.ok()) std::exit(1);
  }
  return sw.Read();
}

int Main(int argc, char** argv) {
  Args a;
  if (!ParseArgs(argc, argv, a)) {
    std::fprintf(stderr,
                 "usage: decode_bench [--model DIR] [--threads N] [--context C] [--steps S] "
                 "[--prefill P] [--repeats R] [--batch B] [--kv-dtype fp32|fp16|bf16|fp8_e4m3|int8]\n");
    return 2;
  }
  model::ModelOptions opts;
  opts.threads = a.threads;
  opts.max_tokens_per_step = 512;
  auto loaded = model::LlamaModel::Load(a.model_dir, opts);
  if (!loaded.ok()) {
    std::fprintf(stderr, "decode_bench: %s\n", std::string(loaded.status().message()).c_str());
    return 1;
  }
  model::LlamaModel& m = **loaded;
  const auto& c = m.config();
  const Elapsed bw = MeasureReadBandwidth(m.threads());
  const double weight_bytes = static_cast<double>(m.weights().streamed_bytes());
  const double kv_token_bytes = m.KvLayoutFor(kBlockSize, a.kv_dtype).bytes_per_token();

  std::printf("model %s: %d layers, hidden %d, heads %d/%d x %d, vocab %d, %.2f M params\n", a.model_dir.c_str(),
              c.num_layers, c.hidden_size, c.num_heads, c.num_kv_heads, c.head_dim, c.vocab_size,
              static_cast<double>(c.num_parameters()) * 1e-6);
  std::printf("threads %d; read bandwidth %.2f GB/s (wall), %.2f GB/s (CPU time); streamed weights %.2f MB; "
              "KV %.0f B/token\n",
              m.threads(), bw.wall * 1e-9, bw.cpu * 1e-9, weight_bytes * 1e-6, kv_token_bytes);
  std::printf("kernels: packed linear %s, attention %s\n", kernels::cpu::PackedLinearKernelName(),
              kernels::cpu::PagedAttentionKernelName());
  std::printf("decode: context %d + %d steps, median of %d runs; (wall | CPU time)\n\n", a.context, a.steps,
              a.repeats);
  std::printf("| batch | tokens/s | ms/step | roofline tokens/s | roofline / measured | vs batch 1 |\n");
  std::printf("|---:|---:|---:|---:|---:|---:|\n");
  Elapsed batch1;
  for (int batch : a.batches) {
    std::vector<Elapsed> runs;
    for (int r = 0; r < a.repeats; ++r) runs.push_back(TimeDecode(m, a.kv_dtype, batch, a.context, a.steps));
    const Elapsed e = Median(runs);
    const Elapsed tps{batch * a.steps / e.wall, batch * a.steps / e.cpu};
    if (batch == 1) batch1 = tps;
    // Per step: weights once, plus each sequence's KV at the mean context of the run.
    const double mean_ctx = a.context + 0.5 * a.steps;
    const double step_bytes = weight_bytes + batch * mean_ctx * kv_token_bytes;
    const Elapsed roofline{batch * bw.wall / step_bytes, batch * bw.cpu / step_bytes};
    std::printf("| %d | %.0f \\| %.0f | %.3f \\| %.3f | %.0f \\| %.0f | %.2f \\| %.2f |", batch, tps.wall, tps.cpu,
                1e3 * e.wall / a.steps, 1e3 * e.cpu / a.steps, roofline.wall, roofline.cpu, roofline.wall / tps.wall,
                roofline.cpu / tps.cpu);
    if (batch1.wall > 0) {
      std::printf(" %.1fx \\| %.1fx |\n", tps.wall / batch1.wall, tps.cpu / batch1.cpu);
    } else {
      std::printf(" - |\n");
    }
  }
  std::vector<Elapsed> runs;
  for (int r = 0; r < a.repeats; ++r) runs.push_back(TimePrefill(m, a.kv_dtype, a.prefill));
  const Elapsed e = Median(runs);
  std::printf("\nprefill: %d tokens in chunks of %d: %.0f tokens/s (wall), %.0f tokens/s (CPU time)\n", a.prefill,
              m.max_tokens_per_step(), a.prefill / e.wall, a.prefill / e.cpu);
  return 0;
}

}  // namespace
}  // namespace kvserve

int main(int argc, char** argv) { return kvserve::Main(argc, argv); }
