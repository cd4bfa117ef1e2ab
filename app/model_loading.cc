#include "app/model_loading.h"

#include <ostream>

#include "app/model_dir.h"
#include "config/config_loader.h"

namespace kvserve::app {

int LoadModelForCommand(const ParsedArgs& args, char** envp, std::string_view command,
                        const StepRowsFn& step_rows, std::ostream& err, LoadedModel& out) {
  auto cfg = LoadConfigFromArgs(args, envp);
  if (!cfg.ok()) {
    err << "kvserve: invalid configuration: " << cfg.status().message() << "\n";
    return kExitUsage;
  }
  auto fail = [&](const absl::Status& st) {
    err << "kvserve " << command << ": " << st.message() << "\n";
    return kExitFailure;
  };
  auto dir = ResolveModelDir(cfg->model.path, ExecutablePath(args.program));
  if (!dir.ok()) return fail(dir.status());
  auto tok = tokenizer::LoadTokenizerDir(*dir);
  if (!tok.ok()) return fail(tok.status());
  auto model_config = model::LoadModelConfig(*dir);
  if (!model_config.ok()) return fail(model_config.status());
  model::ModelOptions mopts;
  mopts.threads = cfg->engine.threads;
  mopts.max_tokens_per_step = step_rows(*cfg, *model_config);
  mopts.max_context = cfg->model.max_model_len;
  auto m = model::LlamaModel::Load(*dir, mopts);
  if (!m.ok()) return fail(m.status());

  out.config = *std::move(cfg);
  out.dir = *std::move(dir);
  out.tokenizer = *std::move(tok);
  out.model = *std::move(m);
  return kExitOk;
}

}  // namespace kvserve::app
