// guided_grammar: a context-free grammar in GBNF syntax (llama.cpp's, which xgrammar and vLLM
// also accept) made into a regular language by expanding recursion to a bounded depth.
//
//   root   ::= "{" ws pair ("," ws pair)* "}"     # rules; `root` is where the output starts
//   pair   ::= [a-z]+ ":" ws value
//   value  ::= [0-9]+ | "\"" [^"\\]* "\"" | root   # recursion: expanded kMaxRecursion deep
//   ws     ::= [ \t\n]?
//
// Syntax: `name ::= alternatives` (names [A-Za-z0-9_-]; a rule runs until the next `name ::=`),
// `|` alternation, juxtaposition for sequences, "literal" strings and [character classes] with
// the escapes \n \t \r \\ \" \] \xHH \uHHHH, `.` any character, ( groups ), postfix * + ? {m}
// {m,} {m,n} (counts up to 1000), `#` comments to the end of the line.
//
// Recursion: while a rule is being expanded, each reference to a rule already open more than
// kMaxRecursion times deep expands to nothing, so that branch is not available there (e.g. JSON
// nested at most kMaxRecursion levels). Errors are InvalidArgument "<field>: rule 'x': why":
// undefined rules, a rule that can never finish (every alternative recurses), or an expansion
// that grows past kMaxExpandedNodes.
#pragma once

#include <string_view>

#include "absl/status/statusor.h"
#include "structured/regex_ast.h"

namespace kvserve::structured {

inline constexpr int kMaxRecursion = 4;
inline constexpr int kMaxExpandedNodes = 400000;

absl::StatusOr<RegexNode> EbnfToRegex(std::string_view grammar, std::string_view field);

}  // namespace kvserve::structured
