// A compiled Jinja2 template, the entry point of kvserve::jinja.
//
// Why a hand-written interpreter: Hugging Face ships chat templates as Jinja2 source, and no
// C++ Jinja implementation is packaged in Debian, so rendering a model's own template needs one
// of our own. It covers the language HF chat templates use (statements if/for/set/macro/call/
// filter/break/continue, Python-like expressions, the builtin filters/tests/methods in
// builtins.h), with whitespace control and trim_blocks/lstrip_blocks as transformers sets them,
// and prints values as the reference renderer (@huggingface/jinja) does; the conformance test
// (tests/integration/jinja) renders real templates with both and compares bytes.
//
// Compile once (lex + parse, errors name the template line), render many times: a Template is
// immutable and Render() is safe to call from many threads at once.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "jinja/limits.h"
#include "jinja/value.h"

namespace kvserve::jinja {

struct Stmt;

struct TemplateOptions {
  bool trim_blocks = true;    // transformers' settings
  bool lstrip_blocks = true;
  RenderLimits limits;        // jinja/limits.h: steps, call and value depth
};

class Template {
 public:
  static absl::StatusOr<Template> Compile(std::string_view source,
                                          const TemplateOptions& options = {});
  // `context` holds the variables (messages, add_generation_prompt, bos_token, ...).
  // InvalidArgument naming the line for runtime errors; raise_exception(msg) gives
  // "template line N: <msg>". A template that exceeds a limit of jinja/limits.h (endless
  // loop, runaway recursion, a string past 64 MiB) gets InvalidArgument naming the limit.
  absl::StatusOr<std::string> Render(const Object& context) const;

 private:
  struct Compiled;
  explicit Template(std::shared_ptr<const Compiled> c) : compiled_(std::move(c)) {}
  std::shared_ptr<const Compiled> compiled_;
};

// strftime_now(format) as transformers defines it, reading the injected clock.
Value MakeStrftimeNow(std::function<absl::Time()> clock);

// Parses JSON text into a Value (objects keep key order; integral numbers become ints, as the
// reference renderer sees them). Errors say where the JSON is malformed.
absl::StatusOr<Value> ValueFromJson(std::string_view json_text);

}  // namespace kvserve::jinja
