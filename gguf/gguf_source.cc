#include "gguf/gguf_source.h"

#include <filesystem>
#include <fstream>

namespace kvserve::gguf {

bool IsGgufSource(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) {
    std::ifstream in(path, std::ios::binary);
    char magic[4] = {};
    return in.read(magic, 4) && magic[0] == 'G' && magic[1] == 'G' && magic[2] == 'U' &&
           magic[3] == 'F';
  }
  if (!fs::is_directory(path, ec) || fs::exists(fs::path(path) / "config.json", ec)) return false;
  for (const auto& entry : fs::directory_iterator(path, ec)) {
    if (entry.path().extension() == ".gguf") return true;
  }
  return false;
}

}  // namespace kvserve::gguf
