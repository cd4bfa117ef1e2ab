// Reading a command's own switches (`--prompt TEXT`, `--max-tokens N`, declared "--name=" in
// the command table) out of ParsedArgs, with one error wording for every command.
#pragma once

#include <charconv>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "app/cli.h"
#include "base/absl_compat.h"

namespace kvserve::app {

// The switch's value, the last occurrence winning; nullopt when the switch is absent.
std::optional<std::string> SwitchValue(const ParsedArgs& args, std::string_view name);

// The whole of `text` as a number of type T (integer or floating point); otherwise
// InvalidArgument "<flag>=<text>: not a number".
template <typename T>
absl::Status ParseSwitchNumber(std::string_view flag, const std::string& text, T& out) {
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, out);
  if (ec != std::errc() || ptr != end) {
    return absl::InvalidArgumentError(absl::StrCat(base::AsAbsl(flag), "=", text, ": not a number"));
  }
  return absl::OkStatus();
}

}  // namespace kvserve::app
