// The start of every one-shot command that runs the model in-process (`generate`,
// `calibrate`): the configuration (file, environment, flags), the model directory
// (model.path or the bundled model), its tokenizer and the model. One place, so the
// commands agree on precedence, error wording and exit statuses. `serve` builds an engine
// instead (engine/engine_factory.h).
#pragma once

#include <functional>
#include <iosfwd>
#include <memory>
#include <string>
#include <string_view>

#include "app/cli.h"
#include "config/config.h"
#include "model/llama_model.h"
#include "model/model_config.h"
#include "tokenizer/tokenizer.h"

namespace kvserve::app {

struct LoadedModel {
  config::Config config;
  std::string dir;  // the resolved model directory
  std::unique_ptr<tokenizer::Tokenizer> tokenizer;
  std::unique_ptr<model::LlamaModel> model;
};

// Rows per forward step the command will run. The model sizes its scratch for this many
// rows once, at load, so the command decides it from the configuration and the model's
// config.json (e.g. its context length) before the weights are loaded.
using StepRowsFn = std::function<int(const config::Config&, const model::ModelConfig&)>;

// Returns kExitOk and fills `out`; otherwise writes one line to `err` and returns the exit
// status for main: kExitUsage for an invalid configuration ("kvserve: invalid
// configuration: ..."), kExitFailure when the directory, tokenizer or model does not load
// ("kvserve <command>: ..."). The model runs with engine.threads compute threads.
int LoadModelForCommand(const ParsedArgs& args, char** envp, std::string_view command,
                        const StepRowsFn& step_rows, std::ostream& err, LoadedModel& out);

}  // namespace kvserve::app
