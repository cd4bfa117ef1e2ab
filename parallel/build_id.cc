#include "parallel/build_id.h"

#include "absl/strings/str_cat.h"
#include "parallel/step_message.h"

#ifndef KVSERVE_BUILD_REVISION
#error "KVSERVE_BUILD_REVISION is set by parallel/CMakeLists.txt"
#endif

namespace kvserve::parallel {

std::string ThisBuildId() {
  return absl::StrCat(KVSERVE_BUILD_REVISION, "/step-message-v", kStepMessageVersion);
}

}  // namespace kvserve::parallel
