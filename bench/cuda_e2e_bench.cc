// End-to-end decode throughput of the CUDA model (prints; no targets asserted): a random-weight
// 1B-class Llama in bf16 (16 layers, hidden 2048, intermediate 8192, 32/8 heads x 64, vocab
// 32000; weights drawn on the device, no checkpoint file), bf16 KV, block 16.
//
//   per batch size B in {1, 32, 256}: B prompts of --prompt tokens prefilled in chunks of
//   --chunk tokens, then --steps decode steps; each step is what the CUDA runner does per step:
//   BatchBuilder on the host -> CudaLlamaModel::ForwardDevice -> device greedy sampling ->
//   8 bytes per sequence back -> the sampled tokens are the next step's input.
//   Output tokens/s = B * steps / wall time of the decode steps (median of --repeats runs).
//
// The weight-read roofline of a decode step is weight bytes / measured device copy bandwidth
// (read + write of a 2 GiB device-to-device copy, the same reference cuda_kv_bench uses).
// Scheduler and HTTP overheads are not included (the engine adds them on the host).
//
// Usage: cuda_e2e_bench [--prompt 128] [--steps 64] [--chunk 4096] [--repeats 3] [--batches 1,32,256]
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "cuda/cuda_kv_storage.h"
#include "cuda_bench_util.h"
#include "cuda/cuda_llama_model.h"
#include "kernels/device_probe.h"
#include "model/batch_builder.h"

namespace {

using kvserve::cuda::CudaKvStorage;
using kvserve::cuda::CudaLlamaModel;

struct Figures {
  double tokens_per_s = 0.0;
  double ms_per_step = 0.0;
};

bool Check(const absl::Status& s, const char* what) {
  if (s.ok()) return true;
  std::fprintf(stderr, "cuda_e2e_bench: %s: %s\n", what, std::string(s.message()).c_str());
  return false;
}

// One run at batch `b`; false on a device error.
bool RunBatch(CudaLlamaModel& m, int b, int prompt, int steps, Figures& out) {
  const kvserve::cache::KvLayout layout = m.KvLayoutFor(16, kvserve::config::KvDtype::kBf16);
  const int per_seq = (prompt + steps + 15) / 16;
  auto storage = CudaKvStorage::Create(layout, b * per_seq + 1);
  if (!Check(storage.status(), "KV pool")) return false;
  std::vector<std::byte*> data;
  std::vector<float*> scales;
  for (int l = 0; l < layout.num_layers; ++l) data.push_back((*storage)->device_layer_data(l));
  kvserve::model::KvCacheView view;
  view.layout = layout;
  view.num_blocks = (*storage)->num_blocks();
  view.layer_data = data;
  std::vector<std::vector<int32_t>> tables(static_cast<size_t>(b));
  for (int s = 0; s < b; ++s) {
    for (int i = 0; i < per_seq; ++i) tables[static_cast<size_t>(s)].push_back(1 + s * per_seq + i);
  }
  const int vocab = m.config().vocab_size;
  kvserve::model::BatchBuilder builder(16);
  // Prefill in chunks of at most max_tokens_per_step rows (whole prompts per chunk).
  const int per_chunk = std::max(1, m.max_tokens_per_step() / prompt);
  std::vector<int32_t> prompt_tokens(static_cast<size_t>(prompt));
  for (int s0 = 0; s0 < b; s0 += per_chunk) {
    builder.Clear();
    for (int s = s0; s < std::min(b, s0 + per_chunk); ++s) {
      for (int i = 0; i < prompt; ++i) prompt_tokens[static_cast<size_t>(i)] = (s * 131 + i * 7919) % vocab;
      builder.AddSequence(prompt_tokens, 0, 0, tables[static_cast<size_t>(s)], kvserve::model::LogitsWanted::kLast);
    }
    if (!Check(m.ForwardDevice(builder.batch(), view), "prefill")) return false;
  }
  if (!Check(m.Synchronize(), "prefill")) return false;
  std::vector<int32_t> next(static_cast<size_t>(b), 1), tok(1);
  std::vector<float> lps(static_cast<size_t>(b));
  const auto t0 = std::chrono::steady_clock::now();
  for (int step = 0; step < steps; ++step) {
    builder.Clear();
    for (int s = 0; s < b; ++s) {
      tok[0] = next[static_cast<size_t>(s)];
      builder.AddSequence(tok, prompt + step, prompt + step, tables[static_cast<size_t>(s)],
                          kvserve::model::LogitsWanted::kLast);
    }
    if (!Check(m.ForwardDevice(builder.batch(), view), "decode step")) return false;
    if (!Check(m.SampleGreedy(b, next, lps), "sampling")) return false;
  }
  const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  out.tokens_per_s = static_cast<double>(b) * steps / sec;
  out.ms_per_step = 1e3 * sec / steps;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  int prompt = 128, steps = 64, chunk = 4096, repeats = 3;
  std::vector<int> batches = {1, 32, 256};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    const int v = std::atoi(argv[i + 1]);
    if (a == "--batches") {
      batches.clear();
      for (const char* p = argv[i + 1]; *p != '\0';) {
        char* e = nullptr;
        const long b = std::strtol(p, &e, 10);
        if (e == p || b < 1) {
          std::fprintf(stderr, "cuda_e2e_bench: --batches wants positive integers separated by commas: %s\n", argv[i + 1]);
          return 2;
        }
        batches.push_back(static_cast<int>(b));
        p = *e == ',' ? e + 1 : e;
      }
    }
    if (a == "--prompt") prompt = v;
    else if (a == "--steps") steps = v;
    else if (a == "--chunk") chunk = v;
    else if (a == "--repeats") repeats = v;
  }
  const kvserve::kernels::DeviceProbe probe = kvserve::kernels::ProbeCudaDevice();
  if (!probe.usable()) {
    std::fprintf(stderr, "cuda_e2e_bench: no usable CUDA device: %s\n", probe.reason.c_str());
    return 1;
  }
  kvserve::model::ModelConfig c;
  c.architecture_name = "LlamaForCausalLM";
  c.num_layers = 16;
  c.hidden_size = 2048;
  c.intermediate_size = 8192;
  c.num_heads = 32;
  c.num_kv_heads = 8;
  c.head_dim = 64;
  c.vocab_size = 32000;
  c.rms_norm_eps = 1e-5f;
  c.rope_theta = 500000.0;
  c.max_position_embeddings = 8192;
  kvserve::cuda::CudaModelOptions o;
  o.max_tokens_per_step = std::max(chunk, prompt);
  o.max_logits_rows = 256;
  auto m = CudaLlamaModel::CreateRandom(c, kvserve::model::DeviceWeightDtype::kBf16, 1234, o);
  if (!m.ok()) {
    std::fprintf(stderr, "cuda_e2e_bench: %s\n", std::string(m.status().message()).c_str());
    return 1;
  }
  const double copy = kvserve::bench::DeviceCopyGbps(size_t{2} << 30, 6);
  // A decode step streams every weight but the embedding table (fp32, one row per token read).
  const double streamed = static_cast<double>((*m)->weight_bytes()) -
                          static_cast<double>(c.vocab_size) * c.hidden_size * sizeof(float);
  const double roofline_ms = copy > 0 ? streamed / (copy * 1e9) * 1e3 : 0.0;
  std::printf("## CUDA end-to-end decode (%s): random 1B-class Llama, bf16 weights and KV\n\n",
              probe.device_name.c_str());
  std::printf("weights %.2f GiB (%.2f GiB streamed per step), device copy %.0f GB/s -> weight-read roofline %.3f ms/step\n"
              "prompt %d tokens, %d decode steps, median of %d runs\n\n",
              static_cast<double>((*m)->weight_bytes()) / (1 << 30), streamed / (1 << 30), copy, roofline_ms, prompt,
              steps, repeats);
  std::printf("| batch | output tokens/s | ms/step | step / roofline | vs batch %d |\n|---:|---:|---:|---:|---:|\n",
              batches.front());
  double base = 0.0;
  for (int b : batches) {
    std::vector<Figures> runs;
    Figures warm;
    if (!RunBatch(**m, b, prompt, 4, warm)) return 1;  // warm-up: cuBLAS heuristics, first launches
    for (int r = 0; r < repeats; ++r) {
      Figures f;
      if (!RunBatch(**m, b, prompt, steps, f)) return 1;
      runs.push_back(f);
    }
    std::sort(runs.begin(), runs.end(), [](const Figures& x, const Figures& y) { return x.tokens_per_s < y.tokens_per_s; });
    const Figures med = runs[runs.size() / 2];
    if (base == 0.0) base = med.tokens_per_s;
    std::printf("| %d | %.0f | %.3f | %.2f | %.1fx |\n", b, med.tokens_per_s, med.ms_per_step,
                roofline_ms > 0 ? med.ms_per_step / roofline_ms : 0.0, base > 0 ? med.tokens_per_s / base : 0.0);
  }
  return 0;
}
