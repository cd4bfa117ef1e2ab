#include "jinja/renderer.h"

#include <climits>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "jinja/builtins.h"
#include "jinja/error.h"
#include "jinja/ops.h"
#include "jinja/value.h"

namespace kvserve::jinja {

// Exec and Eval recurse once per nested block, expression level and macro call; this bounds
// the sum, so no combination of limits can overflow the stack (a few hundred bytes a frame).
constexpr int kMaxRenderRecursion = 1000;

struct Renderer::DepthGuard {
  explicit DepthGuard(Renderer& r) : renderer(r) {
    if (++renderer.recursion_ > kMaxRenderRecursion) {
      --renderer.recursion_;
      Throw(absl::StrCat("template recursion deeper than ", kMaxRenderRecursion, " levels"));
    }
  }
  ~DepthGuard() { --renderer.recursion_; }
  Renderer& renderer;
};

// One macro or caller() invocation; macros may recurse (tool-schema templates do), but only
// so deep.
struct Renderer::CallFrame {
  explicit CallFrame(Renderer& r) : renderer(r) {
    if (++renderer.call_depth_ > renderer.limits_.max_call_depth) {
      --renderer.call_depth_;
      Throw(absl::StrCat("macro calls nested deeper than ", renderer.limits_.max_call_depth,
                         " levels (endless recursion?)"));
    }
  }
  ~CallFrame() { --renderer.call_depth_; }
  Renderer& renderer;
};

Renderer::Renderer(const Scope& globals, const Object& context, const RenderLimits& limits)
    : globals_(globals), limits_(limits) {
  scopes_.emplace_back();
  for (const auto& [k, v] : context.items) scopes_.back()[k] = v;
}

void Renderer::Step(int64_t n) {
  steps_ += n;
  if (steps_ > limits_.max_steps) {
    Throw(absl::StrCat("template took more than ", limits_.max_steps,
                       " evaluation steps (endless or very long loop?)"));
  }
}

void Renderer::CheckOutputSize(const std::string& out) const { CheckStringSize(out.size(), "the output"); }

void Renderer::CheckNesting(const Value& v) {
  // Iterative walk (the point is to avoid deep recursion); a value shared several times is
  // walked each time, which the step charge bounds.
  std::vector<std::pair<const Value*, int>> stack{{&v, 1}};
  int64_t visited = 0;
  while (!stack.empty()) {
    const auto [cur, depth] = stack.back();
    stack.pop_back();
    if (!cur->is_array() && !cur->is_object()) continue;
    ++visited;
    if (depth > limits_.max_value_depth) {
      Step(visited);
      Throw(absl::StrCat("lists and dicts nested deeper than ", limits_.max_value_depth,
                         " levels (template limit)"));
    }
    if (cur->is_array()) {
      for (const Value& x : cur->array()) stack.emplace_back(&x, depth + 1);
    } else {
      for (const auto& [k, x] : cur->object().items) stack.emplace_back(&x, depth + 1);
    }
  }
  Step(visited);
}

void Renderer::Render(const Body& body, std::string& out) {
  out_ = &out;
  Exec(body);
}

Value Renderer::Lookup(const std::string& name) const {
  for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
    auto found = it->find(name);
    if (found != it->end()) return found->second;
  }
  auto g = globals_.find(name);
  return g != globals_.end() ? g->second : Value();
}

Renderer::Flow Renderer::Exec(const Body& body) {
  for (const StmtPtr& s : body) {
    const Flow f = ExecOne(*s);
    if (f != Flow::kNormal) return f;
  }
  return Flow::kNormal;
}

Renderer::Flow Renderer::ExecOne(const Stmt& s) {
  try {
    DepthGuard depth(*this);
    Step();
    switch (s.kind) {
      case StmtKind::kText: *out_ += s.text; CheckOutputSize(*out_); break;
      case StmtKind::kOutput: Eval(*s.expr).AppendStr(*out_); CheckOutputSize(*out_); break;
      case StmtKind::kIf:
        for (size_t i = 0; i < s.conditions.size(); ++i)
          if (Eval(*s.conditions[i]).Truthy()) return Exec(s.bodies[i]);
        if (s.bodies.size() > s.conditions.size()) return Exec(s.bodies.back());
        break;
      case StmtKind::kFor: ExecFor(s); break;
      case StmtKind::kSet: ExecSet(s); break;
      case StmtKind::kMacro: scopes_.back()[s.text] = MakeMacro(s); break;
      case StmtKind::kCallBlock: {
        const Stmt* block = &s;
        Scope caller_scope;
        caller_scope["caller"] = Value(Callable([this, block](const CallArgs& args) {
          CallFrame frame(*this);
          scopes_.emplace_back();
          for (size_t i = 0; i < block->params.size(); ++i) {
            const Value* v = args.Get(block->params[i].name, i);
            scopes_.back()[block->params[i].name] =
                v ? *v : (block->params[i].default_value ? Eval(*block->params[i].default_value) : Value());
          }
          Value text = RenderToString(block->body);
          scopes_.pop_back();
          return text;
        }));
        scopes_.push_back(std::move(caller_scope));
        Value result = Eval(*s.expr);
        scopes_.pop_back();
        result.AppendStr(*out_);
        CheckOutputSize(*out_);
        break;
      }
      case StmtKind::kFilterBlock: {
        Value text = RenderToString(s.body);
        const Expr& f = *s.expr;
        CallArgs args = EvalArgs(f, 1);
        ApplyFilter(f.name, text, args).AppendStr(*out_);
        CheckOutputSize(*out_);
        break;
      }
      case StmtKind::kBreak: return Flow::kBreak;
      case StmtKind::kContinue: return Flow::kContinue;
    }
  } catch (Error& e) {
    if (e.line == 0) e.line = s.line;
    throw;
  }
  return Flow::kNormal;
}

Value Renderer::RenderToString(const Body& body) {
  std::string text;
  std::string* saved = out_;
  out_ = &text;
  Exec(body);
  out_ = saved;
  return Value(std::move(text));
}

void Renderer::ExecFor(const Stmt& s) {
  Array items = Iterate(Eval(*s.expr));
  scopes_.emplace_back();
  auto bind = [&](const Value& item) {
    Scope& scope = scopes_.back();
    if (s.targets.size() == 1) {
      scope[s.targets[0]] = item;
      return;
    }
    const Array parts = Iterate(item);
    if (parts.size() != s.targets.size())
      Throw(absl::StrCat("cannot unpack ", parts.size(), " values into ", s.targets.size(), " names"));
    for (size_t i = 0; i < parts.size(); ++i) scope[s.targets[i]] = parts[i];
  };
  if (s.cond) {  // `for x in xs if cond`: filter first, so loop.* counts the kept items
    Array kept;
    for (const Value& item : items) {
      bind(item);
      if (Eval(*s.cond).Truthy()) kept.push_back(item);
    }
    items = std::move(kept);
  }
  const int64_t n = static_cast<int64_t>(items.size());
  for (int64_t i = 0; i < n; ++i) {
    Step();
    bind(items[static_cast<size_t>(i)]);
    Object loop;
    loop.items.reserve(9);
    loop.items.emplace_back("index", Value(i + 1));
    loop.items.emplace_back("index0", Value(i));
    loop.items.emplace_back("revindex", Value(n - i));
    loop.items.emplace_back("revindex0", Value(n - i - 1));
    loop.items.emplace_back("first", Value(i == 0));
    loop.items.emplace_back("last", Value(i == n - 1));
    loop.items.emplace_back("length", Value(n));
    loop.items.emplace_back("previtem", i > 0 ? items[static_cast<size_t>(i - 1)] : Value());
    loop.items.emplace_back("nextitem", i + 1 < n ? items[static_cast<size_t>(i + 1)] : Value());
    scopes_.back()["loop"] = Value(std::move(loop));
    if (Exec(s.body) == Flow::kBreak) break;
  }
  scopes_.pop_back();
  if (n == 0 && !s.else_body.empty()) Exec(s.else_body);
}

void Renderer::ExecSet(const Stmt& s) {
  Value v = s.expr ? Eval(*s.expr) : RenderToString(s.body);
  if (!s.text.empty()) {  // set ns.attr = value
    Value target = Lookup(s.targets[0]);
    if (!target.is_object()) Throw(absl::StrCat("cannot set attribute '", s.text, "' on ", target.TypeName()));
    if (Reaches(v, target)) Throw(absl::StrCat("cannot set attribute '", s.text, "': the dict would contain itself"));
    target.object().Set(s.text, std::move(v));
    CheckNesting(target);
    return;
  }
  if (s.targets.size() == 1) {
    scopes_.back()[s.targets[0]] = std::move(v);
    return;
  }
  const Array parts = Iterate(v);
  if (parts.size() != s.targets.size())
    Throw(absl::StrCat("cannot unpack ", parts.size(), " values into ", s.targets.size(), " names"));
  for (size_t i = 0; i < parts.size(); ++i) scopes_.back()[s.targets[i]] = parts[i];
}

Value Renderer::MakeMacro(const Stmt& s) {
  const Stmt* macro = &s;
  return Value(Callable([this, macro](const CallArgs& args) {
    CallFrame frame(*this);
    Scope scope;
    for (size_t i = 0; i < macro->params.size(); ++i) {
      const Param& p = macro->params[i];
      const Value* v = args.Get(p.name, i);
      scope[p.name] = v ? *v : (p.default_value ? Eval(*p.default_value) : Value());
    }
    scopes_.push_back(std::move(scope));
    Value text = RenderToString(macro->body);
    scopes_.pop_back();
    return text;
  }));
}

CallArgs Renderer::EvalArgs(const Expr& e, size_t first_positional) {
  CallArgs args;
  args.positional.reserve(e.args.size() - first_positional);
  for (size_t i = first_positional; i < e.args.size(); ++i) args.positional.push_back(Eval(*e.args[i]));
  for (const auto& [k, v] : e.kwargs) args.keyword.emplace_back(k, Eval(*v));
  return args;
}

Value Renderer::EvalCall(const Expr& e) {
  const Expr& callee = *e.args[0];
  CallArgs args = EvalArgs(e, 1);
  if (callee.kind == ExprKind::kGetAttr) {
    Value obj = Eval(*callee.args[0]);
    if (obj.is_object()) {
      const Value* member = obj.object().Find(callee.name);
      if (member != nullptr && member->is_callable()) return member->callable()(args);
    }
    if (std::optional<Value> r = CallMethod(obj, callee.name, args)) {
      CheckNesting(obj);  // append / update may have deepened it
      return *std::move(r);
    }
    Throw(absl::StrCat(obj.TypeName(), " has no method '", callee.name, "'"));
  }
  Value f = Eval(callee);
  if (!f.is_callable()) {
    if (callee.kind == ExprKind::kName) Throw(absl::StrCat("'", callee.name, "' is undefined or not callable"));
    Throw(absl::StrCat("a ", f.TypeName(), " is not callable"));
  }
  return f.callable()(args);
}

Value Renderer::Eval(const Expr& e) {
  DepthGuard depth(*this);
  Step();
  switch (e.kind) {
    case ExprKind::kLiteral: return e.literal;
    case ExprKind::kName: return Lookup(e.name);
    case ExprKind::kList:
    case ExprKind::kTuple: {
      Array out;
      out.reserve(e.args.size());
      for (const ExprPtr& a : e.args) out.push_back(Eval(*a));
      Value v(std::move(out));
      CheckNesting(v);
      return v;
    }
    case ExprKind::kDict: {
      Object out;
      for (size_t i = 0; i + 1 < e.args.size(); i += 2) out.Set(Eval(*e.args[i]).Str(), Eval(*e.args[i + 1]));
      Value v(std::move(out));
      CheckNesting(v);
      return v;
    }
    case ExprKind::kGetAttr: return GetAttr(Eval(*e.args[0]), e.name);
    case ExprKind::kGetItem: return GetItem(Eval(*e.args[0]), Eval(*e.args[1]));
    case ExprKind::kSlice: {
      Value seq = Eval(*e.args[0]);
      std::optional<int64_t> bounds[3];
      for (int i = 0; i < 3; ++i) {
        if (!e.args[static_cast<size_t>(i) + 1]) continue;
        Value b = Eval(*e.args[static_cast<size_t>(i) + 1]);
        if (b.is_int()) bounds[i] = b.as_int();
        else if (!b.is_none()) Throw("slice indices must be integers");
      }
      return Slice(seq, bounds[0], bounds[1], bounds[2]);
    }
    case ExprKind::kCall: {
      Value v = EvalCall(e);
      CheckNesting(v);
      return v;
    }
    case ExprKind::kFilter: {
      Value input = Eval(*e.args[0]);
      Value v = ApplyFilter(e.name, input, EvalArgs(e, 1));
      CheckNesting(v);
      return v;
    }
    case ExprKind::kTest: {
      Value input = Eval(*e.args[0]);
      return Value(ApplyTest(e.name, input, EvalArgs(e, 1)) != e.negate);
    }
    case ExprKind::kUnary: {
      Value v = Eval(*e.args[0]);
      if (e.name == "not") return Value(!v.Truthy());
      if (e.name == "-") {
        if (v.is_int()) {
          if (v.as_int() == INT64_MIN) Throw("integer overflow in unary '-' (template integers are 64-bit)");
          return Value(-v.as_int());
        }
        if (v.is_float()) return Value(-v.as_number());
        Throw(absl::StrCat("bad operand type for unary -: ", v.TypeName()));
      }
      return v;
    }
    case ExprKind::kBinary: return BinaryOp(e.name, Eval(*e.args[0]), Eval(*e.args[1]));
    case ExprKind::kAnd: {
      Value a = Eval(*e.args[0]);
      return a.Truthy() ? Eval(*e.args[1]) : a;
    }
    case ExprKind::kOr: {
      Value a = Eval(*e.args[0]);
      return a.Truthy() ? a : Eval(*e.args[1]);
    }
    case ExprKind::kCond:
      if (Eval(*e.args[1]).Truthy()) return Eval(*e.args[0]);
      return e.args[2] ? Eval(*e.args[2]) : Value();
  }
  return Value();
}

}  // namespace kvserve::jinja
