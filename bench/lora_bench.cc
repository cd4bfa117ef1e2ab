// CPU decode throughput with LoRA adapters (not a test: it prints figures).
//
//   lora_bench --model DIR [--threads N] [--streams 32] [--rank 16] [--context 64]
//              [--steps 16] [--repeats 3] [--adapters 1,8,32] [--adapter-dtype f32|bf16]
//
// Writes `max(adapters)` random PEFT adapters of rank R on all seven projections (q, k, v, o,
// gate, up, down) of every layer into a temporary directory, loads them, prefills `streams`
// sequences of C tokens, then times S decode steps of all streams together: once on the base
// alone, then with the streams spread round-robin over 1, 8, 32 adapters (max_loras = the
// adapter count). Reports output tokens/s (median of the repeats) per wall-clock second and
// per second of process CPU time (on a shared machine the CPU-time figure with --threads 1
// is what an idle core would do), and their ratios to the base. Model: e.g.
// bench/make_random_llama.py OUT (~134 M parameters).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench/cpu_clock.h"
#include "lora/adapter.h"
#include "lora/lora_step.h"
#include "lora/lora_targets.h"
#include "model/batch_builder.h"
#include "model/host_kv_buffer.h"
#include "model/llama_model.h"

namespace kvserve {
namespace {

using Clock = std::chrono::steady_clock;

// A minimal F32 safetensors writer (header JSON padded to 8 bytes, tensors back to back).
struct Tensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> data;
};

void WriteSafetensors(const std::string& path, const std::vector<Tensor>& tensors, bool bf16) {
  const size_t elem = bf16 ? 2 : 4;
  std::string header = "{";
  uint64_t offset = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    const uint64_t bytes = t.data.size() * elem;
    header += (i ? "," : "") + std::string("\"") + t.name + "\":{\"dtype\":\"" +
              (bf16 ? "BF16" : "F32") + "\",\"shape\":[" + std::to_string(t.shape[0]) + "," +
              std::to_string(t.shape[1]) + "],\"data_offsets\":[" + std::to_string(offset) + "," +
              std::to_string(offset + bytes) + "]}";
    offset += bytes;
  }
  header += "}";
  while (header.size() % 8 != 0) header += ' ';
  std::ofstream out(path, std::ios::binary);
  const uint64_t n = header.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out.write(header.data(), static_cast<std::streamsize>(n));
  for (const Tensor& t : tensors) {
    if (!bf16) {
      out.write(reinterpret_cast<const char*>(t.data.data()),
                static_cast<std::streamsize>(t.data.size() * 4));
      continue;
    }
    std::vector<uint16_t> h(t.data.size());
    for (size_t i = 0; i < h.size(); ++i) {
      uint32_t u;
      std::memcpy(&u, &t.data[i], 4);
      h[i] = static_cast<uint16_t>((u + 0x7fff + ((u >> 16) & 1)) >> 16);  // round to nearest even
    }
    out.write(reinterpret_cast<const char*>(h.data()), static_cast<std::streamsize>(h.size() * 2));
  }
}

void WriteAdapter(const std::string& dir, const lora::TargetTable& targets, int rank, uint64_t seed,
                  bool bf16) {
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/adapter_config.json")
      << "{\"peft_type\": \"LORA\", \"r\": " << rank << ", \"lora_alpha\": " << 2 * rank << "}";
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> u(-0.02f, 0.02f);
  std::vector<Tensor> tensors;
  for (const lora::Target& t : targets.targets()) {
    for (const lora::TargetSlice& s : t.slices) {
      if (t.kind == lora::ProjectionKind::kExpertGateUp ||
          t.kind == lora::ProjectionKind::kExpertDown)
        continue;
      Tensor a{"base_model.model." + s.module + ".lora_A.weight", {rank, t.in}, {}};
      Tensor b{"base_model.model." + s.module + ".lora_B.weight", {s.out_rows, rank}, {}};
      a.data.resize(static_cast<size_t>(rank) * t.in);
      b.data.resize(static_cast<size_t>(s.out_rows) * rank);
      for (float& v : a.data) v = u(gen);
      for (float& v : b.data) v = u(gen);
      tensors.push_back(std::move(a));
      tensors.push_back(std::move(b));
    }
  }
  WriteSafetensors(dir + "/adapter_model.safetensors", tensors, bf16);
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Options {
  std::string model;
  int threads = 0, streams = 32, rank = 16, context = 64, steps = 16, repeats = 3;
  std::vector<int> adapters = {1, 8, 32};
  bool bf16 = false;  // adapter files in BF16
};

struct Rate {
  double wall = 0, cpu = 0;  // output tokens per second
};

// Output tokens per wall and per CPU second of `steps` decode steps of all streams, streams spread
// round-robin over the first `num_adapters` adapters (0: the base alone).
Rate DecodeTokensPerSecond(model::LlamaModel& m, const lora::TargetTable& targets,
                           const std::vector<std::shared_ptr<const lora::Adapter>>& adapters,
                           int num_adapters, const Options& o) {
  constexpr int kBlockSize = 16;
  const int blocks_per_seq = (o.context + o.steps + kBlockSize - 1) / kBlockSize;
  model::HostKvBuffer kv(m.KvLayoutFor(kBlockSize, config::KvDtype::kFp32),
                         static_cast<int64_t>(blocks_per_seq) * o.streams);
  model::BatchBuilder builder(kBlockSize);
  lora::LoraStep step(targets, std::max(1, num_adapters), o.rank, m.max_tokens_per_step());
  const int vocab = m.config().vocab_size;
  std::vector<std::vector<int32_t>> tables(static_cast<size_t>(o.streams));
  for (int s = 0; s < o.streams; ++s) {
    for (int b = 0; b < blocks_per_seq; ++b)
      tables[static_cast<size_t>(s)].push_back(s * blocks_per_seq + b);
  }
  auto run = [&](int first_pos, int n, bool decode) {
    builder.Clear();
    step.Clear();
    for (int s = 0; s < o.streams; ++s) {
      std::vector<int32_t> tokens(static_cast<size_t>(n));
      for (int i = 0; i < n; ++i)
        tokens[static_cast<size_t>(i)] = (s * 131 + (first_pos + i) * 7) % vocab;
      builder.AddSequence(tokens, first_pos, first_pos, tables[static_cast<size_t>(s)],
                          decode ? model::LogitsWanted::kLast : model::LogitsWanted::kNone);
      const int slot =
          num_adapters > 0 ? step.SlotFor(*adapters[static_cast<size_t>(s % num_adapters)]) : -1;
      step.AddRows(slot, n);
    }
    model::ForwardBatch batch = builder.batch();
    batch.lora = step.Finish();
    std::vector<float> logits(static_cast<size_t>(builder.num_logits_rows()) * vocab);
    auto st = m.Forward(batch, kv.view(), logits);
    if (!st.ok()) {
      std::fprintf(stderr, "forward: %s\n", std::string(st.message()).c_str());
      std::exit(1);
    }
  };
  // Prefill in chunks that fit a step.
  const int chunk = std::max(1, m.max_tokens_per_step() / o.streams);
  for (int p = 0; p < o.context; p += chunk) run(p, std::min(chunk, o.context - p), false);
  const auto t0 = Clock::now();
  const double c0 = bench::ProcessCpuSeconds();
  for (int i = 0; i < o.steps; ++i) run(o.context + i, 1, true);
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  const double cpu = bench::ProcessCpuSeconds() - c0;
  const double tokens = static_cast<double>(o.steps) * o.streams;
  return {tokens / secs, tokens / cpu};
}

int Main(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--model")
      o.model = v;
    else if (k == "--threads")
      o.threads = std::atoi(v.c_str());
    else if (k == "--streams")
      o.streams = std::atoi(v.c_str());
    else if (k == "--rank")
      o.rank = std::atoi(v.c_str());
    else if (k == "--context")
      o.context = std::atoi(v.c_str());
    else if (k == "--steps")
      o.steps = std::atoi(v.c_str());
    else if (k == "--adapter-dtype")
      o.bf16 = v == "bf16";
    else if (k == "--repeats")
      o.repeats = std::atoi(v.c_str());
    else if (k == "--adapters") {
      o.adapters.clear();
      for (size_t p = 0; p < v.size();) {
        const size_t q = v.find(',', p);
        o.adapters.push_back(std::atoi(v.substr(p, q - p).c_str()));
        p = q == std::string::npos ? v.size() : q + 1;
      }
    } else {
      std::fprintf(stderr, "unknown option %s\n", k.c_str());
      return 2;
    }
  }
  if (o.model.empty()) {
    std::fprintf(stderr,
                 "usage: lora_bench --model DIR [--threads N] [--streams 32] [--rank 16] ...\n");
    return 2;
  }
  model::ModelOptions mo;
  mo.threads = o.threads;
  mo.max_tokens_per_step = std::max(256, o.streams);
  auto m = model::LlamaModel::Load(o.model, mo);
  if (!m.ok()) {
    std::fprintf(stderr, "%s\n", std::string(m.status().message()).c_str());
    return 1;
  }
  const lora::TargetTable targets = lora::TargetTable::ForModel((*m)->config());
  const int most = *std::max_element(o.adapters.begin(), o.adapters.end());
  const std::string tmp = (std::filesystem::temp_directory_path() / "kvserve_lora_bench").string();
  std::vector<std::shared_ptr<const lora::Adapter>> adapters;
  for (int a = 0; a < most; ++a) {
    const std::string dir = tmp + "/a" + std::to_string(a);
    WriteAdapter(dir, targets, o.rank, 1000 + static_cast<uint64_t>(a), o.bf16);
    auto ad = lora::Adapter::Load(dir, targets, lora::AdapterLoadOptions{o.rank});
    if (!ad.ok()) {
      std::fprintf(stderr, "%s\n", std::string(ad.status().message()).c_str());
      return 1;
    }
    adapters.push_back(*ad);
  }
  std::printf(
      "lora_bench: %s, %d threads, %d streams, rank %d, context %d, %d decode steps, %zu MiB per "
      "adapter\n",
      o.model.c_str(), (*m)->threads(), o.streams, o.rank, o.context, o.steps,
      adapters.empty() ? size_t{0} : adapters[0]->bytes() >> 20);
  std::vector<int> configs = {0};
  configs.insert(configs.end(), o.adapters.begin(), o.adapters.end());
  Rate base;
  for (int n : configs) {
    std::vector<double> wall, cpu;
    for (int r = 0; r < o.repeats; ++r) {
      const Rate rate = DecodeTokensPerSecond(**m, targets, adapters, n, o);
      wall.push_back(rate.wall);
      cpu.push_back(rate.cpu);
    }
    const Rate rate{Median(wall), Median(cpu)};
    if (n == 0) base = rate;
    const std::string label = n == 0 ? "base" : std::to_string(n) + " adapters";
    std::printf("  %-12s %8.1f tok/s wall (%.2fx base)   %8.1f tok/s CPU (%.2fx base)\n",
                label.c_str(), rate.wall, rate.wall / base.wall, rate.cpu, rate.cpu / base.cpu);
  }
  std::filesystem::remove_all(tmp);
  return 0;
}

}  // namespace
}  // namespace kvserve

int main(int argc, char** argv) { return kvserve::Main(argc, argv); }
