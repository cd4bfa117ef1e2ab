#include "app/model_dir.h"

#include <filesystem>
#include <system_error>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gguf/gguf_source.h"

namespace kvserve::app {
namespace {

namespace fs = std::filesystem;

constexpr const char* kBundledModel = "kvs-tiny";

bool IsModelDir(const fs::path& dir) {
  std::error_code ec;
  return fs::is_regular_file(dir / "config.json", ec);
}

}  // namespace

std::string ExecutablePath(const std::string& argv0) {
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  return ec ? argv0 : self.string();
}

absl::StatusOr<std::string> ResolveModelDir(const std::string& config_path_value,
                                            const std::string& executable) {
  std::error_code ec;
  if (!config_path_value.empty()) {
    const fs::path dir(config_path_value);
    // A GGUF model: a .gguf file (or the first of a split set), or a directory holding one.
    if (gguf::IsGgufSource(config_path_value)) return dir.string();
    if (!fs::is_directory(dir, ec)) {
      return absl::NotFoundError(absl::StrCat("model.path=", config_path_value,
                                              ": not a directory or a GGUF file"));
    }
    if (!IsModelDir(dir)) {
      return absl::NotFoundError(absl::StrCat("model.path=", config_path_value,
                                              ": no config.json and no .gguf file (expected a Hugging Face model "
                                              "directory or a GGUF model)"));
    }
    return dir.string();
  }
  fs::path exe = fs::absolute(fs::path(executable), ec);
  if (ec) exe = fs::path(executable);
  const fs::path bin_dir = exe.parent_path();
  const std::vector<fs::path> candidates = {bin_dir / ".." / ".." / "models" / kBundledModel,
                                            bin_dir / ".." / "models" / kBundledModel};
  std::vector<std::string> tried;
  for (const fs::path& c : candidates) {
    const fs::path dir = c.lexically_normal();
    if (IsModelDir(dir)) return dir.string();
    tried.push_back(dir.string());
  }
  return absl::NotFoundError(absl::StrCat("no model given (--model DIR) and the bundled model was not found at ",
                                          absl::StrJoin(tried, " or ")));
}

}  // namespace kvserve::app
