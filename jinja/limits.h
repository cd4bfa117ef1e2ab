// Bounds on what one template may make the interpreter do. Chat templates come from model
// directories and are run on request data, so a broken or hostile template must end in a
// clean error naming the limit, never a hang, a stack overflow or an allocation the process
// cannot survive. Real chat templates stay far below every bound (the largest bundled one
// nests 6 deep and renders a 1,000-message chat in well under 1 % of the step budget).
//
//   parse:   nesting of brackets / statements  <= kMaxNesting   (parser recursion)
//            height of one expression tree     <= kMaxExprHeight (renderer + destructor recursion)
//   render:  evaluation steps                  <= RenderLimits::max_steps   (no endless loops)
//            macro / caller() call depth       <= RenderLimits::max_call_depth
//            nesting of lists and dicts        <= RenderLimits::max_value_depth
//            any one string, and the output    <= kMaxStringBytes
//            range() length                    <= kMaxRangeItems
//   values:  no list or dict may contain itself (it could never be printed or freed).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "jinja/error.h"

namespace kvserve::jinja {

inline constexpr int kMaxNesting = 64;
inline constexpr int kMaxExprHeight = 256;
inline constexpr uint64_t kMaxStringBytes = uint64_t{64} << 20;
inline constexpr int64_t kMaxRangeItems = 1'000'000;

struct RenderLimits {
  int64_t max_steps = 20'000'000;
  int max_call_depth = 64;
  int max_value_depth = 64;
};

// Throws an Error naming `what` when a string of `bytes` bytes would exceed kMaxStringBytes.
inline void CheckStringSize(uint64_t bytes, std::string_view what) {
  if (bytes > kMaxStringBytes) {
    Throw(absl::StrCat(std::string(what), " would be ", bytes, " bytes, over the template limit of ",
                       kMaxStringBytes, " bytes"));
  }
}

}  // namespace kvserve::jinja
