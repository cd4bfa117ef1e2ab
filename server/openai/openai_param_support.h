// The request field table: every request field of the APIs kvserve claims (OpenAI completions
// and chat completions, the vLLM extras, chat message members, the kvserve.v1 gRPC request
// messages), per endpoint, with its status. A field is
//   honoured: it has the documented effect (`text` says which);
//   refused:  a value that asks for something is a 400 naming it (`text` says why); null, [],
//             {} and `accepted_default_json` are accepted as "not asked" (SDKs send defaults);
//   a hint:   accepted and unused by design (`user`, `metadata`, ...).
// Members that are in no row are vendor extras and are ignored, as vLLM does.
//
// The parser refuses through FindRefusedMember; the field-walk test
// (tests/unit/server/request_fields_test.cc) sends every row to the real parser and checks the
// effect or the 400, checks every gRPC request field is a row, and checks that docs/api.md's
// parameter table is exactly FieldTableMarkdown(). Changing a field's behaviour means changing
// its row here, the walk's expectation, and the docs block.
//
//   request body ──► every top-level key ──► FindRefusedMember(endpoint, key)
//                     messages[i] keys   ──►        │ refused row, value not "empty"
//                     messages[i].role   ──► FindRefusedRole  ──► 400 "<param>: ... not supported"
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace kvserve::server {

// Where a field lives. kGrpc rows are named "<Message>.<field>" (kvserve.v1).
// kResponses: /v1/responses top-level members, a closed set (a member in no row is a 400 there).
enum class ParamScope : uint8_t { kCompletion = 1, kChat = 2, kMessage = 4, kGrpc = 8, kResponses = 16 };
inline constexpr uint8_t kCompletionAndChat = 1 | 2;

enum class FieldStatus { kHonoured, kRefused, kHint };

struct RequestField {
  uint8_t scopes;  // bitwise or of ParamScope values
  std::string_view name;
  FieldStatus status;
  std::string_view text;  // honoured: the effect; refused: completes "is not supported: <text>"
  // Refused: a value that asks for nothing besides null/[]/{} (compact JSON), or "".
  std::string_view accepted_default_json = {};

  bool in(ParamScope s) const { return (scopes & static_cast<uint8_t>(s)) != 0; }
};

// Kept for the parser's call sites: a refused row.
using RefusedMember = RequestField;

struct RefusedRole {
  std::string_view role;
  std::string_view reason;
};

// The table itself (for docs and tests): at most one row per (scope, name).
std::span<const RequestField> RequestFields();
std::span<const RefusedRole> RefusedRoles();
// Roles the chat path understands; any other role is a 400.
std::span<const std::string_view> SupportedRoles();

const RequestField* FindRequestField(ParamScope scope, std::string_view name);
// The row if it refuses `name` in `scope`, else nullptr.
const RefusedMember* FindRefusedMember(ParamScope scope, std::string_view name);
const RefusedRole* FindRefusedRole(std::string_view role);
bool IsSupportedRole(std::string_view role);

// docs/api.md's parameter table, rendered from the rows (Markdown, one row per table row).
std::string FieldTableMarkdown();

}  // namespace kvserve::server
