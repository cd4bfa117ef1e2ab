// `kvserve eval --text FILE [--model DIR] [...]`: the quality of each KV compression policy
// on the model (compression/quality_eval.h): held-out perplexity in windows of --ppl-window
// tokens over the first --ppl-tokens tokens of the text, and passkey retrieval accuracy on
// --passkey prompts (the key at a uniformly random depth of --filler tokens of the text),
// for `full` and for every policy at every budget. Prints a Markdown table on stdout and,
// with --out-tsv, one line per row for plotting (tools/eval_compression.sh).
//
// The passkey prompt is the context under test, so it is NOT protected (protect_prompt=false):
// with a protected prompt every policy would keep the whole passkey prompt and equal `full`.
// Perplexity windows protect their BOS (the attention sink), as a prompt is by default.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "app/cli.h"
#include "config/config.h"

namespace kvserve::app {

inline constexpr const char* kEvalSwitches[] = {
    "--text=",  "--filler-text=", "--passkey=", "--filler=", "--budgets=",   "--policies=", "--divide-length=",
    "--chunk=", "--ppl-tokens=",  "--ppl-window=", "--seed=", "--out-tsv="};

struct EvalCommandOptions {
  std::string text_path;
  std::string filler_path;  // default: text_path
  int passkey_prompts = 100;
  int filler_tokens = 1024;
  std::vector<int64_t> budgets{64, 128, 256, 512};
  std::vector<config::CompressionPolicyKind> policies{
      config::CompressionPolicyKind::kTriAttention, config::CompressionPolicyKind::kStreamingLlm,
      config::CompressionPolicyKind::kSnapKv, config::CompressionPolicyKind::kH2O};
  int64_t divide_length = 32;
  int chunk = 64;
  int64_t ppl_tokens = 4096;
  int64_t ppl_window = 1024;
  uint64_t seed = 7;
  std::string out_tsv;
};

absl::StatusOr<EvalCommandOptions> ParseEvalOptions(const ParsedArgs& args);

int RunEval(const ParsedArgs& args, char** envp, std::ostream& out, std::ostream& err);

}  // namespace kvserve::app
