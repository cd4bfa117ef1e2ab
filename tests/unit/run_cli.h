// Runs the kvserve command line in-process (app::RunCli) with captured stdout and stderr,
// for the tests of `kvserve config`, `generate`, `calibrate` and the bundled model's smoke check.
#pragma once

#include <sstream>
#include <string>
#include <vector>

#include "app/cli.h"

namespace kvserve::app::testing {

struct CliResult {
  int code;
  std::string out;
  std::string err;
};

// `args` come after the program name; `env` holds "NAME=value" entries (empty: no environment).
inline CliResult RunKvserve(std::vector<std::string> args, std::vector<std::string> env = {}) {
  args.insert(args.begin(), "kvserve");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  std::vector<char*> envp;
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::ostringstream out, err;
  const int code = RunCli(static_cast<int>(argv.size()), argv.data(), envp.data(), out, err);
  return {code, out.str(), err.str()};
}

}  // namespace kvserve::app::testing
