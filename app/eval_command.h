// `kvserve eval --text FILE [--model DIR] [...]`: the quality of each KV compression policy
// on the model (compression/quality_eval.h): held-out perplexity in windows of --ppl-window
// tokens over the first --ppl-tokens tokens of the text, and passkey retrieval accuracy on
// --passkey prompts (the key at a uniformly random depth of --filler tokens of the text),
// for `full` and for every policy at every budget. Prints a Markdown table on stdout and,
// with --out-tsv, one line per row for plotting (tools/eval_compression.sh).
//
// --mode prefill (default): the passkey prompt is the context under test, so it is NOT
// protected (protect_prompt=false); perplexity windows protect their BOS.
//
// --mode decode (issue 15, the setting TriAttention is built for): teacher forcing one decode
// step at a time (compression/quality_eval.h), so rounds run as during a long generation.
// The prompt is BOS alone (protected); the passkey sequence (filler with the key at a random
// depth, then the question) and --ppl-sequences held-out sequences of --ppl-window tokens are
// forced token by token; the KV ratio is tokens written / peak slots of each sequence (all
// sequences of a row have the same length). --policies also takes the TriAttention variants
// triattention-perlayer, triattention-trig, triattention-norm, triattention-max and
// triattention-window (the vLLM port's recent window kept) (run at --ablation-budgets).
//
// --demote int8:64,int4:128 (issue 18): every triattention row also keeps that many tokens in
// demotion tiers of those precisions (highest first) instead of evicting them; the KV bytes
// per token count the tiers' blocks from the first token on. `lowrank:N` (last) adds the
// low-rank key tier of cache.lowrank_key_rank / lowrank_k_dtype / lowrank_v_dtype /
// lowrank_query_aware (the config also wants cache.demote_kv_bytes > 0 with a rank), with the
// basis at compression.key_basis_path (default <model>/key_basis.bin).
#pragma once

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "app/cli.h"
#include "config/config.h"

namespace kvserve::app {

inline constexpr const char* kEvalSwitches[] = {
    "--text=",  "--filler-text=", "--passkey=", "--filler=", "--budgets=",   "--policies=", "--divide-length=",
    "--chunk=", "--ppl-tokens=",  "--ppl-window=", "--seed=", "--out-tsv=", "--mode=", "--ppl-sequences=",
    "--ablation-budgets=", "--demote="};

struct EvalCommandOptions {
  std::string text_path;
  std::string filler_path;  // default: text_path
  int passkey_prompts = 100;
  int filler_tokens = 1024;
  std::vector<int64_t> budgets{64, 128, 256, 512};
  // Policy names: triattention, streamingllm, snapkv, h2o, and (decode mode) the TriAttention
  // variants triattention-perlayer / -trig / -norm / -max.
  std::vector<std::string> policies{"triattention", "streamingllm", "snapkv", "h2o"};
  int64_t divide_length = 0;  // 0: the budget-scaled default slack (policy_params.h)
  bool decode_mode = false;
  int ppl_sequences = 4;      // decode mode: held-out sequences of ppl_window tokens
  std::vector<int64_t> ablation_budgets{};  // decode mode: budgets of the variants (default: budgets)
  int chunk = 64;
  int64_t ppl_tokens = 4096;
  int64_t ppl_window = 1024;
  uint64_t seed = 7;
  std::string out_tsv;
  std::vector<std::pair<config::KvDtype, int64_t>> demote;  // --demote: tiers, highest precision first
  // --demote ...,lowrank:N: tokens of the low-rank key tier (cache.lowrank_key_rank, last tier).
  std::optional<int64_t> demote_lowrank;
};

absl::StatusOr<EvalCommandOptions> ParseEvalOptions(const ParsedArgs& args);

int RunEval(const ParsedArgs& args, char** envp, std::ostream& out, std::ostream& err);

}  // namespace kvserve::app
