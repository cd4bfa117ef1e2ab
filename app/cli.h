// The `kvserve` command line: subcommands and the flags that map onto config fields.
// RunCli is the whole program minus process plumbing, so tests can drive it in-process.
#pragma once

#include <iosfwd>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "config/config_loader.h"

namespace kvserve::app {

// Exit statuses (documented in --help and docs/configuration.md).
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;  // runtime failure (model load, bind, ...)
inline constexpr int kExitUsage = 2;    // bad command line or invalid configuration

// Flags common to every subcommand that loads a config, after splitting argv.
struct ParsedArgs {
  std::string command;                // "serve", "config", "version", "help"
  std::string config_file;            // --config FILE
  config::KeyValues overrides;        // (field path, text) from flags
  std::vector<std::string> switches;  // command-specific switches such as "--dump"
  // Command switches that take a value (declared as "--name=" in the command table), in
  // order: ("--prompt", "hello").
  std::vector<std::pair<std::string, std::string>> switch_values;
  std::string program;  // argv[0]
  std::vector<std::string> positional;
};

// Splits argv (after the program name). Knows the config flag aliases; everything that
// starts with "--" and names a config field path also works (`--cache.block_size=32`).
// `command_switches` lists the switches the chosen command accepts.
absl::StatusOr<ParsedArgs> ParseArgs(const std::vector<std::string>& args);

int RunCli(int argc, char** argv, char** envp, std::ostream& out, std::ostream& err);

// The configuration a command runs with: --config FILE, then KVSERVE_* from `envp`, then the
// flags (ParsedArgs::overrides), each over the one before.
absl::StatusOr<config::Config> LoadConfigFromArgs(const ParsedArgs& args, char** envp);

}  // namespace kvserve::app
