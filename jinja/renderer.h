// Walks a parsed template and writes its output. One Renderer per Render() call: it holds the
// variable scopes (the context at the bottom, one scope per for loop and macro call) and the
// output buffer; the tree it walks is shared and never modified.
//
//   scopes_:  [ context | set at top level ] [ for-loop body ] [ macro call ] ...   (top = back)
//   lookup walks top to bottom, then the template's globals (range, namespace, dict, ...);
//   `set` writes the top scope, so a set inside a loop does not leak out (Jinja's rule, and
//   why templates use namespace() objects, which are shared dicts, to carry state out).
#pragma once

#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "jinja/ast.h"
#include "jinja/limits.h"
#include "jinja/value.h"

namespace kvserve::jinja {

using Scope = absl::flat_hash_map<std::string, Value>;

class Renderer {
 public:
  Renderer(const Scope& globals, const Object& context, const RenderLimits& limits = {});
  // Throws jinja::Error (line set) on failure.
  void Render(const Body& body, std::string& out);

 private:
  enum class Flow { kNormal, kBreak, kContinue };
  Flow Exec(const Body& body);
  Flow ExecOne(const Stmt& s);
  void ExecFor(const Stmt& s);
  void ExecSet(const Stmt& s);
  Value Eval(const Expr& e);
  Value EvalCall(const Expr& e);
  CallArgs EvalArgs(const Expr& e, size_t first_positional);
  Value Lookup(const std::string& name) const;
  Value MakeMacro(const Stmt& s);
  Value RenderToString(const Body& body);
  // Counts one evaluation step against limits_.max_steps (throws past it).
  void Step(int64_t n = 1);
  // Throws unless `v` nests lists/dicts at most limits_.max_value_depth deep (new containers
  // and containers a method mutated are checked; the walk is charged as steps).
  void CheckNesting(const Value& v);
  void CheckOutputSize(const std::string& out) const;
  struct CallFrame;   // bounds macro / caller() depth
  struct DepthGuard;  // bounds Exec/Eval recursion (macro calls, nested blocks, expressions)

  const Scope& globals_;
  std::vector<Scope> scopes_;
  std::string* out_ = nullptr;
  RenderLimits limits_;
  int64_t steps_ = 0;
  int call_depth_ = 0;   // macro and caller() frames
  int recursion_ = 0;    // Exec/Eval frames
};

}  // namespace kvserve::jinja
