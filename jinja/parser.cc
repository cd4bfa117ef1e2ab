#include "jinja/parser.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <initializer_list>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "jinja/limits.h"

namespace kvserve::jinja {
namespace {

struct ParseError {
  int line;
  std::string message;
};

class Parser {
 public:
  explicit Parser(const std::vector<Token>& tokens) : t_(tokens) {}

  Body ParseTemplate() {
    Body body = ParseBody({});
    if (Peek().kind != TokenKind::kEnd) Fail("unexpected tag");
    return body;
  }

 private:
  // ------------------------------------------------------------------ token helpers
  const Token& Peek(size_t ahead = 0) const {
    const size_t i = std::min(pos_ + ahead, t_.size() - 1);
    return t_[i];
  }
  const Token& Next() {
    const Token& tok = t_[pos_];
    if (pos_ + 1 < t_.size()) ++pos_;
    return tok;
  }
  [[noreturn]] void Fail(std::string_view what) const {
    const Token& tok = Peek();
    std::string got = tok.kind == TokenKind::kEnd        ? "end of template"
                      : tok.kind == TokenKind::kBlockEnd ? "'%}'"
                      : tok.kind == TokenKind::kVarEnd   ? "'}}'"
                                                         : absl::StrCat("'", tok.text, "'");
    throw ParseError{tok.line, absl::StrCat(std::string(what), " (found ", got, ")")};
  }
  bool IsOp(std::string_view op, size_t ahead = 0) const {
    return Peek(ahead).kind == TokenKind::kOp && Peek(ahead).text == op;
  }
  bool IsName(std::string_view name, size_t ahead = 0) const {
    return Peek(ahead).kind == TokenKind::kName && Peek(ahead).text == name;
  }
  bool AcceptOp(std::string_view op) {
    if (!IsOp(op)) return false;
    Next();
    return true;
  }
  bool AcceptName(std::string_view name) {
    if (!IsName(name)) return false;
    Next();
    return true;
  }
  void ExpectOp(std::string_view op) {
    if (!AcceptOp(op)) Fail(absl::StrCat("expected '", std::string(op), "'"));
  }
  std::string ExpectName() {
    if (Peek().kind != TokenKind::kName) Fail("expected a name");
    return Next().text;
  }
  void ExpectBlockEnd() {
    if (Peek().kind != TokenKind::kBlockEnd) Fail("expected '%}'");
    Next();
  }

  // Appends `child` (may be null: an omitted bound) to parent.args and keeps the tree's
  // height bounded: chains like a+a+a+... or x|f|f|f... grow it without recursing here, but
  // the renderer and the destructor recurse once per level.
  void Adopt(Expr& parent, ExprPtr child) {
    if (child != nullptr) Grow(parent, *child);
    parent.args.push_back(std::move(child));
  }
  void Grow(Expr& parent, const Expr& child) {
    parent.height = std::max(parent.height, child.height + 1);
    if (parent.height > kMaxExprHeight) {
      throw ParseError{parent.line, absl::StrCat("expression nested deeper than ", kMaxExprHeight,
                                                 " levels (template limit)")};
    }
  }
  // Bounds the parser's own recursion (brackets, `not not ...`, `- - ...`, nested
  // statements): one guard per recursive rule.
  struct NestingGuard {
    explicit NestingGuard(Parser& p) : parser(p) {
      if (++parser.nesting_ > kMaxNesting) {
        --parser.nesting_;
        throw ParseError{parser.Peek().line, absl::StrCat("brackets or blocks nested deeper than ",
                                                          kMaxNesting, " levels (template limit)")};
      }
    }
    ~NestingGuard() { --parser.nesting_; }
    Parser& parser;
  };

  ExprPtr Make(ExprKind kind, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
  }

  // ------------------------------------------------------------------ statements
  // Parses until a block tag whose keyword is in `ends` (left unconsumed: pos_ at the name).
  Body ParseBody(std::initializer_list<std::string_view> ends) {
    Body body;
    while (true) {
      const Token& tok = Peek();
      if (tok.kind == TokenKind::kEnd) {
        if (ends.size() > 0)
          Fail(absl::StrCat("missing {% ", std::string(*(ends.end() - 1)), " %}"));
        return body;
      }
      if (tok.kind == TokenKind::kText) {
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::kText;
        s->line = tok.line;
        s->text = Next().text;
        body.push_back(std::move(s));
      } else if (tok.kind == TokenKind::kVarBegin) {
        Next();
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::kOutput;
        s->line = tok.line;
        s->expr = ParseTupleOrExpr();
        if (Peek().kind != TokenKind::kVarEnd) Fail("expected '}}'");
        Next();
        body.push_back(std::move(s));
      } else if (tok.kind == TokenKind::kBlockBegin) {
        const Token& kw = Peek(1);
        for (std::string_view e : ends) {
          if (kw.kind == TokenKind::kName && kw.text == e) {
            Next();
            return body;
          }
        }
        Next();
        body.push_back(ParseStatement());
      } else {
        Fail("unexpected token");
      }
    }
  }

  StmtPtr ParseStatement() {
    NestingGuard guard(*this);
    const int line = Peek().line;
    const std::string kw = ExpectName();
    auto s = std::make_unique<Stmt>();
    s->line = line;
    if (kw == "if") {
      s->kind = StmtKind::kIf;
      s->conditions.push_back(ParseExpr());
      ExpectBlockEnd();
      while (true) {
        s->bodies.push_back(ParseBody({"elif", "else", "endif"}));
        const std::string end = Next().text;
        if (end == "elif") {
          s->conditions.push_back(ParseExpr());
          ExpectBlockEnd();
        } else if (end == "else") {
          ExpectBlockEnd();
          s->bodies.push_back(ParseBody({"endif"}));
          Next();
          ExpectBlockEnd();
          break;
        } else {
          ExpectBlockEnd();
          break;
        }
      }
    } else if (kw == "for") {
      s->kind = StmtKind::kFor;
      s->targets = ParseTargets();
      if (!AcceptName("in")) Fail("expected 'in' in for loop");
      s->expr = ParseTupleOrExpr(/*with_cond=*/false);
      if (AcceptName("if")) s->cond = ParseExpr();
      AcceptName("recursive");
      ExpectBlockEnd();
      s->body = ParseBody({"else", "endfor"});
      if (Next().text == "else") {
        ExpectBlockEnd();
        s->else_body = ParseBody({"endfor"});
        Next();
      }
      ExpectBlockEnd();
    } else if (kw == "set") {
      s->kind = StmtKind::kSet;
      s->targets = ParseTargets();
      if (s->targets.size() == 1 && AcceptOp(".")) s->text = ExpectName();
      if (AcceptOp("=")) {
        s->expr = ParseTupleOrExpr();
        ExpectBlockEnd();
      } else {
        ExpectBlockEnd();
        s->body = ParseBody({"endset"});
        Next();
        ExpectBlockEnd();
      }
    } else if (kw == "macro") {
      s->kind = StmtKind::kMacro;
      s->text = ExpectName();
      ParseParams(s->params);
      ExpectBlockEnd();
      s->body = ParseBody({"endmacro"});
      Next();
      ExpectBlockEnd();
    } else if (kw == "call") {
      s->kind = StmtKind::kCallBlock;
      if (IsOp("(")) ParseParams(s->params);
      s->expr = ParseExpr();
      if (s->expr->kind != ExprKind::kCall) Fail("{% call %} needs a macro call");
      ExpectBlockEnd();
      s->body = ParseBody({"endcall"});
      Next();
      ExpectBlockEnd();
    } else if (kw == "filter") {
      s->kind = StmtKind::kFilterBlock;
      auto placeholder = Make(ExprKind::kLiteral, line);
      s->expr = ParseFilter(std::move(placeholder));
      ExpectBlockEnd();
      s->body = ParseBody({"endfilter"});
      Next();
      ExpectBlockEnd();
    } else if (kw == "break" || kw == "continue") {
      s->kind = kw == "break" ? StmtKind::kBreak : StmtKind::kContinue;
      ExpectBlockEnd();
    } else if (kw == "generation") {
      // transformers' {% generation %} marks assistant text for masks; it renders its body.
      s->kind = StmtKind::kIf;
      auto yes = Make(ExprKind::kLiteral, line);
      yes->literal = Value(true);
      s->conditions.push_back(std::move(yes));
      ExpectBlockEnd();
      s->bodies.push_back(ParseBody({"endgeneration"}));
      Next();
      ExpectBlockEnd();
    } else {
      throw ParseError{line, absl::StrCat("unknown statement '", kw, "'")};
    }
    return s;
  }

  std::vector<std::string> ParseTargets() {
    std::vector<std::string> names;
    const bool paren = AcceptOp("(");
    names.push_back(ExpectName());
    while (AcceptOp(",")) names.push_back(ExpectName());
    if (paren) ExpectOp(")");
    return names;
  }

  void ParseParams(std::vector<Param>& params) {
    ExpectOp("(");
    while (!IsOp(")")) {
      Param p;
      p.name = ExpectName();
      if (AcceptOp("=")) p.default_value = ParseExpr();
      params.push_back(std::move(p));
      if (!AcceptOp(",")) break;
    }
    ExpectOp(")");
  }

  // ------------------------------------------------------------------ expressions
  ExprPtr ParseTupleOrExpr(bool with_cond = true) {
    const int line = Peek().line;
    ExprPtr first = with_cond ? ParseExpr() : ParseOr();
    if (!IsOp(",")) return first;
    auto tuple = Make(ExprKind::kTuple, line);
    Adopt(*tuple, std::move(first));
    while (AcceptOp(",")) {
      if (Peek().kind == TokenKind::kBlockEnd || Peek().kind == TokenKind::kVarEnd) break;
      Adopt(*tuple, with_cond ? ParseExpr() : ParseOr());
    }
    return tuple;
  }

  ExprPtr ParseExpr() {
    NestingGuard guard(*this);
    ExprPtr value = ParseOr();
    while (IsName("if")) {
      const int line = Next().line;
      auto cond = Make(ExprKind::kCond, line);
      Adopt(*cond, std::move(value));
      Adopt(*cond, ParseOr());
      Adopt(*cond, AcceptName("else") ? ParseExpr() : nullptr);
      value = std::move(cond);
    }
    return value;
  }

  ExprPtr ParseOr() {
    ExprPtr left = ParseAnd();
    while (IsName("or")) {
      auto e = Make(ExprKind::kOr, Next().line);
      Adopt(*e, std::move(left));
      Adopt(*e, ParseAnd());
      left = std::move(e);
    }
    return left;
  }

  ExprPtr ParseAnd() {
    ExprPtr left = ParseNot();
    while (IsName("and")) {
      auto e = Make(ExprKind::kAnd, Next().line);
      Adopt(*e, std::move(left));
      Adopt(*e, ParseNot());
      left = std::move(e);
    }
    return left;
  }

  ExprPtr ParseNot() {
    if (IsName("not")) {
      NestingGuard guard(*this);
      auto e = Make(ExprKind::kUnary, Next().line);
      e->name = "not";
      Adopt(*e, ParseNot());
      return e;
    }
    return ParseCompare();
  }

  ExprPtr Binary(std::string op, ExprPtr left, ExprPtr right, int line) {
    auto e = Make(ExprKind::kBinary, line);
    e->name = std::move(op);
    Adopt(*e, std::move(left));
    Adopt(*e, std::move(right));
    return e;
  }

  ExprPtr ParseCompare() {
    ExprPtr left = ParseMath1();
    while (true) {
      const int line = Peek().line;
      std::string op;
      if (Peek().kind == TokenKind::kOp &&
          (Peek().text == "==" || Peek().text == "!=" || Peek().text == "<" ||
           Peek().text == "<=" || Peek().text == ">" || Peek().text == ">=")) {
        op = Next().text;
      } else if (IsName("in")) {
        Next();
        op = "in";
      } else if (IsName("not") && IsName("in", 1)) {
        Next();
        Next();
        op = "not in";
      } else {
        return left;
      }
      left = Binary(op, std::move(left), ParseMath1(), line);
    }
  }

  ExprPtr ParseLeftAssoc(std::initializer_list<std::string_view> ops, ExprPtr (Parser::*next)()) {
    ExprPtr left = (this->*next)();
    while (true) {
      bool matched = false;
      for (std::string_view op : ops) {
        if (IsOp(op)) {
          const int line = Next().line;
          left = Binary(std::string(op), std::move(left), (this->*next)(), line);
          matched = true;
          break;
        }
      }
      if (!matched) return left;
    }
  }
  ExprPtr ParseMath1() { return ParseLeftAssoc({"+", "-"}, &Parser::ParseConcat); }
  ExprPtr ParseConcat() { return ParseLeftAssoc({"~"}, &Parser::ParseMath2); }
  ExprPtr ParseMath2() { return ParseLeftAssoc({"*", "/", "//", "%"}, &Parser::ParsePow); }
  ExprPtr ParsePow() { return ParseLeftAssoc({"**"}, &Parser::ParseUnaryFiltered); }
  ExprPtr ParseUnaryFiltered() { return ParseUnary(true); }

  ExprPtr ParseUnary(bool with_filter) {
    ExprPtr node;
    if (IsOp("-") || IsOp("+")) {
      NestingGuard guard(*this);
      auto e = Make(ExprKind::kUnary, Peek().line);
      e->name = Next().text;
      Adopt(*e, ParseUnary(false));
      node = std::move(e);
    } else {
      node = ParsePostfix(ParsePrimary());
    }
    return with_filter ? ParseFilterExpr(std::move(node)) : std::move(node);
  }

  ExprPtr ParsePrimary() {
    const Token& tok = Peek();
    const int line = tok.line;
    switch (tok.kind) {
      case TokenKind::kName: {
        const std::string name = Next().text;
        auto e = Make(ExprKind::kLiteral, line);
        if (name == "true" || name == "True") e->literal = Value(true);
        else if (name == "false" || name == "False") e->literal = Value(false);
        else if (name == "none" || name == "None") e->literal = Value::None();
        else {
          e->kind = ExprKind::kName;
          e->name = name;
        }
        return e;
      }
      case TokenKind::kString: {
        std::string s = Next().text;
        while (Peek().kind == TokenKind::kString) s += Next().text;  // "a" "b" concatenates
        auto e = Make(ExprKind::kLiteral, line);
        e->literal = Value(std::move(s));
        return e;
      }
      case TokenKind::kInt: {
        auto e = Make(ExprKind::kLiteral, line);
        e->literal = Value(static_cast<int64_t>(std::strtoll(Next().text.c_str(), nullptr, 10)));
        return e;
      }
      case TokenKind::kFloat: {
        auto e = Make(ExprKind::kLiteral, line);
        e->literal = Value(std::strtod(Next().text.c_str(), nullptr));
        return e;
      }
      case TokenKind::kOp:
        if (AcceptOp("(")) {
          if (AcceptOp(")")) return Make(ExprKind::kTuple, line);
          ExprPtr inner = ParseTupleOrExpr();
          ExpectOp(")");
          return inner;
        }
        if (AcceptOp("[")) {
          auto e = Make(ExprKind::kList, line);
          while (!IsOp("]")) {
            Adopt(*e, ParseExpr());
            if (!AcceptOp(",")) break;
          }
          ExpectOp("]");
          return e;
        }
        if (AcceptOp("{")) {
          auto e = Make(ExprKind::kDict, line);
          while (!IsOp("}")) {
            Adopt(*e, ParseExpr());
            ExpectOp(":");
            Adopt(*e, ParseExpr());
            if (!AcceptOp(",")) break;
          }
          ExpectOp("}");
          return e;
        }
        break;
      default: break;
    }
    Fail("expected an expression");
  }

  ExprPtr ParsePostfix(ExprPtr node) {
    while (true) {
      const int line = Peek().line;
      if (AcceptOp(".")) {
        if (Peek().kind == TokenKind::kInt) {  // x.0 is x[0]
          auto e = Make(ExprKind::kGetItem, line);
          auto idx = Make(ExprKind::kLiteral, line);
          idx->literal = Value(static_cast<int64_t>(std::strtoll(Next().text.c_str(), nullptr, 10)));
          Adopt(*e, std::move(node));
          Adopt(*e, std::move(idx));
          node = std::move(e);
          continue;
        }
        auto e = Make(ExprKind::kGetAttr, line);
        e->name = ExpectName();
        Adopt(*e, std::move(node));
        node = std::move(e);
      } else if (AcceptOp("[")) {
        node = ParseSubscript(std::move(node), line);
      } else if (IsOp("(")) {
        node = ParseCall(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr ParseSubscript(ExprPtr node, int line) {
    ExprPtr parts[3];
    bool slice = false;
    if (!IsOp(":")) parts[0] = ParseExpr();
    if (AcceptOp(":")) {
      slice = true;
      if (!IsOp(":") && !IsOp("]")) parts[1] = ParseExpr();
      if (AcceptOp(":") && !IsOp("]")) parts[2] = ParseExpr();
    }
    ExpectOp("]");
    auto e = Make(slice ? ExprKind::kSlice : ExprKind::kGetItem, line);
    Adopt(*e, std::move(node));
    Adopt(*e, std::move(parts[0]));
    if (slice) {
      Adopt(*e, std::move(parts[1]));
      Adopt(*e, std::move(parts[2]));
    }
    return e;
  }

  // Parses `(args, name=value)` into e (positional args appended after those already there).
  void ParseArgs(Expr& e) {
    ExpectOp("(");
    while (!IsOp(")")) {
      if (Peek().kind == TokenKind::kName && IsOp("=", 1)) {
        std::string name = Next().text;
        Next();
        ExprPtr value = ParseExpr();
        Grow(e, *value);
        e.kwargs.emplace_back(std::move(name), std::move(value));
      } else {
        Adopt(e, ParseExpr());
      }
      if (!AcceptOp(",")) break;
    }
    ExpectOp(")");
  }

  ExprPtr ParseCall(ExprPtr callee) {
    auto e = Make(ExprKind::kCall, Peek().line);
    Adopt(*e, std::move(callee));
    ParseArgs(*e);
    return e;
  }

  ExprPtr ParseFilter(ExprPtr input) {
    auto e = Make(ExprKind::kFilter, Peek().line);
    e->name = ExpectName();
    while (AcceptOp(".")) e->name += "." + ExpectName();
    Adopt(*e, std::move(input));
    if (IsOp("(")) ParseArgs(*e);
    return e;
  }

  ExprPtr ParseFilterExpr(ExprPtr node) {
    while (true) {
      if (AcceptOp("|")) {
        node = ParseFilter(std::move(node));
      } else if (IsName("is")) {
        auto e = Make(ExprKind::kTest, Next().line);
        e->negate = AcceptName("not");
        e->name = ExpectName();
        Adopt(*e, std::move(node));
        if (IsOp("(")) {
          ParseArgs(*e);
        } else if (StartsTestArgument()) {
          Adopt(*e, ParsePostfix(ParsePrimary()));
        }
        node = std::move(e);
      } else if (IsOp("(")) {
        node = ParseCall(std::move(node));
      } else {
        return node;
      }
    }
  }

  bool StartsTestArgument() const {
    const Token& tok = Peek();
    if (tok.kind == TokenKind::kString || tok.kind == TokenKind::kInt ||
        tok.kind == TokenKind::kFloat)
      return true;
    if (tok.kind == TokenKind::kOp) return tok.text == "[" || tok.text == "{";
    if (tok.kind != TokenKind::kName) return false;
    for (std::string_view kw : {"else", "or", "and", "if", "in", "is", "not"})
      if (tok.text == kw) return false;
    return true;
  }

  const std::vector<Token>& t_;
  size_t pos_ = 0;
  int nesting_ = 0;
};

}  // namespace

absl::StatusOr<Body> Parse(const std::vector<Token>& tokens) {
  try {
    return Parser(tokens).ParseTemplate();
  } catch (const ParseError& e) {
    return absl::InvalidArgumentError(absl::StrCat("template line ", e.line, ": ", e.message));
  }
}

}  // namespace kvserve::jinja
