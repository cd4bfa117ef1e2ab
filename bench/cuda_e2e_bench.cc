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
// --speculative K (K >= 1) adds the n-gram speculation table: at batches 1 and 8 (--spec-batches),
// copy-heavy prompts (a 12-token phrase repeated) decoded --steps tokens per sequence, plain (one
// row per sequence per step) and with n-gram drafts of up to K guesses verified as the CUDA
// runner verifies them (ForwardLayers, ComputeLogits over the 1 + k rows of every drafting
// sequence, device greedy per row, a guess kept while it equals its row's argmax; then the
// correction or the bonus token). Every step drafts (no adaptive gate or length). Prints output
// tokens/s of both, the speed-up, the share of guesses accepted, and whether the two streams are
// the same tokens (bf16 verify rows and decode rows take different attention kernels, so a
// near-tie can flip; the engine's exactness is tested in cuda_engine_test on fp32 kvs-tiny).
//
// Usage: cuda_e2e_bench [--prompt 128] [--steps 64] [--chunk 4096] [--repeats 3] [--batches
// 1,32,256]
//                       [--speculative 4] [--spec-batches 1,8]
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include "cuda/cuda_kv_storage.h"
#include "cuda/cuda_llama_model.h"
#include "cuda_bench_util.h"
#include "kernels/device_probe.h"
#include "model/batch_builder.h"
#include "speculative/ngram_proposer.h"

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

struct SpecFigures {
  double tokens_per_s = 0.0;
  int64_t guesses = 0, accepted = 0;
  std::vector<std::vector<int32_t>> outputs;  // per sequence, `steps` tokens
};

// `steps` greedy tokens for each of `b` copy-heavy prompts; k = 0 decodes plainly, k > 0 drafts up
// to k n-gram guesses per sequence per step. The timed part is the decode loop (prefill excluded).
bool RunCopyHeavy(CudaLlamaModel& m, int b, int prompt, int steps, int k, SpecFigures& out) {
  const kvserve::cache::KvLayout layout = m.KvLayoutFor(16, kvserve::config::KvDtype::kBf16);
  const int per_seq = (prompt + steps + k + 16) / 16;
  auto storage = CudaKvStorage::Create(layout, b * per_seq + 1);
  if (!Check(storage.status(), "KV pool")) return false;
  std::vector<std::byte*> data;
  for (int l = 0; l < layout.num_layers; ++l) data.push_back((*storage)->device_layer_data(l));
  kvserve::model::KvCacheView view;
  view.layout = layout;
  view.num_blocks = (*storage)->num_blocks();
  view.layer_data = data;
  const int vocab = m.config().vocab_size;
  std::vector<std::vector<int32_t>> tables(static_cast<size_t>(b)), history(static_cast<size_t>(b));
  kvserve::model::BatchBuilder builder(16);
  for (int s = 0; s < b; ++s) {
    for (int i = 0; i < per_seq; ++i) tables[static_cast<size_t>(s)].push_back(1 + s * per_seq + i);
    for (int i = 0; i < prompt; ++i)
      history[static_cast<size_t>(s)].push_back((s * 131 + (i % 12) * 7919) % vocab);
  }
  const int per_chunk = std::max(1, m.max_tokens_per_step() / prompt);
  std::vector<int32_t> next(static_cast<size_t>(b));
  std::vector<float> lps(static_cast<size_t>(b));
  for (int s0 = 0; s0 < b; s0 += per_chunk) {
    const int n = std::min(b, s0 + per_chunk) - s0;
    builder.Clear();
    for (int s = s0; s < s0 + n; ++s) {
      builder.AddSequence(history[static_cast<size_t>(s)], 0, 0, tables[static_cast<size_t>(s)],
                          kvserve::model::LogitsWanted::kLast);
    }
    if (!Check(m.ForwardDevice(builder.batch(), view), "prefill")) return false;
    if (!Check(m.SampleGreedy(n, std::span(next).subspan(static_cast<size_t>(s0)), lps),
               "prefill sampling")) {
      return false;
    }
  }
  for (int s = 0; s < b; ++s)
    history[static_cast<size_t>(s)].push_back(next[static_cast<size_t>(s)]);
  kvserve::speculative::NgramProposer proposer;
  kvserve::speculative::SpecParams params;
  params.method = kvserve::config::SpeculativeMethod::kNgram;
  params.num_tokens = k;
  params.ngram_min = 1;
  std::vector<std::vector<int32_t>> feed(static_cast<size_t>(b));
  std::vector<int32_t> guesses, argmax(static_cast<size_t>(b * (k + 1)));
  std::vector<float> logprobs(argmax.size());
  out.guesses = out.accepted = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (bool more = true; more;) {
    builder.Clear();
    int rows = 0;
    for (int s = 0; s < b; ++s) {
      std::vector<int32_t>& h = history[static_cast<size_t>(s)];
      std::vector<int32_t>& f = feed[static_cast<size_t>(s)];
      f.assign(1, h.back());
      // Guesses never reach past `steps` generated tokens (the scheduler's max_tokens cap).
      const int room = prompt + steps - static_cast<int>(h.size());
      guesses.clear();
      if (k > 0 && room > 0) proposer.Guess(h, params, std::min(k, room), guesses);
      f.insert(f.end(), guesses.begin(), guesses.end());
      const int pos = static_cast<int>(h.size()) - 1;
      builder.AddSequence(
          f, pos, pos, tables[static_cast<size_t>(s)],
          f.size() > 1 ? kvserve::model::LogitsWanted::kAll : kvserve::model::LogitsWanted::kLast);
      rows += static_cast<int>(f.size());
    }
    if (!Check(m.ForwardLayers(builder.batch(), view), "verify step")) return false;
    for (int begin = 0; begin < rows; begin += m.max_logits_rows()) {
      const int n = std::min(m.max_logits_rows(), rows - begin);
      if (!Check(m.ComputeLogits(begin, n), "logits")) return false;
      if (!Check(m.SampleGreedy(n, std::span(argmax).subspan(static_cast<size_t>(begin)),
                                std::span(logprobs).subspan(static_cast<size_t>(begin))),
                 "sampling")) {
        return false;
      }
    }
    more = false;
    int row = 0;
    for (int s = 0; s < b; ++s) {
      std::vector<int32_t>& h = history[static_cast<size_t>(s)];
      const std::vector<int32_t>& f = feed[static_cast<size_t>(s)];
      const int g = static_cast<int>(f.size()) - 1;
      int a = 0;
      while (a < g && f[static_cast<size_t>(a + 1)] == argmax[static_cast<size_t>(row + a)]) ++a;
      out.guesses += g;
      out.accepted += a;
      for (int j = 0; j <= a && static_cast<int>(h.size()) < prompt + steps + 1; ++j) {
        h.push_back(argmax[static_cast<size_t>(row + j)]);
      }
      row += g + 1;
      if (static_cast<int>(h.size()) < prompt + steps + 1) more = true;
    }
  }
  const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  out.tokens_per_s = static_cast<double>(b) * steps / sec;
  out.outputs.clear();
  for (const auto& h : history)
    out.outputs.emplace_back(h.begin() + prompt, h.begin() + prompt + steps);
  return true;
}

// The n-gram table (see the header): plain and speculative runs per batch, medians of `repeats`.
bool PrintSpeculation(CudaLlamaModel& m, const std::vector<int>& batches, int prompt, int steps,
                      int k, int repeats) {
  std::printf(
      "\n## n-gram speculation, k <= %d: copy-heavy prompts of %d tokens, %d output tokens "
      "each\n\n",
      k, prompt, steps);
  std::printf(
      "| batch | plain tokens/s | n-gram tokens/s | speed-up | guesses accepted | same tokens |\n"
      "|---:|---:|---:|---:|---:|---|\n");
  for (int b : batches) {
    SpecFigures warm;
    if (!RunCopyHeavy(m, b, prompt, 4, k, warm)) return false;
    std::vector<SpecFigures> plain(static_cast<size_t>(repeats)),
        spec(static_cast<size_t>(repeats));
    for (int r = 0; r < repeats; ++r) {
      if (!RunCopyHeavy(m, b, prompt, steps, 0, plain[static_cast<size_t>(r)])) return false;
      if (!RunCopyHeavy(m, b, prompt, steps, k, spec[static_cast<size_t>(r)])) return false;
    }
    auto by_speed = [](const SpecFigures& x, const SpecFigures& y) {
      return x.tokens_per_s < y.tokens_per_s;
    };
    std::sort(plain.begin(), plain.end(), by_speed);
    std::sort(spec.begin(), spec.end(), by_speed);
    const SpecFigures& p = plain[plain.size() / 2];
    const SpecFigures& q = spec[spec.size() / 2];
    std::printf(
        "| %d | %.0f | %.0f | %.2fx | %.2f (%lld of %lld) | %s |\n", b, p.tokens_per_s,
        q.tokens_per_s, p.tokens_per_s > 0 ? q.tokens_per_s / p.tokens_per_s : 0.0,
        q.guesses > 0 ? static_cast<double>(q.accepted) / static_cast<double>(q.guesses) : 0.0,
        static_cast<long long>(q.accepted), static_cast<long long>(q.guesses),
        p.outputs == q.outputs ? "yes" : "no");
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  int prompt = 128, steps = 64, chunk = 4096, repeats = 3, speculative = 0;
  std::vector<int> batches = {1, 32, 256}, spec_batches = {1, 8};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    const int v = std::atoi(argv[i + 1]);
    if (a == "--batches" || a == "--spec-batches") {
      std::vector<int>& list = a == "--batches" ? batches : spec_batches;
      list.clear();
      for (const char* p = argv[i + 1]; *p != '\0';) {
        char* e = nullptr;
        const long b = std::strtol(p, &e, 10);
        if (e == p || b < 1) {
          std::fprintf(stderr, "cuda_e2e_bench: --batches wants positive integers separated by commas: %s\n", argv[i + 1]);
          return 2;
        }
        list.push_back(static_cast<int>(b));
        p = *e == ',' ? e + 1 : e;
      }
    }
    if (a == "--prompt") prompt = v;
    else if (a == "--steps") steps = v;
    else if (a == "--chunk") chunk = v;
    else if (a == "--repeats") repeats = v;
    else if (a == "--speculative")
      speculative = v;
  }
  if (speculative < 0 || speculative > 16) {
    std::fprintf(stderr, "cuda_e2e_bench: --speculative wants 0 (off) to 16 guesses: %d\n",
                 speculative);
    return 2;
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
  if (speculative > 0 && !PrintSpeculation(**m, spec_batches, prompt, steps, speculative, repeats))
    return 1;
  return 0;
}
