// JSON Schema (the subset structured outputs need) and "any JSON object" as regular languages
// over bytes, in one canonical layout: json.dumps's separators (", " and ": "), no other
// whitespace, object members in the schema's `properties` order. Every string the language
// holds parses as JSON and validates against the schema.
//
// Supported: type (one or a list), properties (in order; a property not named in `required` may
// be left out; additionalProperties must be absent or false), required (must name listed
// properties), items, minItems, maxItems, enum, const (any JSON value, written canonically),
// anyOf, oneOf (as anyOf; branches should not overlap), string minLength/maxLength/pattern,
// integer minimum/maximum/exclusiveMinimum/exclusiveMaximum (any bounds within +-1e16), number
// minimum/maximum with integer values and minimum >= 0 (bounded numbers have no exponent),
// $ref to "#/..." pointers into the schema ($defs, definitions) with recursion unrolled
// kMaxRefRecursion deep (the branch that would go deeper is not offered), plus the annotations
// title, description, default, examples, $schema, $id, $comment and format (ignored).
// Anything else is InvalidArgument naming the keyword's path, e.g.
// "response_format.json_schema.schema.properties.tags.uniqueItems: not supported".
#pragma once

#include <string_view>

#include "absl/status/statusor.h"
#include "structured/regex_ast.h"

namespace kvserve::structured {

inline constexpr int kMaxRefRecursion = 3;

// `schema_json`: the schema as JSON text; `field`: its request path (for error messages).
absl::StatusOr<RegexNode> JsonSchemaToRegex(std::string_view schema_json, std::string_view field);

// Any JSON object with nesting up to `depth` levels of objects/arrays (response_format
// json_object); strings at most `max_string` characters so that every output can end.
RegexNode AnyJsonObject(int depth = 3, int max_string = 64);

}  // namespace kvserve::structured
