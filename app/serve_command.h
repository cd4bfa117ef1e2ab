// `kvserve serve`: the daemon. Loads the configuration, the tokenizer and the engine,
// serves the OpenAI-compatible HTTP API and the gRPC API until SIGTERM/SIGINT, then
// drains (see server/server_app.h) and exits 0.
//
// Stdout carries exactly one line once both listeners are bound (ports resolved when
// configured as 0), for scripts and tests to wait on:
//   kvserve listening http=127.0.0.1:8000 grpc=127.0.0.1:50051
// Exit status: 0 after a drain, 1 when the model, tokenizer, engine or a port fails,
// 2 for an invalid configuration.
#pragma once

#include <functional>
#include <iosfwd>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "app/cli.h"
#include "config/config.h"
#include "engine/engine_factory.h"
#include "server/core/text_codec.h"

namespace kvserve::app {

// What `serve` builds around the server stack; tests substitute fakes.
struct ServeFactories {
  std::function<absl::StatusOr<std::string>(const config::Config&, const ParsedArgs&)> model_dir;
  std::function<absl::StatusOr<std::unique_ptr<server::TextCodec>>(const config::Config&,
                                                                   const std::string& model_dir)>
      codec;
  std::function<absl::StatusOr<std::unique_ptr<engine::ServingEngine>>(
      const config::Config&, const std::string& model_dir, engine::EngineDeps)>
      engine;
};

// model.path or the bundled model; the tokenizer of that directory; engine::CreateEngine.
ServeFactories DefaultServeFactories();

int RunServe(const ParsedArgs& args, char** envp, std::ostream& out, std::ostream& err);
int RunServeWith(const ParsedArgs& args, char** envp, std::ostream& out, std::ostream& err,
                 const ServeFactories& factories);

}  // namespace kvserve::app
