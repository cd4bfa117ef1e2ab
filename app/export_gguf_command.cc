#include "app/export_gguf_command.h"

#include <ostream>

#include "app/command_switches.h"
#include "config/config_loader.h"
#include "model/gguf_export.h"

namespace kvserve::app {

int RunExportGguf(const ParsedArgs& args, char** envp, std::ostream& out, std::ostream& err) {
  auto cfg = LoadConfigFromArgs(args, envp);
  if (!cfg.ok()) {
    err << "kvserve: invalid configuration: " << cfg.status().message() << "\n";
    return kExitUsage;
  }
  const std::optional<std::string> out_path = SwitchValue(args, "--out");
  if (cfg->model.path.empty() || !out_path) {
    err << "kvserve export-gguf: --model DIR and --out FILE are required\n";
    return kExitUsage;
  }
  model::GgufExportOptions options;
  if (auto type = SwitchValue(args, "--type")) options.type = *type;
  if (auto split = SwitchValue(args, "--split-bytes")) {
    if (absl::Status st = ParseSwitchNumber("--split-bytes", *split, options.max_file_bytes);
        !st.ok()) {
      err << "kvserve export-gguf: " << st.message() << "\n";
      return kExitUsage;
    }
  }
  auto written = model::ExportGguf(cfg->model.path, *out_path, options);
  if (!written.ok()) {
    err << "kvserve export-gguf: " << written.status().message() << "\n";
    return kExitFailure;
  }
  for (const std::string& path : *written) out << path << "\n";
  return kExitOk;
}

}  // namespace kvserve::app
