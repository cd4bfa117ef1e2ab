// Speculative decoding benchmark (not a test: it prints figures). Decode tokens/s through the
// whole engine (scheduler, runner, sampling) with and without speculation (n-gram, or a draft
// model with --draft-model), at batch 1 and batch 8, on these workloads:
//
//   copy  greedy continuations of a prompt that repeats a 32-token phrase four times: the
//         work n-gram speculation is for (and a random-weight model's greedy output settles
//         into loops, which the proposer also catches);
//   free  sampling at temperature 1 from the same model: guesses are almost never right, so
//         this measures what speculation costs where it cannot pay (the adaptive switch-off).
//
//   speculative_bench [--model DIR] [--threads N] [--tokens T] [--repeats R] [--num-tokens K]
//                     [--work copy|free|both] [--batch 1|8] [--only spec|plain]
//
// --num-tokens is the most guesses per draft (the adaptive draft length picks k up to it).
//
// Decode tokens/s counts the tokens after each request's first one over the time from the
// last first token to the end (prefill excluded), per wall second and per second of process
// CPU time ("tok/cs": on a shared machine, with --threads 1, what an idle core would do). Reports
// the median of R runs and the measured acceptance (accepted guesses / guesses) and tokens per
// verify step. Default model: /tmp/spec_llama125m, written by `bench/make_random_llama.py
// /tmp/spec_llama125m`.
#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench/cpu_clock.h"
#include "engine/engine_factory.h"
#include "speculative/spec_params.h"
#include "tokenizer/tokenizer.h"

namespace kvserve {
namespace {

using Clock = std::chrono::steady_clock;

double CpuNow() { return bench::ProcessCpuSeconds(); }

class SpecCounter : public engine::EngineObserver {
 public:
  void OnStep(const engine::StepStats& s) override {
    drafts += s.spec_drafts;
    draft_tokens += s.spec_draft_tokens;
    accepted += s.spec_accepted_tokens;
  }
  std::atomic<int64_t> drafts{0}, draft_tokens{0}, accepted{0};
};

struct Figures {
  double tok_s = 0;
  double tok_cpu_s = 0;  // per second of process CPU time (what an idle core would do, 1 thread)
  double acceptance = 0;
  double drafts_per_token = 0;
  double guesses_per_draft = 0;  // the adaptive draft length's mean k
};

std::vector<int32_t> CopyPrompt(int salt) {
  std::vector<int32_t> phrase;
  for (int64_t i = 0; i < 32; ++i) {
    const int64_t h = (i * 7919 + static_cast<int64_t>(salt) * 104729) % 30000;
    phrase.push_back(static_cast<int32_t>(100 + (h + 30000) % 30000));
  }
  std::vector<int32_t> p{1};
  for (int r = 0; r < 4; ++r) p.insert(p.end(), phrase.begin(), phrase.end());
  return p;
}

enum class Work { kCopy, kFree, kText };

// Window `index` (48 tokens after a BOS) of the held-out text's token ids.
std::vector<int32_t> TextPrompt(const std::vector<int32_t>& text, int index) {
  constexpr size_t kLen = 48;
  std::vector<int32_t> p{1};
  const size_t windows = text.size() / kLen;
  const size_t start = (static_cast<size_t>(index) * 7 % windows) * kLen;
  p.insert(p.end(), text.begin() + static_cast<std::ptrdiff_t>(start),
           text.begin() + static_cast<std::ptrdiff_t>(start + kLen));
  return p;
}

Figures RunOnce(engine::ServingEngine& e, SpecCounter& c, Work work,
                const std::vector<int32_t>& text, int batch, int tokens, int run) {
  const bool copy = work != Work::kFree;  // greedy
  const int64_t d0 = c.drafts, t0 = c.draft_tokens, a0 = c.accepted;
  std::vector<std::shared_ptr<engine::TokenStream>> streams;
  for (int b = 0; b < batch; ++b) {
    engine::RequestSpec r;
    r.request_id = "r" + std::to_string(run) + "_" + std::to_string(b);
    r.prompt_tokens =
        work == Work::kText ? TextPrompt(text, b + 8 * (run + 1)) : CopyPrompt(b + 1000 * run);
    r.max_tokens = tokens;
    r.ignore_eos = true;
    r.sampling.temperature = copy ? 0.0f : 1.0f;
    r.sampling.seed = static_cast<uint64_t>(run * 100 + b);
    auto s = e.Submit(r);
    if (!s.ok()) {
      std::fprintf(stderr, "submit: %s\n", std::string(s.status().message()).c_str());
      std::exit(1);
    }
    streams.push_back(*s);
  }
  std::vector<int> got(static_cast<size_t>(batch), 0);
  Clock::time_point last_first{};
  double cpu_first = 0;
  size_t done = 0;
  while (done < streams.size()) {
    done = 0;
    for (size_t i = 0; i < streams.size(); ++i) {
      if (streams[i]->done()) {
        ++done;
        continue;
      }
      auto ev = streams[i]->pop_wait(std::chrono::milliseconds(1));
      if (!ev) continue;
      if (got[i] == 0 && !ev->token_ids.empty()) {
        last_first = std::max(last_first, Clock::now());
        cpu_first = CpuNow();
      }
      got[i] += static_cast<int>(ev->token_ids.size());
    }
  }
  const double secs = std::chrono::duration<double>(Clock::now() - last_first).count();
  const double cpu_secs = CpuNow() - cpu_first;
  int64_t decoded = 0;
  for (int g : got) decoded += g - 1;
  Figures f;
  f.tok_s = static_cast<double>(decoded) / secs;
  f.tok_cpu_s = static_cast<double>(decoded) / cpu_secs;
  const int64_t dt = c.draft_tokens - t0;
  f.acceptance = dt > 0 ? static_cast<double>(c.accepted - a0) / static_cast<double>(dt) : 0.0;
  f.guesses_per_draft =
      static_cast<double>(dt) / static_cast<double>(std::max<int64_t>(1, c.drafts - d0));
  f.drafts_per_token =
      static_cast<double>(c.drafts - d0) / static_cast<double>(std::max<int64_t>(1, decoded));
  return f;
}

int Main(int argc, char** argv) {
  std::string model = "/tmp/spec_llama125m";
  int threads = 0, tokens = 128, repeats = 3, k = 4, only_batch = 0;
  std::string work = "both", draft_model, text_file;
  // --only spec|plain: run one side alone (to profile it, e.g. under `perf record`).
  std::string only;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--model")
      model = argv[i + 1];
    else if (a == "--threads")
      threads = std::atoi(argv[i + 1]);
    else if (a == "--tokens")
      tokens = std::atoi(argv[i + 1]);
    else if (a == "--repeats")
      repeats = std::atoi(argv[i + 1]);
    else if (a == "--num-tokens")
      k = std::atoi(argv[i + 1]);
    else if (a == "--work")
      work = argv[i + 1];
    else if (a == "--batch")
      only_batch = std::atoi(argv[i + 1]);
    else if (a == "--draft-model")
      draft_model = argv[i + 1];
    else if (a == "--text")
      text_file = argv[i + 1];
    else if (a == "--only")
      only = argv[i + 1];
  }
  std::vector<int32_t> text;
  if (work == "text") {
    auto tok = tokenizer::LoadTokenizerDir(model);
    std::FILE* f = std::fopen(text_file.c_str(), "rb");
    if (!tok.ok() || f == nullptr) {
      std::fprintf(stderr, "--work text needs --text FILE and a model with a tokenizer\n");
      return 1;
    }
    std::string body;
    char buf[4096];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) body.append(buf, n);
    std::fclose(f);
    text = (*tok)->encode(body, /*add_special=*/false);
    if (text.size() < 48) {
      std::fprintf(stderr, "--text: fewer than 48 tokens\n");
      return 1;
    }
  }
  const char* method = draft_model.empty() ? "ngram" : "draft";
  std::printf(
      "model %s, threads %d, %d tokens per request, median of %d, k <= %d, row cost measured at start-up "
      "(at least %g), %s%s\n",
      model.c_str(), threads, tokens, repeats, k, speculative::kDefaultRowCost, method,
      draft_model.empty() ? "" : (" " + draft_model).c_str());
  std::printf("%-5s %5s | %12s %8s tok/s %8s | %12s %8s tok/cs %8s | %10s %12s %13s\n", "work",
              "batch", "plain tok/s", method, "speedup", "plain tok/cs", method, "speedup",
              "acceptance", "drafts/token", "guesses/draft");
  for (const Work w : {Work::kCopy, Work::kFree, Work::kText}) {
    const char* name = w == Work::kCopy ? "copy" : w == Work::kFree ? "free" : "text";
    if (!(work == name || (work == "both" && w != Work::kText))) continue;
    for (const int batch : {1, 8}) {
      if (only_batch != 0 && batch != only_batch) continue;
      std::vector<double> plain, spec, plain_cpu, spec_cpu, acc, dpt, gpd;
      for (const bool speculate : {false, true}) {
        if ((only == "spec" && !speculate) || (only == "plain" && speculate)) continue;
        config::Config cfg;
        cfg.engine.threads = threads;
        cfg.cache.kv_bytes = 512ull << 20;
        cfg.cache.enable_prefix_caching = false;  // every run computes its prompt
        if (speculate) {
          cfg.speculative.method = draft_model.empty() ? config::SpeculativeMethod::kNgram
                                                       : config::SpeculativeMethod::kDraft;
          cfg.speculative.draft_model = draft_model;
          cfg.speculative.num_tokens = k;
        }
        SpecCounter counter;
        engine::EngineDeps deps;
        deps.observer = &counter;
        auto e = engine::CreateEngine(cfg, model, std::move(deps));
        if (!e.ok()) {
          std::fprintf(stderr, "engine: %s\n", std::string(e.status().message()).c_str());
          return 1;
        }
        RunOnce(**e, counter, w, text, batch, 16, -1);  // warm-up
        for (int r = 0; r < repeats; ++r) {
          const Figures f = RunOnce(**e, counter, w, text, batch, tokens, r);
          (speculate ? spec : plain).push_back(f.tok_s);
          (speculate ? spec_cpu : plain_cpu).push_back(f.tok_cpu_s);
          if (speculate) {
            acc.push_back(f.acceptance);
            dpt.push_back(f.drafts_per_token);
            gpd.push_back(f.guesses_per_draft);
          }
        }
      }
      auto median = [](std::vector<double> v) {
        std::sort(v.begin(), v.end());
        return v.empty() ? 0.0 : v[v.size() / 2];
      };
      std::printf("%-5s %5d | %12.1f %12.1f %7.2fx | %12.1f %12.1f %7.2fx | %10.2f %12.2f %13.2f\n",
                  name, batch, median(plain), median(spec), median(spec) / median(plain),
                  median(plain_cpu), median(spec_cpu), median(spec_cpu) / median(plain_cpu),
                  median(acc), median(dpt), median(gpd));
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace
}  // namespace kvserve

int main(int argc, char** argv) { return kvserve::Main(argc, argv); }
