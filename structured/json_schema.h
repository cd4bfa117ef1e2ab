// JSON Schema (the subset structured outputs need) and "any JSON object" as regular languages
// over bytes, in one canonical layout: json.dumps's separators (", " and ": "), no other
// whitespace, object members in the schema's `properties` order. Every string the language
// holds parses as JSON and validates against the schema.
//
// Supported: type (one or a list), properties (every listed property is written, required or
// not; additionalProperties must be absent or false), required (must name listed properties),
// items, minItems, maxItems, enum, const, anyOf, oneOf (as anyOf; branches should not overlap),
// string minLength/maxLength/pattern, integer/number minimum 0 (no sign), plus the annotations
// title, description, default, examples, $schema, $id, $comment and format (ignored).
// Anything else is InvalidArgument naming the keyword's path, e.g.
// "response_format.json_schema.schema.properties.age.maximum: not supported".
#pragma once

#include <string_view>

#include "absl/status/statusor.h"
#include "structured/regex_ast.h"

namespace kvserve::structured {

// `schema_json`: the schema as JSON text; `field`: its request path (for error messages).
absl::StatusOr<RegexNode> JsonSchemaToRegex(std::string_view schema_json, std::string_view field);

// Any JSON object with nesting up to `depth` levels of objects/arrays (response_format
// json_object); strings at most `max_string` characters so that every output can end.
RegexNode AnyJsonObject(int depth = 3, int max_string = 64);

}  // namespace kvserve::structured
