// Debian's Abseil pins absl::string_view != std::string_view (ABSL_OPTION_USE_STD_STRING_VIEW 0),
// with no implicit conversion either way. These adapters are the only bridge.
#pragma once

#include <string_view>

#include "absl/strings/string_view.h"

namespace kvserve::base {
inline absl::string_view AsAbsl(std::string_view s) { return {s.data(), s.size()}; }
inline std::string_view AsStd(absl::string_view s) { return {s.data(), s.size()}; }
}  // namespace kvserve::base
