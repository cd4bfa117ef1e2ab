#include "app/eval_command.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <ostream>
#include <random>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "app/command_switches.h"
#include "app/model_loading.h"
#include "base/absl_compat.h"
#include "base/check.h"
#include "base/clock.h"
#include "cache/kv_layout.h"
#include "compression/policy_factory.h"
#include "compression/quality_eval.h"
#include "compression/key_basis.h"
#include "compression/triattention_stats.h"
#include "config/fields.h"

namespace kvserve::app {
namespace {

using config::CompressionPolicyKind;

// The passkey format of the bundled model's trainer (tools/train_tiny_model/passkey.py).
constexpr const char* kKeyTemplate = "The pass key is {k}. Remember it. {k} is the pass key.";
constexpr const char* kQuestion = "What is the pass key? The pass key is";

template <typename T>
absl::Status ParseAtLeast(const char* flag, const std::string& text, int64_t min, T& out) {
  int64_t v = 0;
  KVS_RETURN_IF_ERROR(ParseSwitchNumber<int64_t>(flag, text, v));
  if (v < min) return absl::InvalidArgumentError(absl::StrCat(flag, ": must be >= ", min));
  out = static_cast<T>(v);
  return absl::OkStatus();
}

std::string ReadFile(const std::string& path, bool& ok) {
  std::ifstream in(path, std::ios::binary);
  ok = static_cast<bool>(in);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string KeyText(int64_t k) {
  std::string s = kKeyTemplate;
  const std::string key = std::to_string(k);
  for (size_t p; (p = s.find("{k}")) != std::string::npos;) s.replace(p, 3, key);
  return s;
}

struct PasskeyItem {
  std::vector<int32_t> prompt;   // prefill mode: the whole context; decode mode: BOS
  std::vector<int32_t> forced;   // decode mode: filler + key + filler + question
  std::vector<int32_t> answer;
  std::vector<int32_t> key_positions;  // absolute positions of the key's answer tokens (watched)
};

struct Row {
  std::string policy;
  int64_t budget = 0;
  double ppl = 0.0;
  double ppl_ratio = 1.0;   // tokens seen / peak held, perplexity windows (mean)
  double bytes_per_token = 0.0;  // peak KV bytes (scales included) / tokens seen, perplexity windows (mean)
  int passkey_ok = 0;
  int passkey_n = 0;
  double passkey_ratio = 1.0;
  double key_held = 1.0;    // mean fraction of the key's answer tokens still in the KV at the question
  double seconds = 0.0;
};

// A policy row of the table: a kind plus, for the TriAttention variants, the PolicyParams
// option it diagnoses.
struct Variant {
  std::string label;
  CompressionPolicyKind kind = CompressionPolicyKind::kFull;
  bool ablation = false;  // a TriAttention variant (run at --ablation-budgets)
  compression::TriSelection selection = compression::TriSelection::kCrossLayer;
  compression::TriScoreTerms terms = compression::TriScoreTerms::kBoth;
  compression::TriOffsetPool pool = compression::TriOffsetPool::kMean;
  bool recent_window = false;  // keep the vLLM port's recent window despite the protected prompt
};

absl::StatusOr<Variant> ParseVariant(const std::string& name) {
  Variant v;
  v.label = name;
  v.kind = CompressionPolicyKind::kTriAttention;
  v.ablation = true;
  if (name == "triattention-perlayer") v.selection = compression::TriSelection::kPerLayer;
  else if (name == "triattention-trig") v.terms = compression::TriScoreTerms::kTrigOnly;
  else if (name == "triattention-norm") v.terms = compression::TriScoreTerms::kNormOnly;
  else if (name == "triattention-max") v.pool = compression::TriOffsetPool::kMax;
  else if (name == "triattention-window") v.recent_window = true;
  else {
    auto kind = config::ParseCompressionPolicy(name);
    if (!kind || *kind == CompressionPolicyKind::kFull || *kind == CompressionPolicyKind::kAuto) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--policies: '", name,
          "' is not one of triattention, streamingllm, snapkv, h2o, triattention-perlayer, triattention-trig, "
          "triattention-norm, triattention-max, triattention-window"));
    }
    v.kind = *kind;
    v.ablation = false;
  }
  return v;
}

// Prefill mode: perplexity windows protect their BOS (the attention sink every policy would
// otherwise be free to drop); the passkey prompt is the context under test and is not
// protected; rounds also run between prefill chunks. Decode mode: the prompt (BOS) is
// protected and rounds run after decode steps only (the defaults).
compression::PolicyParams ParamsFor(const Variant& v, int64_t budget, const EvalCommandOptions& o,
                                    const config::Config& cfg, int64_t prompt_len, bool protect_prompt) {
  compression::PolicyParams p = compression::ParamsFromConfig(cfg.compression, v.kind, prompt_len);
  p.protect_prompt = protect_prompt;
  p.compress_prefill = !o.decode_mode;
  p.budget = budget;
  p.divide_length = o.divide_length;
  p.tri_selection = v.selection;
  p.tri_terms = v.terms;
  p.tri_offset_pool = v.pool;
  if (v.kind == CompressionPolicyKind::kTriAttention) {
    for (size_t t = 0; t < o.demote.size(); ++t) p.demote_tokens[t] = o.demote[t].second;
    if (o.demote_lowrank) p.demote_tokens[o.demote.size()] = *o.demote_lowrank;
  }
  // The vLLM port's guard: the last min(128, (B - lo) / 2) slots always kept.
  if (v.recent_window) {
    p.window = std::min<int64_t>(compression::kDefaultTriRecentWindow,
                                 std::max<int64_t>(0, (budget - compression::FirstEvictableSlot(p)) / 2));
  }
  // Every policy compresses back to the same budget (streamingllm: sinks + recent = B).
  // snapkv's observation window must leave room to select: at most a quarter of the budget.
  if (v.kind == CompressionPolicyKind::kSnapKv) {
    p.window = std::max<int64_t>(1, std::min<int64_t>(compression::RecentWindow(p), budget / 4));
  }
  return p;
}

}  // namespace

absl::StatusOr<EvalCommandOptions> ParseEvalOptions(const ParsedArgs& args) {
  EvalCommandOptions o;
  auto text = SwitchValue(args, "--text");
  if (!text) return absl::InvalidArgumentError("eval: --text FILE is required (held-out text, not the training text)");
  o.text_path = *text;
  o.filler_path = SwitchValue(args, "--filler-text").value_or(o.text_path);
  if (auto v = SwitchValue(args, "--passkey")) KVS_RETURN_IF_ERROR(ParseAtLeast("--passkey", *v, 0, o.passkey_prompts));
  if (auto v = SwitchValue(args, "--filler")) KVS_RETURN_IF_ERROR(ParseAtLeast("--filler", *v, 1, o.filler_tokens));
  if (auto v = SwitchValue(args, "--divide-length")) {
    KVS_RETURN_IF_ERROR(ParseAtLeast("--divide-length", *v, 0, o.divide_length));
  }
  if (auto v = SwitchValue(args, "--mode")) {
    if (*v != "prefill" && *v != "decode") {
      return absl::InvalidArgumentError(absl::StrCat("--mode: '", *v, "' is not prefill or decode"));
    }
    o.decode_mode = *v == "decode";
  }
  if (auto v = SwitchValue(args, "--ppl-sequences")) {
    KVS_RETURN_IF_ERROR(ParseAtLeast("--ppl-sequences", *v, 0, o.ppl_sequences));
  }
  if (auto v = SwitchValue(args, "--ablation-budgets")) {
    for (absl::string_view b : absl::StrSplit(*v, ',')) {
      int64_t x = 0;
      KVS_RETURN_IF_ERROR(ParseAtLeast("--ablation-budgets", std::string(b), 8, x));
      o.ablation_budgets.push_back(x);
    }
  }
  if (auto v = SwitchValue(args, "--chunk")) KVS_RETURN_IF_ERROR(ParseAtLeast("--chunk", *v, 1, o.chunk));
  if (auto v = SwitchValue(args, "--ppl-tokens")) KVS_RETURN_IF_ERROR(ParseAtLeast("--ppl-tokens", *v, 0, o.ppl_tokens));
  if (auto v = SwitchValue(args, "--ppl-window")) KVS_RETURN_IF_ERROR(ParseAtLeast("--ppl-window", *v, 2, o.ppl_window));
  if (auto v = SwitchValue(args, "--seed")) KVS_RETURN_IF_ERROR(ParseSwitchNumber("--seed", *v, o.seed));
  o.out_tsv = SwitchValue(args, "--out-tsv").value_or("");
  if (auto v = SwitchValue(args, "--budgets")) {
    o.budgets.clear();
    for (absl::string_view b : absl::StrSplit(*v, ',')) {
      int64_t x = 0;
      KVS_RETURN_IF_ERROR(ParseAtLeast("--budgets", std::string(b), 8, x));
      o.budgets.push_back(x);
    }
  }
  if (auto v = SwitchValue(args, "--demote")) {
    for (absl::string_view part : absl::StrSplit(*v, ',')) {
      const std::vector<std::string> kv = absl::StrSplit(part, ':');
      if (o.demote_lowrank) return absl::InvalidArgumentError("--demote: lowrank must be the last tier");
      if (kv.size() == 2 && kv[0] == "lowrank") {
        int64_t tokens = 0;
        KVS_RETURN_IF_ERROR(ParseAtLeast("--demote", kv[1], 0, tokens));
        o.demote_lowrank = tokens;
        continue;
      }
      const auto d = kv.size() == 2 ? config::ParseKvDtype(kv[0]) : std::nullopt;
      int64_t tokens = 0;
      if (!d) {
        return absl::InvalidArgumentError(absl::StrCat("--demote: '", part, "' is not DTYPE:TOKENS (e.g. int8:64)"));
      }
      KVS_RETURN_IF_ERROR(ParseAtLeast("--demote", kv[1], 0, tokens));
      if (!o.demote.empty() && cache::KvDtypeBits(*d) >= cache::KvDtypeBits(o.demote.back().first)) {
        return absl::InvalidArgumentError("--demote: list the tiers from highest precision to lowest");
      }
      o.demote.emplace_back(*d, tokens);
    }
    if (o.demote.size() + (o.demote_lowrank ? 1 : 0) > static_cast<size_t>(compression::kMaxDemoteTiers)) {
      return absl::InvalidArgumentError("--demote: too many tiers");
    }
  }
  if (auto v = SwitchValue(args, "--policies")) {
    o.policies.clear();
    for (absl::string_view name : absl::StrSplit(*v, ',')) {
      KVS_ASSIGN_OR_RETURN(const Variant variant, ParseVariant(std::string(name)));
      o.policies.push_back(variant.label);
    }
  }
  return o;
}

int RunEval(const ParsedArgs& args, char** envp, std::ostream& out, std::ostream& err) {
  auto opts = ParseEvalOptions(args);
  if (!opts.ok()) {
    err << "kvserve: " << opts.status().message() << "\n";
    return kExitUsage;
  }
  const EvalCommandOptions& o = *opts;
  LoadedModel loaded;
  const int chunk = o.chunk;
  const int rc = LoadModelForCommand(
      args, envp, "eval", [chunk](const config::Config&, const model::ModelConfig&) { return chunk; }, err, loaded);
  if (rc != kExitOk) return rc;
  const tokenizer::Tokenizer& tok = *loaded.tokenizer;
  model::LlamaModel& m = *loaded.model;

  bool ok_text = false, ok_filler = false;
  const std::string text = ReadFile(o.text_path, ok_text);
  const std::string filler_text = ReadFile(o.filler_path, ok_filler);
  if (!ok_text || !ok_filler) {
    err << "kvserve eval: " << (ok_text ? o.filler_path : o.text_path) << ": cannot open\n";
    return kExitFailure;
  }
  const std::vector<int32_t> text_ids = tok.encode(text, /*add_special=*/false);
  const std::vector<int32_t> filler_ids = tok.encode(filler_text, /*add_special=*/false);
  const int32_t bos = tok.bos_id().value_or(1);
  if (static_cast<int64_t>(text_ids.size()) < o.ppl_tokens || static_cast<int64_t>(filler_ids.size()) <= o.filler_tokens) {
    err << "kvserve eval: the text holds " << text_ids.size() << " tokens and the filler text " << filler_ids.size()
        << "; need at least --ppl-tokens " << o.ppl_tokens << " and --filler " << o.filler_tokens << "\n";
    return kExitUsage;
  }

  // TriAttention statistics beside the model (the file `serve` loads by default).
  std::unique_ptr<compression::TriAttentionStats> stats;
  const std::string stats_path = compression::StatsPathFor(loaded.config.compression.stats_path, loaded.dir);
  std::vector<Variant> variants;
  for (const std::string& name : o.policies) {
    auto v = ParseVariant(name);
    KVS_CHECK(v.ok(), "policies were validated by ParseEvalOptions");
    variants.push_back(*v);
  }
  const bool need_stats = std::any_of(variants.begin(), variants.end(),
                                      [](const Variant& v) { return v.kind == CompressionPolicyKind::kTriAttention; });
  if (need_stats) {
    auto s = compression::LoadStatsForModel(stats_path, m.config(), m.rope_inv_freq());
    if (!s.ok()) {
      err << "kvserve eval: " << s.status().message() << "\n";
      return kExitFailure;
    }
    stats = std::make_unique<compression::TriAttentionStats>(std::move(*s));
  }
  base::SteadyClock clock;
  const compression::PolicyContext ctx = compression::ContextFor(m.config(), m.rope_inv_freq(), stats.get(), &clock);

  // Passkey prompts, deterministic in --seed.
  std::mt19937_64 rng(o.seed);
  const std::vector<int32_t> question = tok.encode(kQuestion, false);
  std::vector<PasskeyItem> items;
  for (int i = 0; i < o.passkey_prompts; ++i) {
    const int64_t k = std::uniform_int_distribution<int64_t>(10000, 99999)(rng);
    const size_t off = std::uniform_int_distribution<size_t>(0, filler_ids.size() - o.filler_tokens)(rng);
    const double depth = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
    const size_t d = static_cast<size_t>(depth * o.filler_tokens);
    PasskeyItem it;
    std::vector<int32_t>& body = o.decode_mode ? it.forced : it.prompt;
    it.prompt.push_back(bos);
    body.insert(body.end(), filler_ids.begin() + off, filler_ids.begin() + off + d);
    const std::vector<int32_t> key = tok.encode(KeyText(k), false);
    it.answer = tok.encode(std::to_string(k), false);
    // Watched: the first occurrence of the answer's tokens inside the key sentence (what the
    // question's "The pass key is" copies from), or the whole sentence if the tokenizer
    // splits it differently. Positions: decode mode forces `body` after the BOS prompt;
    // prefill mode's body is the prompt.
    const int32_t key_begin = static_cast<int32_t>((o.decode_mode ? it.prompt.size() : 0) + body.size());
    const auto hit = std::search(key.begin(), key.end(), it.answer.begin(), it.answer.end());
    const size_t w_begin = hit == key.end() ? 0 : static_cast<size_t>(hit - key.begin());
    const size_t w_end = hit == key.end() ? key.size() : w_begin + it.answer.size();
    for (size_t j = w_begin; j < w_end; ++j) it.key_positions.push_back(key_begin + static_cast<int32_t>(j));
    body.insert(body.end(), key.begin(), key.end());
    body.insert(body.end(), filler_ids.begin() + off + d, filler_ids.begin() + off + o.filler_tokens);
    body.insert(body.end(), question.begin(), question.end());
    items.push_back(std::move(it));
  }
  if (o.decode_mode && static_cast<int64_t>(text_ids.size()) < o.ppl_sequences * o.ppl_window) {
    err << "kvserve eval: the text holds " << text_ids.size() << " tokens; --ppl-sequences " << o.ppl_sequences
        << " of --ppl-window " << o.ppl_window << " need more\n";
    return kExitUsage;
  }

  compression::EvalOptions eo;
  eo.chunk = o.chunk;
  eo.block_size = loaded.config.cache.block_size;
  eo.kv_dtype = loaded.config.cache.kv_dtype;
  eo.k_dtype = loaded.config.cache.k_dtype;
  eo.v_dtype = loaded.config.cache.v_dtype;
  eo.int4_group = loaded.config.cache.kv_int4_group;
  for (const auto& [dtype, tokens] : o.demote) eo.demote_dtypes.push_back(dtype);
  const int pool_bits = std::min(cache::KvDtypeBits(config::EffectiveKDtype(loaded.config.cache)),
                                 cache::KvDtypeBits(config::EffectiveVDtype(loaded.config.cache)));
  if (!o.demote.empty() && cache::KvDtypeBits(o.demote.front().first) >= pool_bits) {
    err << "kvserve eval: --demote: tiers must hold fewer bits than the pool's K and V (" << pool_bits << ")\n";
    return kExitUsage;
  }

  std::unique_ptr<compression::KeyBasis> key_basis;
  if (o.demote_lowrank) {
    const config::CacheConfig& cc = loaded.config.cache;
    if (cc.lowrank_key_rank <= 0 || cc.lowrank_key_rank >= m.config().head_dim) {
      err << "kvserve eval: --demote lowrank needs --cache.lowrank_key_rank in [1, head_dim = " << m.config().head_dim
          << ")\n";
      return kExitUsage;
    }
    const std::string path = compression::KeyBasisPathFor(loaded.config.compression.key_basis_path, loaded.dir);
    auto b = compression::LoadKeyBasisForModel(path, m.config(), m.rope_inv_freq());
    if (!b.ok()) {
      err << "kvserve eval: " << b.status().message() << "\n";
      return kExitFailure;
    }
    key_basis = std::make_unique<compression::KeyBasis>(std::move(*b));
    eo.lowrank_key_rank = cc.lowrank_key_rank;
    eo.lowrank_k_dtype = cc.lowrank_k_dtype;
    eo.lowrank_v_dtype = cc.lowrank_v_dtype;
    eo.lowrank_query_aware = cc.lowrank_query_aware;
    eo.key_basis = key_basis.get();
  }

  Variant full;
  full.label = "full";
  std::vector<std::pair<Variant, int64_t>> configs{{full, 0}};
  for (const Variant& v : variants) {
    const std::vector<int64_t>& budgets = v.ablation && !o.ablation_budgets.empty() ? o.ablation_budgets : o.budgets;
    for (int64_t b : budgets) configs.emplace_back(v, b);
  }
  std::vector<Row> rows;
  for (const auto& [variant, budget] : configs) {
    const auto t0 = std::chrono::steady_clock::now();
    Row row;
    row.policy = variant.label;
    row.budget = budget;
    double nll = 0.0, ratio_sum = 0.0, bytes_sum = 0.0;
    int64_t scored = 0, windows = 0;
    auto check = [&](const compression::PolicyParams& params) {
      absl::Status st = compression::ValidateParams(params);
      if (!st.ok()) err << "kvserve eval: " << row.policy << " budget " << row.budget << ": " << st.message() << "\n";
      return st.ok();
    };
    if (o.decode_mode) {
      // Decode mode: --ppl-sequences sequences of BOS + ppl_window forced tokens, all scored.
      const std::vector<int32_t> prompt{bos};
      const auto params = ParamsFor(variant, budget, o, loaded.config, /*prompt_len=*/1, /*protect_prompt=*/true);
      if (!check(params)) return kExitUsage;
      for (int s = 0; s < o.ppl_sequences; ++s) {
        const std::span<const int32_t> forced(text_ids.data() + s * o.ppl_window, static_cast<size_t>(o.ppl_window));
        auto r = compression::EvalDecodePerplexity(m, &ctx, params, prompt, forced, eo);
        if (!r.ok()) {
          err << "kvserve eval: " << r.status().message() << "\n";
          return kExitFailure;
        }
        nll += r->nll;
        scored += r->scored;
        ratio_sum += r->stats.compression_ratio();
        bytes_sum += r->stats.bytes_per_token();
        ++windows;
      }
    } else {
      for (int64_t begin = 0; begin + 1 < o.ppl_tokens; begin += o.ppl_window - 1) {
        std::vector<int32_t> window{bos};
        const int64_t end = std::min<int64_t>(o.ppl_tokens, begin + o.ppl_window - 1);
        window.insert(window.end(), text_ids.begin() + begin, text_ids.begin() + end);
        if (window.size() < 2) break;
        const auto params = ParamsFor(variant, budget, o, loaded.config, /*prompt_len=*/1, /*protect_prompt=*/true);
        if (!check(params)) return kExitUsage;
        auto r = compression::EvalPerplexity(m, &ctx, params, window, eo);
        if (!r.ok()) {
          err << "kvserve eval: " << r.status().message() << "\n";
          return kExitFailure;
        }
        nll += r->nll;
        scored += r->scored;
        ratio_sum += r->stats.compression_ratio();
        bytes_sum += r->stats.bytes_per_token();
        ++windows;
      }
    }
    row.ppl = scored > 0 ? std::exp(nll / static_cast<double>(scored)) : 0.0;
    row.ppl_ratio = windows > 0 ? ratio_sum / static_cast<double>(windows) : 1.0;
    row.bytes_per_token = windows > 0 ? bytes_sum / static_cast<double>(windows) : 0.0;
    double pk_ratio = 0.0, key_held = 0.0;
    for (const auto& it : items) {
      absl::StatusOr<compression::PasskeyResult> r;
      if (o.decode_mode) {
        const auto params = ParamsFor(variant, budget, o, loaded.config, static_cast<int64_t>(it.prompt.size()),
                                      /*protect_prompt=*/true);
        if (!check(params)) return kExitUsage;
        r = compression::EvalDecodePasskey(m, &ctx, params, it.prompt, it.forced, it.answer, eo, it.key_positions);
      } else {
        const auto params = ParamsFor(variant, budget, o, loaded.config, static_cast<int64_t>(it.prompt.size()),
                                      /*protect_prompt=*/false);
        if (!check(params)) return kExitUsage;
        r = compression::EvalPasskey(m, &ctx, params, it.prompt, it.answer, eo, it.key_positions);
      }
      if (!r.ok()) {
        err << "kvserve eval: " << r.status().message() << "\n";
        return kExitFailure;
      }
      row.passkey_ok += r->correct ? 1 : 0;
      ++row.passkey_n;
      pk_ratio += r->stats.compression_ratio();
      key_held += r->watched_held;
    }
    row.passkey_ratio = row.passkey_n > 0 ? pk_ratio / row.passkey_n : 1.0;
    row.key_held = row.passkey_n > 0 ? key_held / row.passkey_n : 1.0;
    row.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    err << absl::StrFormat("[eval] %-22s B=%-4d ppl %.3f (ratio %.2fx, %.1f KV bytes/token)  passkey %d/%d (ratio "
                           "%.2fx)  %.1f s\n",
                           row.policy, budget, row.ppl, row.ppl_ratio, row.bytes_per_token, row.passkey_ok,
                           row.passkey_n, row.passkey_ratio, row.seconds);
    rows.push_back(row);
  }

  const double full_ppl = rows.front().ppl;
  const double full_pk = rows.front().passkey_n > 0 ? static_cast<double>(rows.front().passkey_ok) / rows.front().passkey_n : 0;
  out << "| policy | budget | perplexity | vs full | KV ratio (ppl) | KV bytes/token (ppl) | passkey | KV ratio "
         "(passkey) | key held |\n"
      << "|---|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const Row& r : rows) {
    const double acc = r.passkey_n > 0 ? static_cast<double>(r.passkey_ok) / r.passkey_n : 0.0;
    out << absl::StrFormat("| %s | %s | %.3f | %+.2f%% | %.2fx | %.1f | %d/%d (%.0f%%) | %.2fx | %.0f%% |\n", r.policy,
                           r.budget > 0 ? std::to_string(r.budget) : std::string("-"), r.ppl,
                           100.0 * (r.ppl / full_ppl - 1.0), r.ppl_ratio, r.bytes_per_token, r.passkey_ok,
                           r.passkey_n, 100.0 * acc,
                           r.passkey_ratio, 100.0 * r.key_held);
  }
  const std::string slack = o.divide_length > 0 ? std::to_string(o.divide_length) : "min(128, B/4)";
  if (o.decode_mode) {
    out << absl::StrFormat("\nfull: perplexity %.3f, passkey accuracy %.0f%%. Decode-time (teacher forcing, one decode "
                           "step per token, rounds after decode steps): %d passkey sequences of %d filler tokens with "
                           "the key at a random depth, perplexity over %d sequences of %d tokens; prompt = BOS "
                           "(protected); slack %s; KV ratio = tokens written / peak slots per sequence; key held = share of the "
                           "key's answer tokens (their first occurrence) still in the KV, mean over layers, KV heads "
                           "and sequences, when the question has been read\n",
                           full_ppl, 100.0 * full_pk, o.passkey_prompts, o.filler_tokens, o.ppl_sequences,
                           static_cast<int>(o.ppl_window), slack);
  } else {
    out << absl::StrFormat("\nfull: perplexity %.3f, passkey accuracy %.0f%%; %d passkey prompts of %d filler tokens, "
                           "perplexity over %d tokens in windows of %d (BOS protected), chunk %d, slack %s, passkey "
                           "prompt unprotected, rounds between prefill chunks; key held = share of the key's answer tokens "
                           "(first occurrence) still in the KV when the answer starts\n",
                           full_ppl, 100.0 * full_pk, o.passkey_prompts, o.filler_tokens, static_cast<int>(o.ppl_tokens),
                           static_cast<int>(o.ppl_window), o.chunk, slack);
  }
  if (!o.out_tsv.empty()) {
    std::ofstream tsv(o.out_tsv);
    tsv << "policy\tbudget\tppl\tppl_ratio\tpasskey_acc\tpasskey_ratio\tkey_held\tbytes_per_token\n";
    for (const Row& r : rows) {
      tsv << r.policy << "\t" << r.budget << "\t" << r.ppl << "\t" << r.ppl_ratio << "\t"
          << (r.passkey_n > 0 ? static_cast<double>(r.passkey_ok) / r.passkey_n : 0.0) << "\t" << r.passkey_ratio
          << "\t" << r.key_held << "\t" << r.bytes_per_token << "\n";
    }
    if (!tsv) {
      err << "kvserve eval: --out-tsv " << o.out_tsv << ": cannot write\n";
      return kExitFailure;
    }
  }
  return kExitOk;
}

}  // namespace kvserve::app
