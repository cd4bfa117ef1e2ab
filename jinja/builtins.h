// The builtin library the Hugging Face chat templates call: filters (`x | tojson`), tests
// (`x is string`) and methods of str, list and dict (`s.startswith(...)`, `d.items()`).
// Unknown names and wrong argument types throw jinja::Error naming them.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "jinja/value.h"

namespace kvserve::jinja {

Value ApplyFilter(std::string_view name, const Value& input, const CallArgs& args);
bool ApplyTest(std::string_view name, const Value& input, const CallArgs& args);
bool HasTest(std::string_view name);
// obj.name(args); nullopt when `obj` has no such method.
std::optional<Value> CallMethod(const Value& obj, std::string_view name, const CallArgs& args);

// Python str.strip/lstrip/rstrip: `chars` null strips Unicode whitespace.
std::string PyStrip(std::string_view s, const std::string* chars, bool left, bool right);
// Items a for loop visits: list elements, string characters (UTF-8 aware), dict keys.
Array Iterate(const Value& v);

}  // namespace kvserve::jinja
