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
           {R"({"type": "object", "properties": {"a": {"type": "integer", "maximum": 3}}})",
            "response_format.json_schema.schema.properties.a.maximum: not supported"},
           {R"({"$ref": "#/$defs/x"})", "response_format.json_schema.schema.$ref: not supported"},
           {R"({"type": "object", "properties": {}, "additionalProperties": true})",
            "response_format.json_schema.schema.additionalProperties"},
           {R"({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["b"]})",
            "response_format.json_schema.schema.required"},
           {R"({"type": "array", "items": {"allOf": []}})", "response_format.json_schema.schema.items.allOf"},
           {R"js({"type": "string", "pattern": "(?=x)"})js", "response_format.json_schema.schema.pattern"},
           {R"({"type": "integer", "minimum": 5})", "response_format.json_schema.schema.minimum"},
       }) {
    auto r = JsonSchemaToRegex(c.schema, "response_format.json_schema.schema");
    ASSERT_FALSE(r.ok()) << c.schema;
    EXPECT_NE(r.status().message().find(c.path), std::string_view::npos) << r.status();
  }
  EXPECT_FALSE(JsonSchemaToRegex("{", "x").ok());
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
