// Which OpenAI request members kvserve does not implement, in ONE table: a client that sends
// one of them gets a 400 naming it (OpenAI's `param`) instead of a 200 that silently ignores
// what it asked for. Harmless hints (`user`, `metadata`, `store`, ...) are accepted and
// ignored. Members that are neither implemented nor listed here (vendor extras) are ignored,
// as vLLM does.
//
// Implementing a member means parsing it in openai_request_parser.cc and deleting its row in
// openai_param_support.cc; docs/api.md lists the same rows.
//
//   request body ──► every top-level key ──► FindRefusedMember(scope, key)
//                     messages[i] keys   ──►        │ row found, value not "empty"
//                     messages[i].role   ──► FindRefusedRole  ──► 400 "<param>: ... not supported"
#pragma once

#include <span>
#include <string_view>

namespace kvserve::server {

enum class ParamScope { kCompletion, kChat, kMessage };

struct RefusedMember {
  ParamScope scope;
  std::string_view name;
  std::string_view reason;  // completes "<name>: is not supported: <reason>"
  // A value that asks for nothing (null, [], {}, or this member's default) is accepted:
  // clients and SDKs often send the default explicitly (`"best_of": 1`, `"tools": []`).
  std::string_view accepted_default_json;  // compact JSON of the accepted default, or ""
};

struct RefusedRole {
  std::string_view role;
  std::string_view reason;
};

// The table itself (for docs and tests).
std::span<const RefusedMember> RefusedMembers();
std::span<const RefusedRole> RefusedRoles();
// Roles the chat path understands; any other role is a 400.
std::span<const std::string_view> SupportedRoles();
// Accepted and ignored (documented as hints).
std::span<const std::string_view> IgnoredHints();

const RefusedMember* FindRefusedMember(ParamScope scope, std::string_view name);
const RefusedRole* FindRefusedRole(std::string_view role);
bool IsSupportedRole(std::string_view role);

}  // namespace kvserve::server
