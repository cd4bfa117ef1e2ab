#include "structured/tool_call_grammar.h"

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "base/absl_compat.h"
#include "structured/byte_dfa.h"
#include "structured/json_schema.h"

namespace kvserve::structured {
namespace {

using json = nlohmann::ordered_json;

struct Layout {
  std::string_view name;
  std::string_view args_key;   // "arguments" or "parameters"
  std::string_view before;     // before the first call
  std::string_view call_open;  // before each call object
  std::string_view call_close;
  std::string_view separator;  // between calls
  std::string_view after;      // after the last call
};

constexpr Layout kLayouts[] = {
    {"hermes", "arguments", "", "<tool_call>\n", "\n</tool_call>", "\n", ""},
    {"llama3_json", "parameters", "", "", "", "; ", ""},
    {"mistral", "arguments", "[TOOL_CALLS][", "", "", ", ", "]"},
};

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

}  // namespace

std::string ToolCallsSource(std::string_view format, const std::vector<ToolSchema>& tools, int max_calls) {
  json spec = json::object();
  spec["format"] = std::string(format);
  spec["max_calls"] = max_calls;
  json list = json::array();
  for (const ToolSchema& t : tools) {
    json tool = {{"name", t.name}};
    if (!t.parameters_json.empty()) {
      json params = json::parse(t.parameters_json, nullptr, false);
      tool["parameters"] = params.is_discarded() ? json(t.parameters_json) : params;
    }
    list.push_back(std::move(tool));
  }
  spec["tools"] = std::move(list);
  return Dump(spec);
}

absl::StatusOr<RegexNode> ToolCallsToRegex(std::string_view source, std::string_view field) {
  const json spec = json::parse(source.begin(), source.end(), nullptr, false);
  if (spec.is_discarded() || !spec.is_object() || !spec.contains("tools") || !spec["tools"].is_array() ||
      spec["tools"].empty()) {
    return absl::InvalidArgumentError(absl::StrCat(base::AsAbsl(field), ": tool_choice \"required\" needs at least one tool"));
  }
  const std::string format = spec.value("format", "");
  const Layout* layout = nullptr;
  for (const Layout& l : kLayouts) {
    if (l.name == format) layout = &l;
  }
  if (layout == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(base::AsAbsl(field), ": no constrained layout for tool-call format \"", format, "\""));
  }
  std::vector<RegexNode> calls;
  const json& tools = spec["tools"];
  for (size_t i = 0; i < tools.size(); ++i) {
    const json& t = tools[i];
    RegexNode args;
    if (auto p = t.find("parameters"); p != t.end()) {
      const std::string path = absl::StrCat(base::AsAbsl(field), "[", i, "].function.parameters");
      auto converted = JsonSchemaToRegex(p->is_string() ? p->get<std::string>() : Dump(*p), path);
      if (!converted.ok()) return converted.status();
      args = *std::move(converted);
    } else {
      args = AnyJsonObject();
    }
    calls.push_back(RegexNode::Seq(
        {RegexNode::Literal(absl::StrCat(base::AsAbsl(layout->call_open), "{\"name\": ", Dump(json(t.value("name", ""))),
                                         ", \"", base::AsAbsl(layout->args_key), "\": ")),
         std::move(args), RegexNode::Literal(absl::StrCat("}", base::AsAbsl(layout->call_close)))}));
  }
  const int max_calls = spec.value("max_calls", 0);
  auto list = [&](int max) {
    return RegexNode::Seq({RegexNode::Literal(layout->before),
                           RegexNode::SeparatedList(RegexNode::Alt(calls), RegexNode::Literal(layout->separator), 1, max),
                           RegexNode::Literal(layout->after)});
  };
  if (max_calls <= 1) return list(max_calls == 1 ? 1 : -1);
  // A bounded list copies the calls' automaton max_calls times; when that does not fit the
  // automaton's state limit (big argument schemas), the list is unbounded instead.
  RegexNode bounded = list(max_calls);
  if (ByteDfa::Compile(bounded).ok()) return bounded;
  return list(-1);
}

}  // namespace kvserve::structured
