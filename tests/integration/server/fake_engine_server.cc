// The `kvserve serve` command with its engine and tokenizer replaced by test doubles: the
// real server stack (HTTP, gRPC, auth, drain, signals) over FakeEngine + FakeTextCodec.
// Takes the same flags as `kvserve serve` and prints the same listening line, so the
// integration tests (C++ and Node) run unchanged against either binary.
//
// Engine emulation: one token per running request every 5 ms; scheduler.max_num_seqs
// requests run, scheduler.max_waiting more may wait (beyond that: 429); model.max_model_len
// (0: 2048) is the context limit.
#include <iostream>
#include <string>
#include <vector>

#include "app/cli.h"
#include "app/serve_command.h"
#include "tests/unit/server/fake_engine.h"
#include "tests/unit/server/fake_text_codec.h"

extern char** environ;

int main(int argc, char** argv) {
  using namespace kvserve;
  std::vector<std::string> args = {"serve"};
  for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);
  absl::StatusOr<app::ParsedArgs> parsed = app::ParseArgs(args);
  if (!parsed.ok()) {
    std::cerr << "fake_engine_server: " << parsed.status().message() << "\n";
    return app::kExitUsage;
  }
  parsed->program = argv[0];

  app::ServeFactories f;
  f.model_dir = [](const config::Config& cfg, const app::ParsedArgs&) -> absl::StatusOr<std::string> {
    return cfg.model.path.empty() ? std::string("kvs-tiny") : cfg.model.path;
  };
  f.codec = [](const config::Config&, const std::string&) -> absl::StatusOr<std::unique_ptr<server::TextCodec>> {
    return std::make_unique<server::testing::FakeTextCodec>();
  };
  f.engine = [](const config::Config& cfg, const std::string&, engine::EngineDeps)
      -> absl::StatusOr<std::unique_ptr<engine::ServingEngine>> {
    server::testing::FakeEngineOptions o;
    o.tick = std::chrono::milliseconds(5);
    o.max_model_len = cfg.model.max_model_len > 0 ? cfg.model.max_model_len : 2048;
    o.max_running = cfg.scheduler.max_num_seqs;
    o.max_waiting = cfg.scheduler.max_waiting;
    return std::make_unique<server::testing::FakeEngine>(o);
  };
  return app::RunServeWith(*parsed, environ, std::cout, std::cerr, f);
}
