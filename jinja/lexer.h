// Splits template source into text and tag tokens, applying whitespace control the way
// transformers configures Jinja (trim_blocks=True, lstrip_blocks=True):
//   {%- / -%} (and {{- -}} {#- -#}) strip all whitespace before / after the tag;
//   lstrip_blocks: spaces and tabs from the start of a line up to a {% or {# tag go (not {%+);
//   trim_blocks: the first newline after a %} or #} goes.
// Comments produce no tokens. Every token carries its 1-based source line for error messages.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace kvserve::jinja {

enum class TokenKind {
  kText,        // raw template text (already whitespace-trimmed)
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,        // identifier or keyword
  kString,      // string literal, escapes decoded
  kInt,
  kFloat,
  kOp,          // operator or punctuation: + - * / // % ** ~ | . , : ( ) [ ] { } = == != < <= > >=
  kEnd,
};

struct Token {
  TokenKind kind;
  std::string text;
  int line;
};

struct LexOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
};

absl::StatusOr<std::vector<Token>> Lex(std::string_view source, const LexOptions& options = {});

}  // namespace kvserve::jinja
