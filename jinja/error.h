// Render-time errors. Inside one Render() call, builtins and the evaluator throw Error; the
// renderer adds the line of the statement being executed and Template::Render turns it into an
// absl::Status before returning, so no exception leaves the jinja library. (Unwinding through
// the tree walk keeps every evaluation step free of status plumbing, and the error path is rare.)
#pragma once

#include <string>
#include <utility>

namespace kvserve::jinja {

struct Error {
  std::string message;
  int line = 0;  // 0 until the renderer knows which statement raised it
  bool raised = false;  // raise_exception() from the template itself
};

[[noreturn]] inline void Throw(std::string message) { throw Error{std::move(message)}; }

}  // namespace kvserve::jinja
