#include "structured/regex_ast.h"

#include "absl/strings/str_cat.h"
#include "tokenizer/utf8.h"

namespace kvserve::structured {

RegexNode RegexNode::Bytes(const ByteSet& set) {
  RegexNode n;
  n.kind = Kind::kBytes;
  n.bytes = set;
  return n;
}

RegexNode RegexNode::Byte(unsigned char b) {
  ByteSet s;
  s.set(b);
  return Bytes(s);
}

RegexNode RegexNode::Literal(std::string_view text) {
  std::vector<RegexNode> kids;
  for (unsigned char c : text) kids.push_back(Byte(c));
  return Seq(std::move(kids));
}

RegexNode RegexNode::Seq(std::vector<RegexNode> kids) {
  if (kids.size() == 1) return std::move(kids[0]);
  RegexNode n;
  n.kind = kids.empty() ? Kind::kEmpty : Kind::kSeq;
  n.kids = std::move(kids);
  return n;
}

RegexNode RegexNode::Alt(std::vector<RegexNode> kids) {
  if (kids.size() == 1) return std::move(kids[0]);
  RegexNode n;
  n.kind = Kind::kAlt;
  n.kids = std::move(kids);
  return n;
}

RegexNode RegexNode::Repeat(RegexNode kid, int min, int max) {
  RegexNode n;
  n.kind = Kind::kRepeat;
  n.kids.push_back(std::move(kid));
  n.min = min;
  n.max = max;
  return n;
}

RegexNode RegexNode::SeparatedList(RegexNode item, RegexNode separator, int min, int max) {
  if (max == 0) return Empty();
  if (max < 0 && min <= 1) {
    RegexNode n = Repeat(std::move(item), min, -1);
    n.kids.push_back(std::move(separator));
    return n;
  }
  // Bounded: item (separator item){min-1, max-1}, optional when min is 0.
  RegexNode more = Seq({separator, item});
  RegexNode list = Seq({std::move(item), Repeat(std::move(more), std::max(0, min - 1), max < 0 ? -1 : max - 1)});
  return min == 0 ? Repeat(std::move(list), 0, 1) : list;
}

namespace {

ByteSet Range(int lo, int hi) {
  ByteSet s;
  for (int b = lo; b <= hi; ++b) s.set(b);
  return s;
}

}  // namespace

RegexNode RegexNode::AnyChar(const ByteSet& ascii_excluded) {
  ByteSet ascii = Range(0x00, 0x7F) & ~ascii_excluded;
  const ByteSet cont = Range(0x80, 0xBF);
  std::vector<RegexNode> alts;
  alts.push_back(Bytes(ascii));
  alts.push_back(Seq({Bytes(Range(0xC2, 0xDF)), Bytes(cont)}));
  alts.push_back(Seq({Bytes(Range(0xE0, 0xEF)), Bytes(cont), Bytes(cont)}));
  alts.push_back(Seq({Bytes(Range(0xF0, 0xF4)), Bytes(cont), Bytes(cont), Bytes(cont)}));
  return Alt(std::move(alts));
}

namespace {

std::string Utf8(char32_t cp) {
  std::string out;
  tokenizer::AppendUtf8(cp, out);
  return out;
}

const ByteSet kDigit = Range('0', '9');
const ByteSet kWord = Range('0', '9') | Range('a', 'z') | Range('A', 'Z') | ByteSet().set('_');
const ByteSet kSpace = ByteSet().set(' ').set('\t').set('\n').set('\r').set('\f').set('\v');

// One character class item or escape: an ASCII byte set plus non-ASCII code points.
struct CharItems {
  ByteSet ascii;
  std::vector<std::string> others;  // UTF-8 of single non-ASCII characters
  bool any_non_ascii = false;       // \D \W \S: every non-ASCII character too
};

class Parser {
 public:
  explicit Parser(std::string_view p) : p_(p) {}

  absl::StatusOr<RegexNode> Parse() {
    if (Peek('^')) ++pos_;
    auto node = ParseAlt();
    if (!node.ok()) return node;
    if (pos_ < p_.size()) return Error(p_[pos_] == ')' ? "unbalanced ')'" : "unexpected character");
    return node;
  }

 private:
  bool Peek(char c) const { return pos_ < p_.size() && p_[pos_] == c; }

  absl::Status Error(std::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat("regex: ", std::string(what), " at offset ", pos_));
  }

  absl::StatusOr<RegexNode> ParseAlt() {
    std::vector<RegexNode> alts;
    for (;;) {
      auto seq = ParseSeq();
      if (!seq.ok()) return seq;
      alts.push_back(*std::move(seq));
      if (!Peek('|')) break;
      ++pos_;
    }
    return RegexNode::Alt(std::move(alts));
  }

  absl::StatusOr<RegexNode> ParseSeq() {
    std::vector<RegexNode> items;
    while (pos_ < p_.size() && p_[pos_] != '|' && p_[pos_] != ')') {
      if (p_[pos_] == '$' && pos_ + 1 == p_.size()) {
        ++pos_;
        break;
      }
      auto atom = ParseAtom();
      if (!atom.ok()) return atom;
      auto quantified = ParseQuantifier(*std::move(atom));
      if (!quantified.ok()) return quantified;
      items.push_back(*std::move(quantified));
    }
    return RegexNode::Seq(std::move(items));
  }

  absl::StatusOr<RegexNode> ParseQuantifier(RegexNode atom) {
    for (;;) {
      int min = 0, max = -1;
      if (Peek('*')) {
        ++pos_;
      } else if (Peek('+')) {
        ++pos_;
        min = 1;
      } else if (Peek('?')) {
        ++pos_;
        max = 1;
      } else if (Peek('{') && pos_ + 1 < p_.size() && std::isdigit(static_cast<unsigned char>(p_[pos_ + 1]))) {
        ++pos_;
        min = ReadInt();
        max = min;
        if (Peek(',')) {
          ++pos_;
          max = Peek('}') ? -1 : ReadInt();
        }
        if (!Peek('}')) return Error("expected '}' in a repetition");
        ++pos_;
        if (max >= 0 && max < min) return Error("repetition {n,m} with m < n");
        if (min > 1000 || max > 1000) return Error("repetition counts above 1000");
      } else {
        return atom;
      }
      if (Peek('?')) ++pos_;  // lazy: the same language
      if (Peek('+')) return Error("possessive quantifiers are not supported");
      atom = RegexNode::Repeat(std::move(atom), min, max);
    }
  }

  int ReadInt() {
    int v = 0;
    while (pos_ < p_.size() && std::isdigit(static_cast<unsigned char>(p_[pos_])) && v < 100000) {
      v = v * 10 + (p_[pos_++] - '0');
    }
    return v;
  }

  absl::StatusOr<RegexNode> ParseAtom() {
    const char c = p_[pos_];
    if (c == '(') {
      ++pos_;
      if (Peek('?')) {
        if (pos_ + 1 < p_.size() && p_[pos_ + 1] == ':') {
          pos_ += 2;
        } else {
          return Error("lookaround, named groups and inline flags are not supported");
        }
      }
      auto inner = ParseAlt();
      if (!inner.ok()) return inner;
      if (!Peek(')')) return Error("missing ')'");
      ++pos_;
      return inner;
    }
    if (c == '[') return ParseClass();
    if (c == '.') {
      ++pos_;
      return RegexNode::AnyChar(ByteSet().set('\n'));
    }
    if (c == '*' || c == '+' || c == '?' || c == '{') {
      if (c == '{') {  // a literal brace that is not a repetition, as Python reads it
        ++pos_;
        return RegexNode::Byte('{');
      }
      return Error("nothing to repeat");
    }
    if (c == '\\') {
      auto items = ParseEscape(/*in_class=*/false);
      if (!items.ok()) return items.status();
      return Node(*items, false);
    }
    // A literal character (possibly multi-byte UTF-8: its bytes in sequence).
    const unsigned char lead = static_cast<unsigned char>(c);
    size_t len = lead < 0x80 ? 1 : lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : 2;
    len = std::min(len, p_.size() - pos_);
    RegexNode lit = RegexNode::Literal(p_.substr(pos_, len));
    pos_ += len;
    return lit;
  }

  // After a backslash.
  absl::StatusOr<CharItems> ParseEscape(bool in_class) {
    ++pos_;
    if (pos_ >= p_.size()) return Error("trailing backslash");
    const char e = p_[pos_++];
    CharItems items;
    switch (e) {
      case 'd': items.ascii = kDigit; return items;
      case 'w': items.ascii = kWord; return items;
      case 's': items.ascii = kSpace; return items;
      case 'D': items.ascii = Range(0, 0x7F) & ~kDigit; items.any_non_ascii = true; return items;
      case 'W': items.ascii = Range(0, 0x7F) & ~kWord; items.any_non_ascii = true; return items;
      case 'S': items.ascii = Range(0, 0x7F) & ~kSpace; items.any_non_ascii = true; return items;
      case 'n': items.ascii.set('\n'); return items;
      case 't': items.ascii.set('\t'); return items;
      case 'r': items.ascii.set('\r'); return items;
      case 'f': items.ascii.set('\f'); return items;
      case 'v': items.ascii.set('\v'); return items;
      case '0': items.ascii.set(0); return items;
      case 'x':
      case 'u': {
        const size_t digits = e == 'x' ? 2 : 4;
        if (pos_ + digits > p_.size()) return Error("short \\x or \\u escape");
        char32_t cp = 0;
        for (size_t i = 0; i < digits; ++i) {
          const char h = p_[pos_++];
          const int v = std::isdigit(static_cast<unsigned char>(h)) ? h - '0'
                        : (h >= 'a' && h <= 'f')                     ? h - 'a' + 10
                        : (h >= 'A' && h <= 'F')                     ? h - 'A' + 10
                                                                     : -1;
          if (v < 0) return Error("bad hex digit in an escape");
          cp = cp * 16 + static_cast<char32_t>(v);
        }
        if (cp < 0x80) {
          items.ascii.set(cp);
        } else {
          items.others.push_back(Utf8(cp));
        }
        return items;
      }
      case 'b':
      case 'B':
      case 'A':
      case 'Z':
        if (!in_class) return Error("anchors \\b \\B \\A \\Z are not supported");
        break;
      default:
        break;
    }
    if (std::isdigit(static_cast<unsigned char>(e))) return Error("backreferences are not supported");
    if (std::isalnum(static_cast<unsigned char>(e))) return Error(absl::StrCat("unknown escape \\", std::string(1, e)));
    items.ascii.set(static_cast<unsigned char>(e));
    return items;
  }

  absl::StatusOr<RegexNode> ParseClass() {
    ++pos_;  // '['
    bool negate = false;
    if (Peek('^')) {
      negate = true;
      ++pos_;
    }
    CharItems all;
    bool first = true;
    while (pos_ < p_.size() && (p_[pos_] != ']' || first)) {
      first = false;
      // One item: a character (maybe the start of a range) or an escape.
      char32_t lo_cp = 0;
      bool single = false;
      if (p_[pos_] == '\\') {
        auto items = ParseEscape(/*in_class=*/true);
        if (!items.ok()) return items.status();
        if (items->ascii.count() == 1 && items->others.empty() && !items->any_non_ascii) {
          for (int b = 0; b < 128; ++b) {
            if (items->ascii.test(b)) lo_cp = static_cast<char32_t>(b);
          }
          single = true;
        } else if (items->ascii.none() && items->others.size() == 1) {
          all.others.push_back(items->others[0]);
          continue;
        } else {
          all.ascii |= items->ascii;
          for (auto& o : items->others) all.others.push_back(o);
          all.any_non_ascii |= items->any_non_ascii;
          continue;
        }
      } else {
        const unsigned char lead = static_cast<unsigned char>(p_[pos_]);
        if (lead >= 0x80) {
          const size_t len = std::min<size_t>(lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : 2, p_.size() - pos_);
          if (pos_ + len < p_.size() && p_[pos_ + len] == '-' && pos_ + len + 1 < p_.size() &&
              p_[pos_ + len + 1] != ']') {
            return Error("ranges of non-ASCII characters are not supported");
          }
          all.others.emplace_back(p_.substr(pos_, len));
          pos_ += len;
          continue;
        }
        lo_cp = lead;
        ++pos_;
        single = true;
      }
      if (single && Peek('-') && pos_ + 1 < p_.size() && p_[pos_ + 1] != ']') {
        ++pos_;
        char32_t hi_cp;
        if (p_[pos_] == '\\') {
          auto items = ParseEscape(/*in_class=*/true);
          if (!items.ok()) return items.status();
          if (items->ascii.count() != 1 || !items->others.empty()) return Error("bad range end");
          hi_cp = 0;
          for (int b = 0; b < 128; ++b) {
            if (items->ascii.test(b)) hi_cp = static_cast<char32_t>(b);
          }
        } else {
          if (static_cast<unsigned char>(p_[pos_]) >= 0x80) return Error("ranges of non-ASCII characters are not supported");
          hi_cp = static_cast<unsigned char>(p_[pos_++]);
        }
        if (hi_cp < lo_cp) return Error("bad character range");
        all.ascii |= Range(static_cast<int>(lo_cp), static_cast<int>(hi_cp));
      } else {
        all.ascii.set(lo_cp);
      }
    }
    if (!Peek(']')) return Error("missing ']'");
    if (negate && !all.others.empty()) return Error("negated classes of non-ASCII characters are not supported");
    ++pos_;
    return Node(all, negate);
  }

  static RegexNode Node(const CharItems& items, bool negate) {
    if (negate) {
      // [^\D] and friends: only ASCII remains. (Negated non-ASCII characters are refused by
      // ParseClass.)
      if (items.any_non_ascii) return RegexNode::Bytes(Range(0, 0x7F) & ~items.ascii);
      return RegexNode::AnyChar(items.ascii);
    }
    std::vector<RegexNode> alts;
    if (items.ascii.any()) alts.push_back(RegexNode::Bytes(items.ascii));
    for (const auto& o : items.others) alts.push_back(RegexNode::Literal(o));
    if (items.any_non_ascii) alts.push_back(RegexNode::AnyChar(Range(0, 0x7F)));
    if (alts.empty()) return RegexNode::Bytes(ByteSet());  // [] matches nothing
    return RegexNode::Alt(std::move(alts));
  }

  std::string_view p_;
  size_t pos_ = 0;
};

}  // namespace

absl::StatusOr<RegexNode> ParseRegex(std::string_view pattern) { return Parser(pattern).Parse(); }

std::string RegexEscape(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (std::string_view("\\^$.|?*+()[]{}-").find(c) != std::string_view::npos) out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

}  // namespace kvserve::structured
