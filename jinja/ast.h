// The parsed template: expression and statement nodes. Built once by the parser, then walked
// read-only by the renderer (a compiled template is immutable and may be rendered from many
// threads at once). Every node carries its source line for error messages.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "jinja/value.h"

namespace kvserve::jinja {

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

enum class ExprKind {
  kLiteral,   // literal
  kName,      // name
  kList,      // args
  kTuple,     // args
  kDict,      // args: key, value, key, value, ...
  kGetAttr,   // args[0].name
  kGetItem,   // args[0][args[1]]
  kSlice,     // args[0][args[1]:args[2]:args[3]] (null children are omitted bounds)
  kCall,      // args[0](args[1..], kwargs)
  kFilter,    // args[0] | name(args[1..], kwargs)
  kTest,      // args[0] is [not] name(args[1..])  (negate)
  kUnary,     // op args[0]: "-", "+", "not"
  kBinary,    // args[0] op args[1]: + - * / // % ** ~ == != < <= > >= in "not in"
  kAnd,       // args[0] and args[1]
  kOr,        // args[0] or args[1]
  kCond,      // args[0] if args[1] else args[2] (args[2] may be null)
};

struct Expr {
  ExprKind kind;
  int line = 0;
  Value literal;
  std::string name;  // name / attribute / filter / test / operator
  bool negate = false;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  int height = 1;  // of this subtree; the parser keeps it <= kMaxExprHeight (jinja/limits.h)
};

enum class StmtKind {
  kText,      // text
  kOutput,    // {{ expr }}
  kIf,        // conditions[i] -> bodies[i]; bodies.size() == conditions.size() + 1 when an else
  kFor,       // for targets in expr [if cond] body [else else_body]
  kSet,       // set targets = expr | set target.attr = expr | block set (expr null, body)
  kMacro,     // macro name(params) body
  kCallBlock, // call[(params)] expr body
  kFilterBlock,  // filter expr(with args[0] a placeholder) body
  kBreak,
  kContinue,
};

struct Param {
  std::string name;
  ExprPtr default_value;  // may be null
};

struct Stmt {
  StmtKind kind;
  int line = 0;
  std::string text;                 // kText; macro name; kSet attribute (target.attr = ...)
  ExprPtr expr;                     // output/for iterable/set value/call expression/filter
  ExprPtr cond;                     // for ... if cond
  std::vector<std::string> targets; // for/set names
  std::vector<ExprPtr> conditions;  // if/elif
  std::vector<Body> bodies;         // if branches (+ else)
  Body body;                        // for/macro/call/block-set/filter body
  Body else_body;                   // for ... else
  std::vector<Param> params;        // macro / call parameters
};

}  // namespace kvserve::jinja
