#include "server/openai_param_support.h"

#include <array>

namespace kvserve::server {
namespace {

constexpr std::array<RefusedMember, 11> kRefused = {{
    // Completions.
    {ParamScope::kCompletion, "best_of", "generate n samples instead (only best_of = 1)", "1"},
    // vLLM's structured-output members kvserve does not implement.
    {ParamScope::kCompletion, "structured_outputs", "use response_format, guided_json, guided_regex, guided_choice or guided_grammar", ""},
    {ParamScope::kChat, "structured_outputs", "use response_format, guided_json, guided_regex, guided_choice or guided_grammar", ""},
    // Chat: legacy functions, structured outputs and modalities.
    {ParamScope::kChat, "functions", "function calling is not implemented", ""},
    {ParamScope::kChat, "function_call", "function calling is not implemented", "\"none\""},
    {ParamScope::kChat, "audio", "audio output is not implemented", ""},
    {ParamScope::kChat, "modalities", "only text output is implemented", "[\"text\"]"},
    {ParamScope::kChat, "prediction", "predicted outputs are not implemented", ""},
    {ParamScope::kChat, "web_search_options", "web search is not implemented", ""},
    {ParamScope::kChat, "reasoning_effort", "the served model has no reasoning mode", ""},
    // Legacy function calling (superseded by tools and role "tool").
    {ParamScope::kMessage, "function_call", "function calling is not implemented", ""},
}};

constexpr std::array<RefusedRole, 1> kRefusedRoles = {{
    {"function", "function calling is not implemented; use tools and role \"tool\""},
}};

// "developer" is OpenAI's newer name for "system"; the parser maps it.
constexpr std::array<std::string_view, 5> kRoles = {"system", "developer", "user", "assistant", "tool"};

constexpr std::array<std::string_view, 5> kHints = {"user", "metadata", "store", "service_tier",
                                                    "safety_identifier"};

}  // namespace

std::span<const RefusedMember> RefusedMembers() { return kRefused; }
std::span<const RefusedRole> RefusedRoles() { return kRefusedRoles; }
std::span<const std::string_view> SupportedRoles() { return kRoles; }
std::span<const std::string_view> IgnoredHints() { return kHints; }

const RefusedMember* FindRefusedMember(ParamScope scope, std::string_view name) {
  for (const RefusedMember& m : kRefused) {
    if (m.scope == scope && m.name == name) return &m;
  }
  return nullptr;
}

const RefusedRole* FindRefusedRole(std::string_view role) {
  for (const RefusedRole& r : kRefusedRoles) {
    if (r.role == role) return &r;
  }
  return nullptr;
}

bool IsSupportedRole(std::string_view role) {
  for (std::string_view r : kRoles) {
    if (r == role) return true;
  }
  return false;
}

}  // namespace kvserve::server
