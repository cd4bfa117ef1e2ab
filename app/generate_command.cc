#include "app/generate_command.h"

#include <algorithm>
#include <chrono>
#include <numeric>
#include <ostream>

#include "absl/strings/str_cat.h"
#include "app/command_switches.h"
#include "app/model_loading.h"
#include "base/check.h"
#include "model/batch_builder.h"
#include "model/host_kv_buffer.h"
#include "model/llama_model.h"
#include "model/sampler.h"
#include "tokenizer/incremental_detokenizer.h"
#include "tokenizer/tokenizer.h"

namespace kvserve::app {
namespace {

// Completion of one prompt; writes text to `out` as it is produced.
struct GenerateStats {
  size_t prompt_tokens = 0;
  size_t generated = 0;
  double prefill_seconds = 0;
  double decode_seconds = 0;
  bool hit_eos = false;
};

absl::StatusOr<GenerateStats> Complete(model::LlamaModel& m, const tokenizer::Tokenizer& tok,
                                       const GenerateOptions& opts, int block_size, uint64_t seed,
                                       int64_t max_model_len, std::ostream& out) {
  using Clock = std::chrono::steady_clock;
  GenerateStats stats;
  std::vector<int32_t> prompt = tok.encode(opts.prompt, /*add_special=*/true);
  if (prompt.empty()) return absl::InvalidArgumentError("--prompt: encodes to no tokens");
  stats.prompt_tokens = prompt.size();
  const int64_t total = static_cast<int64_t>(prompt.size()) + opts.max_tokens;
  if (total > max_model_len) {
    return absl::InvalidArgumentError(absl::StrCat("prompt (", prompt.size(), " tokens) + --max-tokens ", opts.max_tokens,
                                                   " exceeds the model's context of ", max_model_len, " tokens"));
  }
  const int64_t blocks = (total + block_size - 1) / block_size;
  model::HostKvBuffer kv(m.KvLayoutFor(block_size, config::KvDtype::kFp32), blocks);
  std::vector<int32_t> table(static_cast<size_t>(blocks));
  std::iota(table.begin(), table.end(), 0);

  const int vocab = m.config().vocab_size;
  model::SamplingParams params;
  params.temperature = opts.temperature;
  params.seed = seed;
  for (int32_t id : tok.eos_ids()) params.stop_token_ids.push_back(id);
  for (int32_t id : m.config().eos_token_ids) params.stop_token_ids.push_back(id);
  std::erase_if(params.stop_token_ids, [&](int32_t id) { return id < 0 || id >= vocab; });
  KVS_RETURN_IF_ERROR(params.Validate(vocab));
  model::Sampler sampler(vocab);
  model::SamplerRng rng(seed);

  model::BatchBuilder bb(block_size);
  std::vector<float> logits(static_cast<size_t>(vocab));
  const auto t0 = Clock::now();
  const int chunk = m.max_tokens_per_step();
  for (size_t pos = 0; pos < prompt.size(); pos += static_cast<size_t>(chunk)) {
    const size_t n = std::min(prompt.size() - pos, static_cast<size_t>(chunk));
    bb.Clear();
    bb.AddSequence(std::span(prompt).subspan(pos, n), static_cast<int32_t>(pos), static_cast<int32_t>(pos), table,
                   model::LogitsWanted::kLast);
    KVS_RETURN_IF_ERROR(m.Forward(bb.batch(), kv.view(), logits));
  }
  const auto t1 = Clock::now();
  stats.prefill_seconds = std::chrono::duration<double>(t1 - t0).count();

  // The completion continues the prompt's text, so a leading space is kept.
  tokenizer::IncrementalDetokenizer detok(tok, {.skip_special = true, .at_text_start = false});
  std::vector<int32_t> output;
  for (int i = 0; i < opts.max_tokens; ++i) {
    const model::SampleResult r = sampler.Sample(logits, params, prompt, output, rng);
    if (r.is_stop) {
      stats.hit_eos = true;
      break;
    }
    output.push_back(r.token);
    out << detok.feed(r.token) << std::flush;
    if (i + 1 == opts.max_tokens) break;
    const int32_t len = static_cast<int32_t>(prompt.size() + output.size() - 1);
    bb.Clear();
    bb.AddSequence(std::span(&output.back(), 1), len, len, table, model::LogitsWanted::kLast);
    KVS_RETURN_IF_ERROR(m.Forward(bb.batch(), kv.view(), logits));
  }
  out << detok.flush() << "\n";
  stats.generated = output.size();
  stats.decode_seconds = std::chrono::duration<double>(Clock::now() - t1).count();
  return stats;
}

}  // namespace

absl::StatusOr<GenerateOptions> ParseGenerateOptions(const ParsedArgs& args) {
  GenerateOptions o;
  auto prompt = SwitchValue(args, "--prompt");
  if (!prompt) return absl::InvalidArgumentError("generate: --prompt TEXT is required");
  o.prompt = *prompt;
  if (auto v = SwitchValue(args, "--max-tokens")) {
    KVS_RETURN_IF_ERROR(ParseSwitchNumber("--max-tokens", *v, o.max_tokens));
    if (o.max_tokens < 1) return absl::InvalidArgumentError("--max-tokens: must be >= 1");
  }
  if (auto v = SwitchValue(args, "--temperature")) {
    KVS_RETURN_IF_ERROR(ParseSwitchNumber("--temperature", *v, o.temperature));
    if (!(o.temperature >= 0.0f)) return absl::InvalidArgumentError("--temperature: must be >= 0");
  }
  if (auto v = SwitchValue(args, "--seed")) {
    uint64_t seed = 0;
    KVS_RETURN_IF_ERROR(ParseSwitchNumber("--seed", *v, seed));
    o.seed = seed;
  }
  return o;
}

int RunGenerate(const ParsedArgs& args, char** envp, std::ostream& out, std::ostream& err) {
  auto opts = ParseGenerateOptions(args);
  if (!opts.ok()) {
    err << "kvserve: " << opts.status().message() << "\n";
    return kExitUsage;
  }
  LoadedModel loaded;
  const int rc = LoadModelForCommand(
      args, envp, "generate",
      [](const config::Config& cfg, const model::ModelConfig&) {
        return std::min(cfg.scheduler.max_num_batched_tokens, 512);
      },
      err, loaded);
  if (rc != kExitOk) return rc;
  const config::Config& cfg = loaded.config;
  const int64_t model_context = loaded.model->config().max_context();
  const int64_t context =
      cfg.model.max_model_len > 0 ? std::min<int64_t>(cfg.model.max_model_len, model_context) : model_context;
  auto stats = Complete(*loaded.model, *loaded.tokenizer, *opts, cfg.cache.block_size,
                        opts->seed.value_or(cfg.engine.seed), context, out);
  if (!stats.ok()) {
    err << "kvserve generate: " << stats.status().message() << "\n";
    return stats.status().code() == absl::StatusCode::kInvalidArgument ? kExitUsage : kExitFailure;
  }
  err << "[generate] " << stats->prompt_tokens << " prompt tokens in " << stats->prefill_seconds * 1e3 << " ms, "
      << stats->generated << " tokens in " << stats->decode_seconds * 1e3 << " ms"
      << (stats->generated > 0 ? absl::StrCat(" (", static_cast<int>(stats->generated / stats->decode_seconds), " tokens/s)")
                               : std::string())
      << (stats->hit_eos ? ", stopped at EOS" : "") << "\n";
  return kExitOk;
}

}  // namespace kvserve::app
