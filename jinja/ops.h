// Operators of the expression language with Python's semantics: arithmetic (int/float
// promotion, floor division and modulo rounding toward -inf), `~` concatenation, comparisons,
// `in`, subscripts with negative indices and slices with steps, attribute lookup.
#pragma once

#include <optional>
#include <string_view>

#include "jinja/value.h"

namespace kvserve::jinja {

Value BinaryOp(std::string_view op, const Value& a, const Value& b);
bool Contains(const Value& container, const Value& item);
// x[key]: undefined when absent (the template decides with `is defined`).
Value GetItem(const Value& container, const Value& key);
Value GetAttr(const Value& object, std::string_view name);
Value Slice(const Value& seq, const std::optional<int64_t>& start,
            const std::optional<int64_t>& stop, const std::optional<int64_t>& step);
// Python's < for numbers and strings (lists compare element-wise); throws for other types.
bool Less(const Value& a, const Value& b);

}  // namespace kvserve::jinja
