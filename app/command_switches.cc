#include "app/command_switches.h"

namespace kvserve::app {

std::optional<std::string> SwitchValue(const ParsedArgs& args, std::string_view name) {
  std::optional<std::string> v;
  for (const auto& [k, value] : args.switch_values) {
    if (k == name) v = value;  // the last occurrence wins
  }
  return v;
}

}  // namespace kvserve::app
