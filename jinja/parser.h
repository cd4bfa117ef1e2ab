// Recursive-descent parser from tokens to the statement tree, with Jinja2's operator
// precedence (lowest first): `x if c else y`; or; and; not; comparisons and `in`;
// + -; ~; * / // %; **; unary - +; then postfix `.attr`, `[i]`, `[a:b:c]`, calls, `| filter`
// and `is test`, which bind tightest (so `messages|length - 1` is `(messages|length) - 1`).
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "jinja/ast.h"
#include "jinja/lexer.h"

namespace kvserve::jinja {

// Errors name the template line and what was expected.
absl::StatusOr<Body> Parse(const std::vector<Token>& tokens);

}  // namespace kvserve::jinja
