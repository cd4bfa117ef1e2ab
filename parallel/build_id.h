// The build id a rank reports in the start-up handshake (rank_handshake.h): ranks of one
// group must run the same build, since the step message and every later wire format are
// only promised to match within one build.
#pragma once

#include <string>

namespace kvserve::parallel {

// "<project version>-<git revision at configure time>/step-message-v<kStepMessageVersion>",
// e.g. "0.1.0-4f6f579a1b2c/step-message-v1". The revision is the one the CUDA backend module
// is matched by (engine/cuda_backend_module.h), read by the top-level CMakeLists.txt.
std::string ThisBuildId();

}  // namespace kvserve::parallel
