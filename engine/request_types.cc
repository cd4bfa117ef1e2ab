#include "engine/request_types.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/absl_compat.h"

namespace kvserve::engine {

std::string_view Name(FinishReason r) {
  switch (r) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAbort: return "abort";
    case FinishReason::kError: return "error";
  }
  return "?";
}

std::string ToString(const TokenEvent& e) {
  std::string s = absl::StrCat("TokenEvent{sample=", e.sample_index, " ids=[",
                               absl::StrJoin(e.token_ids, ","), "]");
  if (e.finish) absl::StrAppend(&s, " finish=", base::AsAbsl(Name(*e.finish)));
  if (e.usage) {
    absl::StrAppend(&s, " usage={prompt=", e.usage->prompt_tokens,
                    " completion=", e.usage->completion_tokens, "}");
  }
  if (!e.error.empty()) absl::StrAppend(&s, " error=", e.error);
  return s + "}";
}

}  // namespace kvserve::engine
