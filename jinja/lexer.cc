#include "jinja/lexer.h"

#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"

namespace kvserve::jinja {
namespace {

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool IsNameStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }

void AppendUtf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

absl::Status LexError(int line, std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("template line ", line, ": ", std::string(what)));
}

class Lexer {
 public:
  Lexer(std::string_view src, const LexOptions& opts) : src_(src), opts_(opts) {}

  absl::StatusOr<std::vector<Token>> Run() {
    bool line_starting = true;  // the next text begins at the start of a line
    while (pos_ < src_.size()) {
      size_t tag = FindTag(pos_);
      std::string text(src_.substr(pos_, tag - pos_));
      const int text_line = line_;
      CountLines(pos_, tag);
      pos_ = tag;
      if (tag < src_.size()) {
        const char kind = src_[tag + 1];
        const char mod = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
        if (mod == '-') {
          text.erase(std::find_if_not(text.rbegin(), text.rend(), IsSpace).base(), text.end());
        } else if (opts_.lstrip_blocks && (kind == '%' || kind == '#') && mod != '+') {
          const size_t nl = text.rfind('\n');
          if (nl != std::string::npos || line_starting) {
            const size_t from = nl == std::string::npos ? 0 : nl + 1;
            if (std::all_of(text.begin() + static_cast<long>(from), text.end(),
                            [](char c) { return c == ' ' || c == '\t'; }))
              text.erase(from);
          }
        }
      }
      if (!text.empty()) tokens_.push_back({TokenKind::kText, std::move(text), text_line});
      if (tag >= src_.size()) break;
      auto status = LexTag();
      if (!status.ok()) return status;
      line_starting = pos_ > 0 && src_[pos_ - 1] == '\n';
    }
    tokens_.push_back({TokenKind::kEnd, "", line_});
    return std::move(tokens_);
  }

 private:
  size_t FindTag(size_t from) const {
    for (size_t i = from; i + 1 < src_.size(); ++i) {
      if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#'))
        return i;
    }
    return src_.size();
  }

  void CountLines(size_t from, size_t to) {
    line_ += static_cast<int>(std::count(src_.begin() + static_cast<long>(from),
                                         src_.begin() + static_cast<long>(to), '\n'));
  }

  // After a closing tag: `-` strips all whitespace, trim_blocks one newline (blocks, comments).
  void AfterClose(bool strip, bool block_or_comment) {
    if (strip) {
      size_t p = pos_;
      while (p < src_.size() && IsSpace(src_[p])) ++p;
      CountLines(pos_, p);
      pos_ = p;
    } else if (block_or_comment && opts_.trim_blocks) {
      if (pos_ < src_.size() && src_[pos_] == '\n') {
        ++pos_;
        ++line_;
      } else if (pos_ + 1 < src_.size() && src_[pos_] == '\r' && src_[pos_ + 1] == '\n') {
        pos_ += 2;
        ++line_;
      }
    }
  }

  absl::Status LexTag() {
    const int open_line = line_;
    const char kind = src_[pos_ + 1];
    pos_ += 2;
    if (pos_ < src_.size() && (src_[pos_] == '-' || src_[pos_] == '+')) ++pos_;
    if (kind == '#') {
      const size_t end = src_.find("#}", pos_);
      if (end == std::string_view::npos) return LexError(open_line, "unclosed comment {#");
      CountLines(pos_, end);
      const bool strip = end > pos_ && src_[end - 1] == '-';
      pos_ = end + 2;
      AfterClose(strip, true);
      return absl::OkStatus();
    }
    const bool block = kind == '%';
    tokens_.push_back({block ? TokenKind::kBlockBegin : TokenKind::kVarBegin, "", open_line});
    const std::string_view close = block ? "%}" : "}}";
    int depth = 0;  // brackets open inside the tag (so `}}` inside a dict literal is not an end)
    while (true) {
      while (pos_ < src_.size() && IsSpace(src_[pos_])) {
        if (src_[pos_] == '\n') ++line_;
        ++pos_;
      }
      if (pos_ >= src_.size()) return LexError(open_line, block ? "unclosed tag {%" : "unclosed {{");
      const bool dash_close = src_[pos_] == '-' && src_.substr(pos_ + 1, 2) == close;
      if (depth == 0 && (dash_close || src_.substr(pos_, 2) == close)) {
        pos_ += dash_close ? 3 : 2;
        tokens_.push_back({block ? TokenKind::kBlockEnd : TokenKind::kVarEnd, "", line_});
        AfterClose(dash_close, block);
        return absl::OkStatus();
      }
      const char c = src_[pos_];
      if (c == '"' || c == '\'') {
        auto s = LexString(c);
        if (!s.ok()) return s.status();
        tokens_.push_back({TokenKind::kString, *std::move(s), line_});
      } else if (IsDigit(c)) {
        size_t p = pos_;
        while (p < src_.size() && (IsDigit(src_[p]) || src_[p] == '_')) ++p;
        bool is_float = false;
        if (p + 1 < src_.size() && src_[p] == '.' && IsDigit(src_[p + 1])) {
          is_float = true;
          ++p;
          while (p < src_.size() && IsDigit(src_[p])) ++p;
        }
        if (p < src_.size() && (src_[p] == 'e' || src_[p] == 'E')) {
          size_t q = p + 1;
          if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
          if (q < src_.size() && IsDigit(src_[q])) {
            is_float = true;
            p = q;
            while (p < src_.size() && IsDigit(src_[p])) ++p;
          }
        }
        std::string num(src_.substr(pos_, p - pos_));
        num.erase(std::remove(num.begin(), num.end(), '_'), num.end());
        tokens_.push_back({is_float ? TokenKind::kFloat : TokenKind::kInt, std::move(num), line_});
        pos_ = p;
      } else if (IsNameStart(c)) {
        size_t p = pos_;
        while (p < src_.size() && (IsNameStart(src_[p]) || IsDigit(src_[p]))) ++p;
        tokens_.push_back({TokenKind::kName, std::string(src_.substr(pos_, p - pos_)), line_});
        pos_ = p;
      } else {
        static constexpr std::string_view kTwo[] = {"//", "**", "==", "!=", "<=", ">="};
        std::string op(1, c);
        for (std::string_view two : kTwo)
          if (src_.substr(pos_, 2) == two) op = std::string(two);
        if (op.size() == 1 && std::string_view("+-*/%~|.,:()[]{}=<>!").find(c) == std::string_view::npos)
          return LexError(line_, absl::StrCat("unexpected character '", std::string(1, c), "'"));
        if (op == "(" || op == "[" || op == "{") ++depth;
        if ((op == ")" || op == "]" || op == "}") && depth > 0) --depth;
        pos_ += op.size();
        tokens_.push_back({TokenKind::kOp, std::move(op), line_});
      }
    }
  }

  absl::StatusOr<std::string> LexString(char quote) {
    const int start_line = line_;
    std::string out;
    ++pos_;
    while (pos_ < src_.size() && src_[pos_] != quote) {
      char c = src_[pos_++];
      if (c == '\n') ++line_;
      if (c != '\\' || pos_ >= src_.size()) {
        out += c;
        continue;
      }
      const char e = src_[pos_++];
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'v': out += '\v'; break;
        case '0': out += '\0'; break;
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case '\n': ++line_; break;  // line continuation
        case 'x':
        case 'u':
        case 'U': {  // \xXX, \uXXXX, \UXXXXXXXX as in Python literals
          const size_t digits = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          if (pos_ + digits > src_.size()) return LexError(line_, "truncated escape in string literal");
          uint32_t cp = 0;
          for (size_t k = 0; k < digits; ++k) {
            const char h = src_[pos_ + k];
            const int d = IsDigit(h) ? h - '0' : (h >= 'a' && h <= 'f') ? h - 'a' + 10 : (h >= 'A' && h <= 'F') ? h - 'A' + 10 : -1;
            if (d < 0) return LexError(line_, "bad hex digit in string escape");
            cp = cp * 16 + static_cast<uint32_t>(d);
          }
          pos_ += digits;
          AppendUtf8(cp, out);
          break;
        }
        default: out += '\\'; out += e;  // Python keeps unknown escapes verbatim
      }
    }
    if (pos_ >= src_.size()) return LexError(start_line, "unterminated string literal");
    ++pos_;
    return out;
  }

  std::string_view src_;
  LexOptions opts_;
  size_t pos_ = 0;
  int line_ = 1;
  std::vector<Token> tokens_;
};

}  // namespace

absl::StatusOr<std::vector<Token>> Lex(std::string_view source, const LexOptions& options) {
  // Jinja's keep_trailing_newline=False: one newline at the very end of the source is dropped.
  if (!source.empty() && source.back() == '\n') source.remove_suffix(1);
  return Lexer(source, options).Run();
}

}  // namespace kvserve::jinja
