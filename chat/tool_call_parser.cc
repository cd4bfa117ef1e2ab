#include "chat/tool_call_parser.h"

#include <nlohmann/json.hpp>

#include "chat/json_scan.h"

namespace kvserve::chat {
namespace {

using json = nlohmann::ordered_json;

constexpr std::string_view kHermesOpen = "<tool_call>";
constexpr std::string_view kHermesClose = "</tool_call>";
constexpr std::string_view kMistralMarker = "[TOOL_CALLS]";
constexpr std::string_view kMistralArgs = "[ARGS]";
constexpr std::string_view kPythonTag = "<|python_tag|>";

std::string_view Trim(std::string_view s) {
  const size_t b = SkipJsonSpace(s, 0);
  size_t e = s.size();
  while (e > b && (s[e - 1] == ' ' || s[e - 1] == '\n' || s[e - 1] == '\r' || s[e - 1] == '\t')) --e;
  return s.substr(b, e - b);
}

std::optional<json> ParseJson(std::string_view text) {
  json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return std::nullopt;
  return j;
}

// OpenAI's function.arguments: JSON text of an object. Objects are written compactly; a
// string that already holds a JSON object is kept as written.
std::optional<std::string> ArgumentsText(const json& args) {
  if (args.is_object()) return args.dump(-1, ' ', false, json::error_handler_t::replace);
  if (args.is_string()) {
    const std::string s = args.get<std::string>();
    if (auto inner = ParseJson(s); inner && inner->is_object()) return s;
  }
  return std::nullopt;
}

// {"name": "...", "<args_key>": {...}} (either "arguments" or "parameters").
std::optional<ToolCall> CallFromObject(const json& obj) {
  if (!obj.is_object()) return std::nullopt;
  auto name = obj.find("name");
  if (name == obj.end() || !name->is_string() || name->get<std::string>().empty()) return std::nullopt;
  auto args = obj.find("arguments");
  if (args == obj.end()) args = obj.find("parameters");
  std::optional<std::string> arguments = args == obj.end() ? std::string("{}") : ArgumentsText(*args);
  if (!arguments) return std::nullopt;
  return ToolCall{"", name->get<std::string>(), *std::move(arguments)};
}

size_t FindMarker(std::string_view pending, std::string_view marker, size_t* hold) {
  const size_t at = pending.find(marker);
  *hold = at == std::string_view::npos ? PartialMarkerSuffix(pending, marker) : 0;
  return at;
}

class HermesSyntax final : public ToolCallSyntax {
 public:
  ToolCallFormat format() const override { return ToolCallFormat::kHermes; }
  size_t FindSection(std::string_view pending, bool, size_t* hold) const override {
    return FindMarker(pending, kHermesOpen, hold);
  }
  std::optional<std::vector<ToolCall>> Parse(std::string_view section) const override {
    std::vector<ToolCall> calls;
    size_t pos = 0;
    while ((pos = section.find(kHermesOpen, pos)) != std::string_view::npos) {
      const size_t body = pos + kHermesOpen.size();
      const size_t close = section.find(kHermesClose, body);
      const std::string_view inner =
          Trim(section.substr(body, close == std::string_view::npos ? std::string_view::npos : close - body));
      auto obj = ParseJson(inner);
      std::optional<ToolCall> call;
      if (obj) call = CallFromObject(*obj);
      if (!call) {
        // An unclosed last call that does not parse was cut off (max_tokens): the calls that
        // completed before it stand. Anything else malformed makes the section content.
        if (close == std::string_view::npos && !calls.empty()) break;
        return std::nullopt;
      }
      calls.push_back(*std::move(call));
      if (close == std::string_view::npos) break;
      pos = close + kHermesClose.size();
    }
    if (calls.empty()) return std::nullopt;
    return calls;
  }
};

class Llama3JsonSyntax final : public ToolCallSyntax {
 public:
  ToolCallFormat format() const override { return ToolCallFormat::kLlama3Json; }
  size_t FindSection(std::string_view pending, bool at_output_start, size_t* hold) const override {
    *hold = 0;
    if (!at_output_start) return std::string_view::npos;
    const std::string_view rest = pending.substr(SkipJsonSpace(pending, 0));
    if (rest.starts_with('{') || rest.starts_with(kPythonTag)) return 0;
    if (rest.empty() || kPythonTag.starts_with(rest)) *hold = pending.size();
    return std::string_view::npos;
  }
  std::optional<std::vector<ToolCall>> Parse(std::string_view section) const override {
    size_t pos = SkipJsonSpace(section, 0);
    if (section.substr(pos).starts_with(kPythonTag)) pos += kPythonTag.size();
    std::vector<ToolCall> calls;
    for (;;) {
      pos = SkipJsonSpace(section, pos);
      const size_t end = JsonValueEnd(section, pos);
      if (end == std::string_view::npos || section[pos] != '{') return std::nullopt;
      auto obj = ParseJson(section.substr(pos, end - pos));
      if (!obj) return std::nullopt;
      auto call = CallFromObject(*obj);
      if (!call) return std::nullopt;
      calls.push_back(*std::move(call));
      pos = SkipJsonSpace(section, end);
      if (pos == section.size()) return calls;
      if (section[pos] != ';') return std::nullopt;
      ++pos;
    }
  }
};

class MistralSyntax final : public ToolCallSyntax {
 public:
  ToolCallFormat format() const override { return ToolCallFormat::kMistral; }
  size_t FindSection(std::string_view pending, bool, size_t* hold) const override {
    return FindMarker(pending, kMistralMarker, hold);
  }
  std::optional<std::vector<ToolCall>> Parse(std::string_view section) const override {
    std::vector<ToolCall> calls;
    size_t pos = section.find(kMistralMarker);
    while (pos != std::string_view::npos) {
      const size_t body = pos + kMistralMarker.size();
      const size_t next = section.find(kMistralMarker, body);
      const std::string_view piece =
          Trim(section.substr(body, next == std::string_view::npos ? std::string_view::npos : next - body));
      if (piece.starts_with('[')) {  // [{"name", "arguments"}, ...]
        auto arr = ParseJson(piece);
        if (!arr || !arr->is_array() || arr->empty()) return std::nullopt;
        for (const json& e : *arr) {
          auto call = CallFromObject(e);
          if (!call) return std::nullopt;
          calls.push_back(*std::move(call));
        }
      } else {  // name[ARGS]{...}
        const size_t args_at = piece.find(kMistralArgs);
        if (args_at == std::string_view::npos) return std::nullopt;
        const std::string_view name = Trim(piece.substr(0, args_at));
        auto args = ParseJson(Trim(piece.substr(args_at + kMistralArgs.size())));
        if (name.empty() || !args || !args->is_object()) return std::nullopt;
        calls.push_back(ToolCall{"", std::string(name), *ArgumentsText(*args)});
      }
      pos = next;
    }
    if (calls.empty()) return std::nullopt;
    return calls;
  }
};

}  // namespace

std::string_view Name(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kNone: return "none";
    case ToolCallFormat::kHermes: return "hermes";
    case ToolCallFormat::kLlama3Json: return "llama3_json";
    case ToolCallFormat::kMistral: return "mistral";
  }
  return "none";
}

std::optional<ToolCallFormat> ParseToolCallFormat(std::string_view name) {
  for (ToolCallFormat f : {ToolCallFormat::kNone, ToolCallFormat::kHermes, ToolCallFormat::kLlama3Json,
                           ToolCallFormat::kMistral}) {
    if (Name(f) == name) return f;
  }
  return std::nullopt;
}

ToolCallFormat DetectToolCallFormat(std::string_view source) {
  if (source.find(kHermesOpen) != std::string_view::npos) return ToolCallFormat::kHermes;
  if (source.find(kMistralMarker) != std::string_view::npos) return ToolCallFormat::kMistral;
  if (source.find(kPythonTag) != std::string_view::npos) return ToolCallFormat::kLlama3Json;
  return ToolCallFormat::kNone;
}

std::unique_ptr<ToolCallSyntax> MakeToolCallSyntax(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kNone: return nullptr;
    case ToolCallFormat::kHermes: return std::make_unique<HermesSyntax>();
    case ToolCallFormat::kLlama3Json: return std::make_unique<Llama3JsonSyntax>();
    case ToolCallFormat::kMistral: return std::make_unique<MistralSyntax>();
  }
  return nullptr;
}

}  // namespace kvserve::chat
