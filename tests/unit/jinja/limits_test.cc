// jinja/limits.h: templates that would hang, overflow the stack, exhaust memory or hit
// undefined behaviour end in a clean error naming the limit. Each case is one the fuzzer
// (tests/fuzz/chat_template_fuzz.cc) can reach; the bounds are far above real chat templates.
#include "jinja/limits.h"

#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "jinja/template.h"

namespace kvserve::jinja {
namespace {

using ::testing::HasSubstr;

// The compile or render error of `src` ("" when it renders).
std::string ErrorOf(const std::string& src, const TemplateOptions& options = {}) {
  auto t = Template::Compile(src, options);
  if (!t.ok()) return std::string(t.status().message());
  auto out = t->Render(Object{});
  return out.ok() ? "" : std::string(out.status().message());
}

std::string Repeat(std::string_view s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

TEST(JinjaLimits, DeepBracketsAndUnaryChainsAreParseErrors) {
  EXPECT_THAT(ErrorOf("{{ " + Repeat("(", 100000) + "1" + Repeat(")", 100000) + " }}"),
              HasSubstr("nested deeper than 64 levels"));
  EXPECT_THAT(ErrorOf("{{ " + Repeat("[", 5000) + Repeat("]", 5000) + " }}"), HasSubstr("nested deeper"));
  EXPECT_THAT(ErrorOf("{{ " + Repeat("not ", 5000) + "1 }}"), HasSubstr("nested deeper"));
  EXPECT_THAT(ErrorOf("{{ " + Repeat("- ", 5000) + "1 }}"), HasSubstr("nested deeper"));
  EXPECT_THAT(ErrorOf(Repeat("{% if 1 %}", 5000) + Repeat("{% endif %}", 5000)), HasSubstr("nested deeper"));
  // Up to the limit is fine.
  EXPECT_EQ(ErrorOf("{{ " + Repeat("(", 40) + "1" + Repeat(")", 40) + " }}"), "");
}

TEST(JinjaLimits, LongOperatorChainsAreBoundedInHeight) {
  // Built by loops, not recursion, in the parser; the renderer and the destructor would recurse.
  EXPECT_THAT(ErrorOf("{{ 1" + Repeat(" + 1", 100000) + " }}"), HasSubstr("expression nested deeper than 256"));
  EXPECT_THAT(ErrorOf("{{ x" + Repeat(".a", 100000) + " }}"), HasSubstr("expression nested deeper"));
  EXPECT_THAT(ErrorOf("{{ 'a'" + Repeat("|upper", 100000) + " }}"), HasSubstr("expression nested deeper"));
  EXPECT_EQ(ErrorOf("{{ 1" + Repeat(" + 1", 200) + " }}"), "");
}

TEST(JinjaLimits, EndlessRecursionAndLoopsStop) {
  EXPECT_THAT(ErrorOf("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}"),
              HasSubstr("macro calls nested deeper than 64 levels"));
  TemplateOptions small;
  small.limits.max_steps = 100000;
  EXPECT_THAT(ErrorOf("{% for i in range(1000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}", small),
              HasSubstr("more than 100000 evaluation steps"));
  EXPECT_THAT(ErrorOf("{% for i in range(10**12) %}{% endfor %}"), HasSubstr("range() of more than"));
}

TEST(JinjaLimits, RunawayStringsAndListsAreErrors) {
  EXPECT_THAT(ErrorOf("{{ 'ab' * 10**12 }}"), HasSubstr("over the template limit"));
  EXPECT_THAT(ErrorOf("{% set ns = namespace(s='x' * 1000) %}{% for i in range(40) %}"
                      "{% set ns.s = ns.s ~ ns.s %}{% endfor %}"),
              HasSubstr("the result of '~' would be"));
  EXPECT_THAT(ErrorOf("{{ 'x' | center(10**15) }}"), HasSubstr("center"));
  EXPECT_THAT(ErrorOf("{{ 'a\\nb' | indent(10**15) }}"), HasSubstr("indent"));
  EXPECT_THAT(ErrorOf("{{ [1] | tojson(indent=10**9) }}"), HasSubstr("tojson indent"));
}

TEST(JinjaLimits, SelfContainingAndDeeplyNestedValuesAreRefused) {
  EXPECT_THAT(ErrorOf("{% set l = [] %}{{ l.append(l) }}"), HasSubstr("the list would contain itself"));
  EXPECT_THAT(ErrorOf("{% set a = [] %}{% set b = [a] %}{{ a.append(b) }}"), HasSubstr("contain itself"));
  EXPECT_THAT(ErrorOf("{% set ns = namespace() %}{% set ns.me = ns %}"), HasSubstr("contain itself"));
  EXPECT_THAT(ErrorOf("{% set d = {} %}{{ d.update({'x': d}) }}"), HasSubstr("contain itself"));
  EXPECT_THAT(ErrorOf("{% set ns = namespace(x=[]) %}{% for i in range(100000) %}{% set ns.x = [ns.x] %}"
                      "{% endfor %}{{ ns.x }}"),
              HasSubstr("nested deeper than 64 levels"));
}

TEST(JinjaLimits, IntegerOverflowIsAnErrorNotUndefinedBehaviour) {
  EXPECT_THAT(ErrorOf("{{ 9223372036854775807 + 1 }}"), HasSubstr("integer overflow in '+'"));
  EXPECT_THAT(ErrorOf("{{ 3037000500 * 3037000500 }}"), HasSubstr("integer overflow in '*'"));
  EXPECT_THAT(ErrorOf("{{ 2 ** 64 }}"), HasSubstr("integer overflow in '**'"));
  EXPECT_THAT(ErrorOf("{{ -(-9223372036854775807 - 1) }}"), HasSubstr("integer overflow"));
  EXPECT_THAT(ErrorOf("{{ (-9223372036854775807 - 1) // -1 }}"), HasSubstr("integer overflow"));
  EXPECT_EQ(ErrorOf("{{ 1 ** 1000000000000000000 }}"), "");  // square-and-multiply: no hang
  EXPECT_EQ(ErrorOf("{{ range(5)[1::9223372036854775807] }}"), "");
  EXPECT_EQ(ErrorOf("{{ range(-9223372036854775807 - 1, 9223372036854775807, 4611686018427387904) }}"), "");
}

TEST(JinjaLimits, DeepJsonContextIsAnError) {
  auto deep = ValueFromJson(Repeat("[", 100000) + Repeat("]", 100000));
  ASSERT_FALSE(deep.ok());
  EXPECT_THAT(deep.status().message(), HasSubstr("JSON nested deeper than 64 levels"));
  EXPECT_TRUE(ValueFromJson(Repeat("[", 60) + Repeat("]", 60)).ok());
}

TEST(JinjaLimits, TheErrorsReachRenderAsInvalidArgument) {
  auto t = Template::Compile("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}");
  ASSERT_TRUE(t.ok());
  auto out = t->Render(Object{});
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(out.status().message(), HasSubstr("template line 1"));
}

}  // namespace
}  // namespace kvserve::jinja
