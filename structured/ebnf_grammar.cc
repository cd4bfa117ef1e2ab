#include "structured/ebnf_grammar.h"

#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/absl_compat.h"
#include "tokenizer/utf8.h"

namespace kvserve::structured {
namespace {

// The grammar as written: terminals are already byte-level regexes.
struct GNode {
  enum class Kind { kTerminal, kRef, kSeq, kAlt, kRepeat };
  Kind kind = Kind::kSeq;
  RegexNode terminal;
  std::string name;  // kRef
  std::vector<GNode> kids;
  int min = 0, max = -1;
};

bool IsNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

class Parser {
 public:
  explicit Parser(std::string_view text) : t_(text) {}

  absl::Status Parse(std::map<std::string, GNode>& rules, std::vector<std::string>& order) {
    SkipSpace();
    while (pos_ < t_.size()) {
      const size_t at = pos_;
      const std::string name = ReadName();
      if (name.empty()) return Error("expected a rule name");
      SkipSpace();
      if (t_.substr(pos_, 3) != "::=") return Error(absl::StrCat("expected '::=' after '", name, "'"));
      pos_ += 3;
      auto body = ParseAlt();
      if (!body.ok()) return body.status();
      if (pos_ < t_.size() && t_[pos_] == ')') return Error("unbalanced ')'");
      if (!rules.emplace(name, *std::move(body)).second) {
        pos_ = at;
        return Error(absl::StrCat("rule '", name, "' is defined twice"));
      }
      order.push_back(name);
      SkipSpace();
    }
    return absl::OkStatus();
  }

 private:
  absl::Status Error(std::string_view why) const {
    return absl::InvalidArgumentError(absl::StrCat(base::AsAbsl(why), " at offset ", pos_));
  }

  void SkipSpace() {
    while (pos_ < t_.size()) {
      const char c = t_[pos_];
      if (c == '#') {
        while (pos_ < t_.size() && t_[pos_] != '\n') ++pos_;
      } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++pos_;
      } else {
        break;
      }
    }
  }

  std::string ReadName() {
    const size_t b = pos_;
    while (pos_ < t_.size() && IsNameChar(t_[pos_])) ++pos_;
    return std::string(t_.substr(b, pos_ - b));
  }

  // At a name followed by "::=": the next rule starts here.
  bool AtRuleStart() const {
    size_t p = pos_;
    while (p < t_.size() && IsNameChar(t_[p])) ++p;
    if (p == pos_) return false;
    while (p < t_.size() && (t_[p] == ' ' || t_[p] == '\t' || t_[p] == '\n' || t_[p] == '\r')) ++p;
    return t_.substr(p, 3) == "::=";
  }

  absl::StatusOr<GNode> ParseAlt() {
    GNode alt;
    alt.kind = GNode::Kind::kAlt;
    for (;;) {
      auto seq = ParseSeq();
      if (!seq.ok()) return seq;
      alt.kids.push_back(*std::move(seq));
      SkipSpace();
      if (pos_ >= t_.size() || t_[pos_] != '|') break;
      ++pos_;
    }
    if (alt.kids.size() == 1) return std::move(alt.kids[0]);
    return alt;
  }

  absl::StatusOr<GNode> ParseSeq() {
    GNode seq;
    seq.kind = GNode::Kind::kSeq;
    for (;;) {
      SkipSpace();
      if (pos_ >= t_.size() || t_[pos_] == '|' || t_[pos_] == ')' || AtRuleStart()) break;
      auto item = ParseItem();
      if (!item.ok()) return item;
      auto quantified = ParseQuantifiers(*std::move(item));
      if (!quantified.ok()) return quantified;
      seq.kids.push_back(*std::move(quantified));
    }
    if (seq.kids.size() == 1) return std::move(seq.kids[0]);
    return seq;
  }

  absl::StatusOr<GNode> ParseQuantifiers(GNode item) {
    for (;;) {
      if (pos_ >= t_.size()) return item;
      int min = 0, max = -1;
      const char c = t_[pos_];
      if (c == '*') {
        ++pos_;
      } else if (c == '+') {
        ++pos_;
        min = 1;
      } else if (c == '?') {
        ++pos_;
        max = 1;
      } else if (c == '{') {
        ++pos_;
        SkipSpace();
        min = ReadInt();
        SkipSpace();
        max = min;
        if (pos_ < t_.size() && t_[pos_] == ',') {
          ++pos_;
          SkipSpace();
          max = pos_ < t_.size() && t_[pos_] == '}' ? -1 : ReadInt();
          SkipSpace();
        }
        if (min < 0 || pos_ >= t_.size() || t_[pos_] != '}') return Error("expected {m}, {m,} or {m,n}");
        ++pos_;
        if (min > 1000 || max > 1000) return Error("repetition counts above 1000");
        if (max >= 0 && max < min) return Error("repetition {m,n} with n < m");
      } else {
        return item;
      }
      GNode rep;
      rep.kind = GNode::Kind::kRepeat;
      rep.min = min;
      rep.max = max;
      rep.kids.push_back(std::move(item));
      item = std::move(rep);
    }
  }

  int ReadInt() {
    if (pos_ >= t_.size() || t_[pos_] < '0' || t_[pos_] > '9') return -1;
    int v = 0;
    while (pos_ < t_.size() && t_[pos_] >= '0' && t_[pos_] <= '9' && v < 100000) v = v * 10 + (t_[pos_++] - '0');
    return v;
  }

  static GNode Terminal(RegexNode r) {
    GNode n;
    n.kind = GNode::Kind::kTerminal;
    n.terminal = std::move(r);
    return n;
  }

  absl::StatusOr<GNode> ParseItem() {
    const char c = t_[pos_];
    if (c == '"') return ParseString();
    if (c == '[') {
      size_t e = pos_ + 1;
      if (e < t_.size() && t_[e] == '^') ++e;
      while (e < t_.size() && t_[e] != ']') e += t_[e] == '\\' ? 2 : 1;
      if (e >= t_.size()) return Error("missing ']'");
      auto cls = ParseRegex(t_.substr(pos_, e + 1 - pos_));
      if (!cls.ok()) return Error(absl::StrCat("character class: ", std::string(cls.status().message())));
      pos_ = e + 1;
      return Terminal(*std::move(cls));
    }
    if (c == '.') {
      ++pos_;
      return Terminal(RegexNode::AnyChar(ByteSet()));
    }
    if (c == '(') {
      ++pos_;
      auto inner = ParseAlt();
      if (!inner.ok()) return inner;
      SkipSpace();
      if (pos_ >= t_.size() || t_[pos_] != ')') return Error("missing ')'");
      ++pos_;
      return inner;
    }
    if (IsNameChar(c)) {
      GNode ref;
      ref.kind = GNode::Kind::kRef;
      ref.name = ReadName();
      return ref;
    }
    return Error(absl::StrCat("unexpected character '", std::string(1, c), "'"));
  }

  absl::StatusOr<GNode> ParseString() {
    ++pos_;  // '"'
    std::string bytes;
    while (pos_ < t_.size() && t_[pos_] != '"') {
      if (t_[pos_] != '\\') {
        bytes.push_back(t_[pos_++]);
        continue;
      }
      if (pos_ + 1 >= t_.size()) break;
      const char e = t_[pos_ + 1];
      pos_ += 2;
      switch (e) {
        case 'n': bytes.push_back('\n'); break;
        case 't': bytes.push_back('\t'); break;
        case 'r': bytes.push_back('\r'); break;
        case '\\': case '"': case '\'': case '[': case ']': bytes.push_back(e); break;
        case 'x': case 'u': case 'U': {
          const size_t digits = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          if (pos_ + digits > t_.size()) return Error("short \\x, \\u or \\U escape");
          char32_t cp = 0;
          for (size_t i = 0; i < digits; ++i) {
            const char h = t_[pos_++];
            const int v = (h >= '0' && h <= '9') ? h - '0' : (h >= 'a' && h <= 'f') ? h - 'a' + 10
                          : (h >= 'A' && h <= 'F') ? h - 'A' + 10 : -1;
            if (v < 0) return Error("bad hex digit in an escape");
            cp = cp * 16 + static_cast<char32_t>(v);
          }
          if (cp > 0x10FFFF) return Error("code point beyond U+10FFFF");
          tokenizer::AppendUtf8(cp, bytes);
          break;
        }
        default:
          return Error(absl::StrCat("unknown escape \\", std::string(1, e)));
      }
    }
    if (pos_ >= t_.size()) return Error("unterminated string");
    ++pos_;
    return Terminal(RegexNode::Literal(bytes));
  }

  std::string_view t_;
  size_t pos_ = 0;
};

// Rules that can derive a finite string (least fixpoint).
bool Productive(const GNode& n, const std::set<std::string>& productive) {
  switch (n.kind) {
    case GNode::Kind::kTerminal: return true;
    case GNode::Kind::kRef: return productive.count(n.name) > 0;
    case GNode::Kind::kSeq:
      for (const GNode& k : n.kids) {
        if (!Productive(k, productive)) return false;
      }
      return true;
    case GNode::Kind::kAlt:
      for (const GNode& k : n.kids) {
        if (Productive(k, productive)) return true;
      }
      return false;
    case GNode::Kind::kRepeat: return n.min == 0 || Productive(n.kids[0], productive);
  }
  return false;
}

absl::Status CheckRefs(const GNode& n, const std::map<std::string, GNode>& rules, const std::string& in_rule) {
  if (n.kind == GNode::Kind::kRef && !rules.count(n.name)) {
    return absl::InvalidArgumentError(absl::StrCat("rule '", in_rule, "': refers to undefined rule '", n.name, "'"));
  }
  for (const GNode& k : n.kids) {
    if (auto s = CheckRefs(k, rules, in_rule); !s.ok()) return s;
  }
  return absl::OkStatus();
}

void CollectRefs(const GNode& n, std::vector<std::string>& out) {
  if (n.kind == GNode::Kind::kRef) out.push_back(n.name);
  for (const GNode& k : n.kids) CollectRefs(k, out);
}

class Expander {
 public:
  explicit Expander(const std::map<std::string, GNode>& rules) : rules_(rules) {}

  absl::StatusOr<RegexNode> ExpandRule(const std::string& name) {
    int& open = open_[name];
    if (open >= kMaxRecursion) return RegexNode::Bytes(ByteSet());  // this branch ends here
    ++open;
    stack_.push_back(name);
    auto r = Expand(rules_.at(name));
    stack_.pop_back();
    --open_[name];
    return r;
  }

 private:
  absl::StatusOr<RegexNode> Expand(const GNode& n) {
    if (++nodes_ > kMaxExpandedNodes) {
      return absl::InvalidArgumentError(absl::StrCat("rule '", stack_.back(), "': expanding its recursion ", kMaxRecursion,
                                                     " levels deep exceeds ", kMaxExpandedNodes,
                                                     " nodes; simplify the grammar"));
    }
    switch (n.kind) {
      case GNode::Kind::kTerminal: return n.terminal;
      case GNode::Kind::kRef: return ExpandRule(n.name);
      case GNode::Kind::kSeq:
      case GNode::Kind::kAlt: {
        std::vector<RegexNode> kids;
        for (const GNode& k : n.kids) {
          auto e = Expand(k);
          if (!e.ok()) return e;
          kids.push_back(*std::move(e));
        }
        return n.kind == GNode::Kind::kSeq ? RegexNode::Seq(std::move(kids)) : RegexNode::Alt(std::move(kids));
      }
      case GNode::Kind::kRepeat: {
        auto e = Expand(n.kids[0]);
        if (!e.ok()) return e;
        return RegexNode::Repeat(*std::move(e), n.min, n.max);
      }
    }
    return RegexNode::Empty();
  }

  const std::map<std::string, GNode>& rules_;
  std::map<std::string, int> open_;
  std::vector<std::string> stack_;
  int64_t nodes_ = 0;
};

}  // namespace

absl::StatusOr<RegexNode> EbnfToRegex(std::string_view grammar, std::string_view field) {
  auto fail = [&](const absl::Status& s) {
    return absl::InvalidArgumentError(absl::StrCat(base::AsAbsl(field), ": ", std::string(s.message())));
  };
  std::map<std::string, GNode> rules;
  std::vector<std::string> order;
  if (auto s = Parser(grammar).Parse(rules, order); !s.ok()) return fail(s);
  if (!rules.count("root")) return fail(absl::InvalidArgumentError("needs a rule named 'root' (where the output starts)"));
  for (const std::string& name : order) {
    if (auto s = CheckRefs(rules.at(name), rules, name); !s.ok()) return fail(s);
  }
  std::set<std::string> productive;
  for (bool changed = true; changed;) {
    changed = false;
    for (const std::string& name : order) {
      if (!productive.count(name) && Productive(rules.at(name), productive)) {
        productive.insert(name);
        changed = true;
      }
    }
  }
  // Name the rule whose own recursion never ends (the rules that merely use it fail with it).
  std::string stuck;
  for (const std::string& name : order) {
    if (productive.count(name)) continue;
    if (stuck.empty()) stuck = name;
    std::set<std::string> seen;
    std::vector<std::string> todo;
    CollectRefs(rules.at(name), todo);
    bool cycles = false;
    while (!todo.empty() && !cycles) {
      const std::string next = todo.back();
      todo.pop_back();
      if (next == name) cycles = true;
      if (seen.insert(next).second) CollectRefs(rules.at(next), todo);
    }
    if (cycles) {
      stuck = name;
      break;
    }
  }
  if (!stuck.empty()) {
    return fail(absl::InvalidArgumentError(
        absl::StrCat("rule '", stuck, "': can never finish (every alternative refers back to itself)")));
  }
  auto r = Expander(rules).ExpandRule("root");
  if (!r.ok()) return fail(r.status());
  return r;
}

}  // namespace kvserve::structured
