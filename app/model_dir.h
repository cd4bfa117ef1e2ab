// Where the model lives: the configured directory (model.path / --model), or the bundled
// models/kvs-tiny found relative to the executable, so `build/bin/kvserve` works from any
// working directory:
//
//   <repo>/build/bin/kvserve  ->  <repo>/build/bin/../../models/kvs-tiny
//   <prefix>/bin/kvserve      ->  <prefix>/bin/../models/kvs-tiny
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace kvserve::app {

// The running binary's path: /proc/self/exe when readable, else `argv0` as given.
std::string ExecutablePath(const std::string& argv0);

// `config_path_value` is model.path (empty: use the bundled model); `executable` the
// binary's path (see ExecutablePath). The result is a directory holding config.json, or a
// GGUF model (a .gguf file or a directory holding one, gguf/gguf_source.h); otherwise an
// error says which paths were tried.
absl::StatusOr<std::string> ResolveModelDir(const std::string& config_path_value,
                                            const std::string& executable);

}  // namespace kvserve::app
