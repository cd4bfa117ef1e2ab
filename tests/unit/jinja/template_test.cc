// Semantics checked against Python's Jinja2 / Python where @huggingface/jinja (the conformance
// reference) departs from it or lacks the feature; the expected strings are what Jinja2 3.1
// renders for the same source.
#include "jinja/template.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace kvserve::jinja {
namespace {

using ::testing::HasSubstr;

std::string Render(std::string_view src, std::string_view context_json = "{}") {
  auto t = Template::Compile(src);
  EXPECT_TRUE(t.ok()) << t.status();
  if (!t.ok()) return "<compile error>";
  auto ctx = ValueFromJson(context_json);
  EXPECT_TRUE(ctx.ok());
  auto out = t->Render(ctx->object());
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? *out : "<render error: " + std::string(out.status().message()) + ">";
}

std::string RenderError(std::string_view src, std::string_view context_json = "{}") {
  auto t = Template::Compile(src);
  if (!t.ok()) return std::string(t.status().message());
  auto out = t->Render(ValueFromJson(context_json)->object());
  EXPECT_FALSE(out.ok()) << *out;
  return out.ok() ? "" : std::string(out.status().message());
}

TEST(JinjaTemplate, PythonArithmetic) {
  EXPECT_EQ(Render("{{ -7 % 3 }} {{ 7 % -3 }} {{ -7 // 2 }} {{ 7 / 2 }} {{ 4 / 2 }} {{ 2 ** -1 }}"),
            "2 -2 -4 3.5 2.0 0.5");
  EXPECT_EQ(Render("{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 'ab' * 2 }} {{ [1] + [2] }}"),
            "7 9 abab [1, 2]");
}

TEST(JinjaTemplate, StringMethodsAsPython) {
  EXPECT_EQ(Render("{{ 'xxhixx'.strip('x') }}|{{ 'abc'.find('c') }}|{{ '-'.join(['a', 'b']) }}|"
                   "{{ 'a b  c'.split() | length }}|{{ 'a,b,c'.split(',', 1) | last }}|"
                   "{{ ' \\u00a0x\\n'.strip() }}"),
            "hi|2|a-b|3|b,c|x");
  EXPECT_EQ(Render("{{ 'Ünïcödé'[1:3] }}|{{ 'Ünïcödé'[-1] }}|{{ 'Ünïcödé' | length }}"),
            "nï|é|7");
}

TEST(JinjaTemplate, FiltersTheReferenceLacks) {
  EXPECT_EQ(Render("{{ [1, 2, 3] | sum }} {{ [4, 9, 2] | max }} {{ [4, 9, 2] | min }} "
                   "{{ 'abc' | reverse }} {{ 9 is divisibleby 3 }} {{ [1, 2, 3, 4] | select('odd') | list }}"),
            "6 9 2 cba true [1, 3]");
  EXPECT_EQ(Render("{{ {'b': 1, 'a': 2} | dictsort | first | first }} "
                   "{{ {'b': 1, 'a': [1, 2]} | tojson(sort_keys=true) }}"),
            "a {\"a\": [1, 2], \"b\": 1}");
  EXPECT_EQ(Render("{{ {'a': 1} | tojson(separators=(',', ':')) }}"), "{\"a\":1}");
}

TEST(JinjaTemplate, ScopingNamespaceMacroCall) {
  // set inside a loop does not leak; a namespace carries state out.
  EXPECT_EQ(Render("{% set x = 1 %}{% for i in [1, 2] %}{% set x = i %}{% endfor %}{{ x }}"), "1");
  EXPECT_EQ(Render("{% set ns = namespace(x=1) %}{% for i in [1, 2] %}{% set ns.x = i %}{% endfor %}{{ ns.x }}"),
            "2");
  EXPECT_EQ(Render("{% macro m(a, b='B') %}{{ a }}{{ b }}{% endmacro %}{{ m('A') }}{{ m('a', b='c') }}"),
            "ABac");
  EXPECT_EQ(Render("{% macro box() %}[{{ caller() }}]{% endmacro %}{% call box() %}in{% endcall %}"),
            "[in]");
  EXPECT_EQ(Render("{% filter upper %}shout {{ 'it' }}{% endfilter %}"), "SHOUT IT");
}

TEST(JinjaTemplate, LoopVariablesAndControl) {
  EXPECT_EQ(Render("{% for x in 'abc' %}{{ loop.index0 }}{{ x }}{{ loop.revindex }}{% endfor %}"),
            "0a31b22c1");
  EXPECT_EQ(Render("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}{{ v }}{% endfor %}"), "a1b2");
  EXPECT_EQ(Render("{% for x in range(10) if x is even %}{% if x > 4 %}{% break %}{% endif %}{{ x }}{{ loop.length }}{% endfor %}"),
            "052545");
}

TEST(JinjaTemplate, ContextFromJsonKeepsKeyOrderAndTypes) {
  EXPECT_EQ(Render("{{ m | tojson }} {{ m.n is integer }} {{ m.f is float }}",
                   R"({"m": {"z": 1, "a": [true, null], "n": 2, "f": 2.5}})"),
            "{\"z\": 1, \"a\": [true, null], \"n\": 2, \"f\": 2.5} true true");
}

TEST(JinjaTemplate, ErrorsNameTheTemplateLine) {
  EXPECT_THAT(RenderError("ok\n{% if true %}\n{{ raise_exception('Roles must alternate') }}\n{% endif %}"),
              HasSubstr("template line 3: Roles must alternate"));
  EXPECT_THAT(RenderError("a\n\n{{ 1 + none }}"), HasSubstr("template line 3: unsupported operand"));
  EXPECT_THAT(RenderError("{{ x | no_such_filter }}"), HasSubstr("unknown filter 'no_such_filter'"));
  EXPECT_THAT(RenderError("{% for x in y %}\n{% endif %}"), HasSubstr("template line 2"));
  EXPECT_THAT(RenderError("{{ undefined_function() }}"), HasSubstr("'undefined_function' is undefined"));
  EXPECT_THAT(RenderError("{% frobnicate %}"), HasSubstr("unknown statement 'frobnicate'"));
  // An attribute name that is neither a string nor an integer (found by chat_template_fuzz:
  // it aborted the process) is a render error naming the type.
  EXPECT_THAT(RenderError("{{ [{'a': 1}] | rejectattr('b' >= 'a', 'none') | list }}"),
              HasSubstr("attribute must be a string or an integer, not bool"));
  EXPECT_THAT(RenderError("{{ [{'a': 1}] | map(attribute=none) | list }}"),
              HasSubstr("attribute must be a string or an integer, not none"));
}

TEST(JinjaTemplate, StrftimeNowReadsTheInjectedClock) {
  auto t = Template::Compile("{{ strftime_now('%Y-%m-%d') }}");
  ASSERT_TRUE(t.ok());
  Object ctx;
  ctx.Set("strftime_now", MakeStrftimeNow([] { return absl::FromUnixSeconds(86400 * 365 + 43200); }));
  auto out = t->Render(ctx);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, "1971-01-01");
}

TEST(JinjaTemplate, CompiledTemplateRendersRepeatedlyWithoutState) {
  auto t = Template::Compile("{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.n }}");
  ASSERT_TRUE(t.ok());
  auto ctx = ValueFromJson(R"({"messages": [1, 2, 3]})");
  for (int i = 0; i < 3; ++i) EXPECT_EQ(*t->Render(ctx->object()), "3");
}

}  // namespace
}  // namespace kvserve::jinja
