// `kvserve calibrate --model DIR --text FILE --out FILE [--max-tokens N] [--window N]`
// measures the TriAttention query statistics of a model on plain text and writes the stats
// file (compression/triattention_stats.h) that the `triattention` policy loads. It runs the
// model on the CPU over the first N tokens of the text (default 32768, the paper's
// calibration length; a shorter text is an error unless --max-tokens is lowered explicitly),
// in fresh sequences of --window tokens (default: the model's context, as the paper
// calibrates; capped at the context). The same pass also measures the PCA of the post-RoPE
// keys per (layer, KV head) and writes the low-rank key basis (compression/key_basis.h) next
// to the stats: --key-basis-out FILE, default key_basis.bin in --out's directory.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>

#include "absl/status/statusor.h"
#include "app/cli.h"

namespace kvserve::app {

inline constexpr const char* kCalibrateSwitches[] = {"--text=", "--out=", "--max-tokens=", "--window=",
                                                     "--key-basis-out="};

struct CalibrateOptions {
  std::string text_path;
  std::string out_path;
  std::string key_basis_path;  // default: key_basis.bin next to out_path
  int64_t max_tokens = 32768;
  int64_t window = 0;  // 0: the model's context
};

// Reads the switches; errors name the flag.
absl::StatusOr<CalibrateOptions> ParseCalibrateOptions(const ParsedArgs& args);

int RunCalibrate(const ParsedArgs& args, char** envp, std::ostream& out, std::ostream& err);

}  // namespace kvserve::app
