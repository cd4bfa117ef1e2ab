#include "structured/ebnf_grammar.h"

#include <gtest/gtest.h>

#include <random>

#include "structured/byte_dfa.h"
#include "structured/compiled_grammar.h"
#include "structured/grammar_cache.h"

namespace kvserve::structured {
namespace {

ByteDfa GrammarDfa(std::string_view grammar) {
  auto regex = EbnfToRegex(grammar, "guided_grammar");
  EXPECT_TRUE(regex.ok()) << regex.status();
  auto dfa = ByteDfa::Compile(regex.ok() ? *regex : RegexNode::Empty());
  EXPECT_TRUE(dfa.ok()) << dfa.status();
  return *std::move(dfa);
}

std::string ErrorOf(std::string_view grammar) {
  auto regex = EbnfToRegex(grammar, "guided_grammar");
  EXPECT_FALSE(regex.ok()) << grammar;
  return regex.ok() ? "" : std::string(regex.status().message());
}

TEST(EbnfGrammar, RulesLiteralsClassesAndQuantifiers) {
  const ByteDfa dfa = GrammarDfa(R"(
    # a tiny command language
    root   ::= command ("; " command){0,2}
    command ::= verb " " object
             | "stop"
    verb   ::= "go" | "take"
    object ::= [a-z]+ ("-" [0-9]{1,3})? "\n"?
  )");
  for (const char* yes : {"stop", "go north", "take lamp-12; stop", "go a; go b; go c", "take x\n"}) {
    EXPECT_TRUE(dfa.Matches(yes)) << yes;
  }
  for (const char* no : {"", "go", "go North", "go a; go b; go c; go d", "take lamp-1234", "stop;"}) {
    EXPECT_FALSE(dfa.Matches(no)) << no;
  }
  const ByteDfa esc = GrammarDfa(R"(root ::= "\"q\"" [\]x]* "\x41\u00e9" .)");
  EXPECT_TRUE(esc.Matches("\"q\"]x]A\xC3\xA9\xE6\x97\xA5"));
  EXPECT_FALSE(esc.Matches("\"q\"A\xC3\xA9"));
}

TEST(EbnfGrammar, RecursionIsUnrolledToTheDocumentedDepth) {
  // Balanced parentheses: nesting up to kMaxRecursion levels is offered, deeper is not.
  const ByteDfa dfa = GrammarDfa(R"g(root ::= "x" | "(" root ")")g");
  std::string s = "x";
  for (int depth = 1; depth < kMaxRecursion; ++depth) {
    s = "(" + s + ")";
    EXPECT_TRUE(dfa.Matches(s)) << s;
  }
  EXPECT_FALSE(dfa.Matches("(" + s + ")"));
  EXPECT_FALSE(dfa.Matches("(x"));

  // Mutual recursion (a JSON-like value) compiles and keeps every prefix completable.
  const std::string json = R"(
    root  ::= value
    value ::= "[" (value ("," value)*)? "]" | "{" (pair ("," pair)*)? "}" | [0-9]+ | "\"" [a-z]* "\""
    pair  ::= "\"" [a-z]+ "\":" value
  )";
  const ByteDfa v = GrammarDfa(json);
  EXPECT_TRUE(v.Matches(R"({"a":[1,{"b":"c"}],"d":[]})"));
  EXPECT_FALSE(v.Matches(R"({"a":[1,{"b":"c"}],"d":[})"));
}

TEST(EbnfGrammar, RandomWalksThroughMasksAlwaysEndInAMatch) {
  // Every state the masks lead to can still complete: the pruned automaton never leaves a
  // sequence stuck where the recursion bound cut a branch off.
  std::vector<std::string> tokens = {"<s>", "</s>"};
  for (int b = 32; b < 127; ++b) tokens.emplace_back(1, static_cast<char>(b));
  for (const char* m : {"((", "))", "[[", "]]", "[1", "\":", "\"a", ",\""}) tokens.emplace_back(m);
  auto trie = std::make_shared<TokenTrie>(tokens, std::vector<int32_t>{0}, /*eos=*/1);
  GrammarCache cache(trie);
  auto g = cache.Get({GrammarSpec::Kind::kGrammar,
                      R"g(root ::= "[" (item ("," item)*)? "]"
                         item ::= [0-9] | "\"" [a-z]{0,3} "\"" | root | "(" item ")")g",
                      {}, "guided_grammar"});
  ASSERT_TRUE(g.ok()) << g.status();
  std::mt19937 rng(5);
  int ended = 0;
  for (int trial = 0; trial < 300; ++trial) {
    int32_t state = (*g)->start();
    std::string text;
    for (int step = 0; step < 400; ++step) {
      const TokenMask& m = (*g)->MaskFor(state);
      std::vector<int32_t> allowed;
      for (int32_t i = 0; i < trie->vocab_size(); ++i) {
        if (Allowed(m, i)) allowed.push_back(i);
      }
      ASSERT_FALSE(allowed.empty()) << text;
      // Prefer continuing, so that deep nesting is reached.
      int32_t tok = allowed[rng() % allowed.size()];
      if (tok == trie->eos() && allowed.size() > 1 && rng() % 4 != 0) tok = allowed[(rng() % (allowed.size() - 1)) + 1];
      if (tok == trie->eos()) {
        EXPECT_TRUE((*g)->dfa().Matches(text)) << text;
        ++ended;
        break;
      }
      text += trie->token_bytes(tok);
      state = (*g)->Advance(state, tok);
      ASSERT_NE(state, ByteDfa::kDead) << text;
      EXPECT_FALSE((*g)->dfa().final_only(state) && !(*g)->dfa().accepting(state)) << text;
    }
  }
  EXPECT_GT(ended, 100);
}

TEST(EbnfGrammar, ErrorsNameTheRule) {
  EXPECT_EQ(ErrorOf(R"(root ::= "a" item)"), "guided_grammar: rule 'root': refers to undefined rule 'item'");
  EXPECT_EQ(ErrorOf(R"(root ::= "a" loop
                       loop ::= "b" loop)"),
            "guided_grammar: rule 'loop': can never finish (every alternative refers back to itself)");
  EXPECT_NE(ErrorOf(R"(start ::= "a")").find("needs a rule named 'root'"), std::string::npos);
  EXPECT_NE(ErrorOf(R"(root ::= "a)").find("unterminated string"), std::string::npos);
  EXPECT_NE(ErrorOf(R"g(root ::= ("a")g").find("missing ')'"), std::string::npos);
  EXPECT_NE(ErrorOf(R"(root ::= [a-)").find("missing ']'"), std::string::npos);
  EXPECT_NE(ErrorOf("root ::= \"a\"\nroot ::= \"b\"").find("defined twice"), std::string::npos);
  EXPECT_NE(ErrorOf(R"(root ::= "a"{3,1})").find("n < m"), std::string::npos);
  // Exponential expansion is refused with the rule that blew up, not run out of memory.
  std::string wide = "root ::= a\n a ::= \"x\" | \"(\" ";
  for (int i = 0; i < 30; ++i) wide += "a ";
  wide += "\")\"";
  EXPECT_NE(ErrorOf(wide).find("rule 'a': expanding"), std::string::npos);
}

}  // namespace
}  // namespace kvserve::structured
