#include "jinja/template.h"

#include "absl/strings/str_cat.h"
#include "jinja/ast.h"
#include "jinja/error.h"
#include "jinja/lexer.h"
#include "jinja/parser.h"
#include "jinja/renderer.h"

namespace kvserve::jinja {

struct Template::Compiled {
  Body body;
  Scope globals;
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
    Array out;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) out.emplace_back(i);
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
  return Template(std::move(compiled));
}

absl::StatusOr<std::string> Template::Render(const Object& context) const {
  std::string out;
  try {
    Renderer renderer(compiled_->globals, context);
    renderer.Render(compiled_->body, out);
  } catch (const Error& e) {
    return absl::InvalidArgumentError(absl::StrCat("template line ", e.line, ": ", e.message));
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
