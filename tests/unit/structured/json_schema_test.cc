#include "structured/json_schema.h"

#include <gtest/gtest.h>

#include "structured/byte_dfa.h"

namespace kvserve::structured {
namespace {

ByteDfa SchemaDfa(std::string_view schema) {
  auto regex = JsonSchemaToRegex(schema, "response_format.json_schema.schema");
  EXPECT_TRUE(regex.ok()) << regex.status();
  auto dfa = ByteDfa::Compile(regex.ok() ? *regex : RegexNode::Empty());
  EXPECT_TRUE(dfa.ok()) << dfa.status();
  return *std::move(dfa);
}

TEST(JsonSchema, ObjectsInCanonicalLayout) {
  const ByteDfa dfa = SchemaDfa(R"({"type": "object", "properties": {
      "name": {"type": "string", "maxLength": 8},
      "age": {"type": "integer", "minimum": 0},
      "score": {"type": "number"},
      "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2},
      "ok": {"type": "boolean"}, "none": {"type": "null"},
      "kind": {"const": "x"}, "alt": {"anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 2}]}},
    "required": ["name"], "additionalProperties": false})");
  EXPECT_TRUE(dfa.Matches(R"({"name": "Ann \"Q\"", "age": 41, "score": -0.5e3, "tags": ["a", "b"], )"
                          R"("ok": true, "none": null, "kind": "x", "alt": 7})"));
  EXPECT_TRUE(dfa.Matches(R"({"name": "", "age": 0, "score": 2, "tags": [], "ok": false, "none": null, )"
                          R"("kind": "x", "alt": "é"})"));
  EXPECT_FALSE(dfa.Matches(R"({"name": "toolongname", "age": 1, "score": 2, "tags": [], "ok": false, )"
                           R"("none": null, "kind": "x", "alt": 1})"));
  EXPECT_FALSE(dfa.Matches(R"({"name": "a", "age": -1, "score": 2, "tags": [], "ok": false, )"
                           R"("none": null, "kind": "x", "alt": 1})"));
  EXPECT_FALSE(dfa.Matches(R"({"name": "a", "age": 01, "score": 2, "tags": [], "ok": false, )"
                           R"("none": null, "kind": "x", "alt": 1})"));
  EXPECT_FALSE(dfa.Matches(R"({"name": "a", "age": 1, "score": 2, "tags": ["c"], "ok": false, )"
                           R"("none": null, "kind": "x", "alt": 1})"));
}

TEST(JsonSchema, UnsupportedFeaturesNameTheirPath) {
  struct Case {
    const char* schema;
    const char* path;
  };
  for (const Case& c : std::vector<Case>{
           {R"({"type": "object", "properties": {"a": {"type": "array", "uniqueItems": true}}})",
            "response_format.json_schema.schema.properties.a.uniqueItems: not supported"},
           {R"({"$ref": "#/$defs/x"})", "response_format.json_schema.schema.$ref: \"#/$defs/x\" does not resolve"},
           {R"({"$ref": "https://example.org/s.json"})", "response_format.json_schema.schema.$ref: only references"},
           {R"({"$defs": {"a": {"type": "integer"}}, "$ref": "#/$defs/a", "minimum": 2})",
            "response_format.json_schema.schema.minimum: cannot be combined with $ref"},
           {R"({"type": "number", "maximum": 2.5, "minimum": 0})", "response_format.json_schema.schema.maximum"},
           {R"({"type": "number", "maximum": 7})", "response_format.json_schema.schema.minimum"},
           {R"({"type": "integer", "minimum": 5, "maximum": 4})", "response_format.json_schema.schema.maximum"},
           {R"({"type": "object", "properties": {"a": {"not": {}}}})",
            "response_format.json_schema.schema.properties.a.not: not supported"},
           {R"({"type": "object", "properties": {}, "additionalProperties": true})",
            "response_format.json_schema.schema.additionalProperties"},
           {R"({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["b"]})",
            "response_format.json_schema.schema.required"},
           {R"({"type": "array", "items": {"allOf": []}})", "response_format.json_schema.schema.items.allOf"},
           {R"js({"type": "string", "pattern": "(?=x)"})js", "response_format.json_schema.schema.pattern"},
       }) {
    auto r = JsonSchemaToRegex(c.schema, "response_format.json_schema.schema");
    ASSERT_FALSE(r.ok()) << c.schema;
    EXPECT_NE(r.status().message().find(c.path), std::string_view::npos) << r.status();
  }
  EXPECT_FALSE(JsonSchemaToRegex("{", "x").ok());
}

TEST(JsonSchema, OptionalPropertiesMayBeLeftOutInOrder) {
  const ByteDfa dfa = SchemaDfa(R"({"type": "object", "properties": {
      "a": {"type": "integer"}, "b": {"type": "boolean"}, "c": {"type": "null"}, "d": {"const": 1}},
    "required": ["b"]})");
  for (const char* yes : {R"({"b": true})", R"({"a": 1, "b": false})", R"({"b": true, "d": 1})",
                          R"({"a": 1, "b": true, "c": null, "d": 1})", R"({"b": true, "c": null})"}) {
    EXPECT_TRUE(dfa.Matches(yes)) << yes;
  }
  for (const char* no : {R"({})", R"({"a": 1})", R"({"b": true, "a": 1})", R"({, "b": true})",
                         R"({"b": true, })", R"({"b": true, "d": 1, "c": null})"}) {
    EXPECT_FALSE(dfa.Matches(no)) << no;
  }
  // Nothing required: the empty object too.
  EXPECT_TRUE(SchemaDfa(R"({"type": "object", "properties": {"x": {"type": "null"}}})").Matches("{}"));
}

TEST(JsonSchema, IntegerRangesMatchExactlyTheirIntegers) {
  struct Case {
    const char* schema;
    long long lo, hi;  // inclusive
  };
  for (const Case& c : std::vector<Case>{
           {R"({"type": "integer", "minimum": 0, "maximum": 150})", 0, 150},
           {R"({"type": "integer", "minimum": -42, "maximum": 7})", -42, 7},
           {R"({"type": "integer", "minimum": -1200, "maximum": -35})", -1200, -35},
           {R"({"type": "integer", "exclusiveMinimum": 9, "exclusiveMaximum": 1000})", 10, 999},
           {R"({"type": "integer", "minimum": 1.5, "maximum": 19.9})", 2, 19},
           {R"({"type": "integer", "minimum": 98, "maximum": 10003})", 98, 10003},
       }) {
    const ByteDfa dfa = SchemaDfa(c.schema);
    for (long long v = c.lo - 1100; v <= c.hi + 1100; ++v) {
      EXPECT_EQ(dfa.Matches(std::to_string(v)), v >= c.lo && v <= c.hi) << c.schema << " " << v;
    }
    EXPECT_FALSE(dfa.Matches("-0")) << c.schema;
    EXPECT_FALSE(dfa.Matches("007")) << c.schema;
  }
  // One bound: the other side runs to 16 digits.
  const ByteDfa above = SchemaDfa(R"({"type": "integer", "minimum": 18})");
  EXPECT_TRUE(above.Matches("18"));
  EXPECT_TRUE(above.Matches("9999999999999999"));
  EXPECT_FALSE(above.Matches("17"));
  EXPECT_FALSE(above.Matches("-20"));
  const ByteDfa below = SchemaDfa(R"({"type": "integer", "maximum": -3})");
  EXPECT_TRUE(below.Matches("-3"));
  EXPECT_TRUE(below.Matches("-123456"));
  EXPECT_FALSE(below.Matches("-2"));
  EXPECT_FALSE(below.Matches("0"));
}

TEST(JsonSchema, BoundedNumbers) {
  const ByteDfa dfa = SchemaDfa(R"({"type": "number", "minimum": 1, "maximum": 5})");
  for (const char* yes : {"1", "1.5", "4.999", "5", "5.0", "5.000", "3"}) EXPECT_TRUE(dfa.Matches(yes)) << yes;
  for (const char* no : {"0.99", "5.01", "6", "-1", "1e2", "0"}) EXPECT_FALSE(dfa.Matches(no)) << no;
  const ByteDfa min_only = SchemaDfa(R"({"type": "number", "minimum": 10})");
  EXPECT_TRUE(min_only.Matches("10.25"));
  EXPECT_FALSE(min_only.Matches("9.99"));
}

TEST(JsonSchema, RefsAndDefs) {
  const ByteDfa dfa = SchemaDfa(R"({"$defs": {"point": {"type": "object", "properties": {
        "x": {"type": "integer"}, "y": {"type": "integer"}}, "required": ["x", "y"]},
        "tag": {"enum": ["a", 1, null, {"k": [true]}]}},
      "type": "object", "properties": {"from": {"$ref": "#/$defs/point", "description": "start"},
        "to": {"$ref": "#/definitions/pt"}, "tag": {"$ref": "#/$defs/tag"}},
      "definitions": {"pt": {"$ref": "#/$defs/point"}}, "required": ["from", "to"]})");
  EXPECT_TRUE(dfa.Matches(R"({"from": {"x": 1, "y": 2}, "to": {"x": -3, "y": 0}})"));
  EXPECT_TRUE(dfa.Matches(R"({"from": {"x": 1, "y": 2}, "to": {"x": -3, "y": 0}, "tag": {"k": [true]}})"));
  EXPECT_TRUE(dfa.Matches(R"({"from": {"x": 1, "y": 2}, "to": {"x": -3, "y": 0}, "tag": null})"));
  EXPECT_FALSE(dfa.Matches(R"({"from": {"x": 1}, "to": {"x": -3, "y": 0}})"));
  EXPECT_FALSE(dfa.Matches(R"({"from": {"x": 1, "y": 2}, "to": {"x": -3, "y": 0}, "tag": 2})"));

  // A recursive schema (a tree) is unrolled kMaxRefRecursion levels deep.
  const ByteDfa tree = SchemaDfa(R"({"$ref": "#/$defs/node", "$defs": {"node": {"type": "object", "properties": {
      "v": {"type": "integer", "minimum": 0, "maximum": 9},
      "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2}}, "required": ["v"]}}})");
  std::string t = R"({"v": 1})";
  for (int depth = 1; depth < kMaxRefRecursion; ++depth) {
    t = R"({"v": 2, "kids": [)" + t + ", " + t + "]}";
    EXPECT_TRUE(tree.Matches(t)) << t;
  }
  EXPECT_FALSE(tree.Matches(R"({"v": 3, "kids": [)" + t + "]}"));
  EXPECT_TRUE(tree.Matches(R"({"v": 3, "kids": []})"));
}

TEST(JsonSchema, ConstAndEnumOfAnyJsonType) {
  const ByteDfa dfa = SchemaDfa(R"({"type": "object", "properties": {
      "c": {"const": {"a": [1, "x", null], "b": {}}}, "e": {"enum": [1.5, false, "s", [], {"z": "w"}]}},
    "required": ["c", "e"]})");
  EXPECT_TRUE(dfa.Matches(R"({"c": {"a": [1, "x", null], "b": {}}, "e": 1.5})"));
  EXPECT_TRUE(dfa.Matches(R"({"c": {"a": [1, "x", null], "b": {}}, "e": {"z": "w"}})"));
  EXPECT_TRUE(dfa.Matches(R"({"c": {"a": [1, "x", null], "b": {}}, "e": []})"));
  EXPECT_FALSE(dfa.Matches(R"({"c": {"a": [1, "x"], "b": {}}, "e": false})"));
}

TEST(JsonSchema, AnyJsonObjectIsBoundedAndCompiles) {
  auto dfa = ByteDfa::Compile(AnyJsonObject());
  ASSERT_TRUE(dfa.ok()) << dfa.status();
  EXPECT_TRUE(dfa->Matches(R"({})"));
  EXPECT_TRUE(dfa->Matches(R"({"a": 1, "b": [true, null, "x"], "c": {"d": -2.5}})"));
  EXPECT_FALSE(dfa->Matches(R"([1])"));
  EXPECT_FALSE(dfa->Matches(R"({"a": })"));
}

}  // namespace
}  // namespace kvserve::structured
