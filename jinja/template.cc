#include "jinja/template.h"

#include <new>
#include <stdexcept>

#include "absl/strings/str_cat.h"
#include "jinja/ast.h"
#include "jinja/error.h"
#include "jinja/lexer.h"
#include "jinja/limits.h"
#include "jinja/parser.h"
#include "jinja/renderer.h"

namespace kvserve::jinja {

struct Template::Compiled {
  Body body;
  Scope globals;
  RenderLimits limits;
};

namespace {

Scope MakeGlobals() {
  Scope g;
  g["raise_exception"] = Value(Callable([](const CallArgs& args) -> Value {
    const Value* msg = args.Get("message", 0);
    throw Error{msg ? msg->Str() : std::string("raise_exception called"), 0, true};
  }));
  g["range"] = Value(Callable([](const CallArgs& args) {
    int64_t start = 0, stop = 0, step = 1;
    const auto& p = args.positional;
    for (const Value& v : p)
      if (!v.is_int()) Throw("range() needs integers");
    if (p.size() == 1) stop = p[0].as_int();
    else if (p.size() >= 2) { start = p[0].as_int(); stop = p[1].as_int(); }
    if (p.size() >= 3) step = p[2].as_int();
    if (p.empty() || step == 0) Throw("range() needs 1 to 3 integers and a non-zero step");
    // Length first, so a huge range is an error instead of an allocation the process cannot
    // survive. Unsigned arithmetic: the distance between two int64 bounds fits in uint64.
    const bool up = step > 0;
    if (up ? start >= stop : start <= stop) return Value(Array{});
    const uint64_t span = up ? static_cast<uint64_t>(stop) - static_cast<uint64_t>(start)
                             : static_cast<uint64_t>(start) - static_cast<uint64_t>(stop);
    const uint64_t abs_step = up ? static_cast<uint64_t>(step) : 0 - static_cast<uint64_t>(step);
    const uint64_t count = span / abs_step + (span % abs_step != 0 ? 1 : 0);
    if (count > static_cast<uint64_t>(kMaxRangeItems))
      Throw(absl::StrCat("range() of more than ", kMaxRangeItems, " items (template limit)"));
    Array out;
    out.reserve(static_cast<size_t>(count));
    for (uint64_t k = 0; k < count; ++k)  // start + k*step lies between the bounds: it fits
      out.emplace_back(static_cast<int64_t>(static_cast<uint64_t>(start) + k * static_cast<uint64_t>(step)));
    return Value(std::move(out));
  }));
  auto make_dict = [](const CallArgs& args) {
    Object o;
    for (const Value& v : args.positional)
      if (v.is_object()) for (const auto& [k, x] : v.object().items) o.Set(k, x);
    for (const auto& [k, v] : args.keyword) o.Set(k, v);
    return Value(std::move(o));
  };
  g["namespace"] = Value(Callable(make_dict));
  g["dict"] = Value(Callable(make_dict));
  return g;
}

}  // namespace

absl::StatusOr<Template> Template::Compile(std::string_view source, const TemplateOptions& options) {
  LexOptions lex;
  lex.trim_blocks = options.trim_blocks;
  lex.lstrip_blocks = options.lstrip_blocks;
  auto tokens = Lex(source, lex);
  if (!tokens.ok()) return tokens.status();
  auto body = Parse(*tokens);
  if (!body.ok()) return body.status();
  auto compiled = std::make_shared<Compiled>();
  compiled->body = *std::move(body);
  compiled->globals = MakeGlobals();
  compiled->limits = options.limits;
  return Template(std::move(compiled));
}

absl::StatusOr<std::string> Template::Render(const Object& context) const {
  std::string out;
  try {
    Renderer renderer(compiled_->globals, context, compiled_->limits);
    renderer.Render(compiled_->body, out);
  } catch (const Error& e) {
    return absl::InvalidArgumentError(absl::StrCat("template line ", e.line, ": ", e.message));
  } catch (const std::bad_alloc&) {  // a limit missed somewhere: still no crash
    return absl::ResourceExhaustedError("the chat template ran out of memory while rendering");
  } catch (const std::length_error&) {
    return absl::ResourceExhaustedError("the chat template built a string or list too large to hold");
  }
  return out;
}

Value MakeStrftimeNow(std::function<absl::Time()> clock) {
  return Value(Callable([clock = std::move(clock)](const CallArgs& args) {
    const Value* fmt = args.Get("format", 0);
    if (fmt == nullptr || !fmt->is_string()) Throw("strftime_now() needs a format string");
    return Value(absl::FormatTime(fmt->as_string(), clock(), absl::LocalTimeZone()));
  }));
}

}  // namespace kvserve::jinja
