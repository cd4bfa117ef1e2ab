// `kvserve export-gguf --model DIR --out FILE.gguf [--type Q4_K_M] [--split-bytes N]` writes a
// Hugging Face checkpoint directory as a GGUF file with our own quantizer (model/gguf_export.h):
// the files llama.cpp and kvserve both serve, for benchmarks side by side and for test fixtures.
#pragma once

#include <iosfwd>

#include "app/cli.h"

namespace kvserve::app {

inline constexpr const char* kExportGgufSwitches[] = {"--out=", "--type=", "--split-bytes="};

int RunExportGguf(const ParsedArgs& args, char** envp, std::ostream& out, std::ostream& err);

}  // namespace kvserve::app
