// `kvserve generate --prompt TEXT [--max-tokens N] [--temperature T] [--seed S] [--model DIR]`
// completes one prompt on the CPU and prints the completion to stdout as it is generated
// (stats go to stderr). A smoke test for humans and scripts: one sequence, a private KV
// buffer with a trivial block table, no scheduler or engine involved.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "app/cli.h"

namespace kvserve::app {

// Command switches of `generate` (values follow the switch: --prompt TEXT or --prompt=TEXT).
inline constexpr const char* kGenerateSwitches[] = {"--prompt=", "--max-tokens=", "--temperature=", "--seed="};

struct GenerateOptions {
  std::string prompt;
  int max_tokens = 64;
  float temperature = 1.0f;
  std::optional<uint64_t> seed;  // default: engine.seed
};

// Reads the switches; errors name the flag.
absl::StatusOr<GenerateOptions> ParseGenerateOptions(const ParsedArgs& args);

int RunGenerate(const ParsedArgs& args, char** envp, std::ostream& out, std::ostream& err);

}  // namespace kvserve::app
