#include "structured/compiled_grammar.h"

#include <gtest/gtest.h>

#include <random>

#include "structured/grammar_cache.h"

namespace kvserve::structured {
namespace {

// A small vocabulary: specials, single bytes and a few merges.
std::shared_ptr<const TokenTrie> Vocab() {
  std::vector<std::string> tokens = {"<s>", "</s>", "<|im_start|>"};
  for (int b = 32; b < 127; ++b) tokens.emplace_back(1, static_cast<char>(b));
  for (const char* m : {"{\"", "\": ", "true", "false", "yes", "no", ", \"", "\"}", "ab", "abc"}) tokens.emplace_back(m);
  return std::make_shared<TokenTrie>(tokens, std::vector<int32_t>{0, 2}, /*eos=*/1);
}

int32_t Id(const TokenTrie& t, std::string_view text) {
  for (int32_t i = 0; i < t.vocab_size(); ++i) {
    if (t.token_bytes(i) == text && !t.excluded(i)) return i;
  }
  return -1;
}

std::shared_ptr<const CompiledGrammar> Compile(GrammarCache& cache, GrammarSpec spec) {
  auto g = cache.Get(spec);
  EXPECT_TRUE(g.ok()) << g.status();
  return *g;
}

TEST(CompiledGrammar, MaskAllowsExactlyTheTokensThatKeepTheGrammarAlive) {
  auto trie = Vocab();
  GrammarCache cache(trie);
  auto g = Compile(cache, {GrammarSpec::Kind::kChoice, "", {"yes", "no", "abc"}, "guided_choice"});
  const TokenMask& m0 = g->MaskFor(g->start());
  for (int32_t i = 0; i < trie->vocab_size(); ++i) {
    const std::string& t = trie->token_bytes(i);
    const bool want = !trie->excluded(i) && i != trie->eos() &&
                      (std::string("yes").starts_with(t) || std::string("no").starts_with(t) ||
                       std::string("abc").starts_with(t)) && !t.empty();
    EXPECT_EQ(Allowed(m0, i), want) << "token " << i << " '" << t << "'";
  }
  EXPECT_FALSE(Allowed(m0, trie->eos()));
  int32_t s = g->Advance(g->start(), Id(*trie, "ab"));
  ASSERT_NE(s, ByteDfa::kDead);
  const TokenMask& m1 = g->MaskFor(s);
  EXPECT_TRUE(Allowed(m1, Id(*trie, "c")));
  EXPECT_FALSE(Allowed(m1, trie->eos()));
  s = g->Advance(s, Id(*trie, "c"));
  const TokenMask& m2 = g->MaskFor(s);  // "abc" complete: only EOS
  for (int32_t i = 0; i < trie->vocab_size(); ++i) EXPECT_EQ(Allowed(m2, i), i == trie->eos()) << i;
  EXPECT_EQ(g->Advance(g->start(), Id(*trie, "z")), ByteDfa::kDead);
  EXPECT_EQ(g->Advance(g->start(), 0), ByteDfa::kDead);  // special tokens never
}

TEST(CompiledGrammar, RandomWalksThroughMasksAlwaysMatch) {
  auto trie = Vocab();
  GrammarCache cache(trie);
  auto g = Compile(cache, {GrammarSpec::Kind::kJsonSchema,
                           R"({"type": "object", "properties": {"ok": {"type": "boolean"},
                               "n": {"type": "integer"}, "s": {"type": "string", "maxLength": 5}}})",
                           {}, "response_format"});
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    int32_t state = g->start();
    std::string text;
    for (int step = 0; step < 200; ++step) {
      const TokenMask& m = g->MaskFor(state);
      std::vector<int32_t> allowed;
      for (int32_t i = 0; i < trie->vocab_size(); ++i) {
        if (Allowed(m, i)) allowed.push_back(i);
      }
      ASSERT_FALSE(allowed.empty());
      const int32_t tok = allowed[rng() % allowed.size()];
      if (tok == trie->eos()) break;
      text += trie->token_bytes(tok);
      state = g->Advance(state, tok);
      ASSERT_NE(state, ByteDfa::kDead);
    }
    if (g->dfa().accepting(state)) EXPECT_TRUE(g->dfa().Matches(text)) << text;
  }
}

TEST(CompiledGrammar, ApplyMaskAndCache) {
  auto trie = Vocab();
  GrammarCache cache(trie, /*capacity=*/1);
  GrammarSpec spec{GrammarSpec::Kind::kRegex, "a+", {}, "guided_regex"};
  auto g1 = Compile(cache, spec);
  auto g2 = Compile(cache, spec);
  EXPECT_EQ(g1.get(), g2.get());
  EXPECT_EQ(cache.hits(), 1);
  Compile(cache, {GrammarSpec::Kind::kRegex, "b+", {}, "guided_regex"});
  EXPECT_EQ(cache.size(), 1u);  // LRU evicted "a+"
  std::vector<float> logits(trie->vocab_size(), 1.0f);
  CompiledGrammar::ApplyMask(g1->MaskFor(g1->start()), logits);
  for (int32_t i = 0; i < trie->vocab_size(); ++i) {
    EXPECT_EQ(std::isinf(logits[i]), trie->token_bytes(i) != "a" || trie->excluded(i)) << i;
  }
  auto bad = cache.Get({GrammarSpec::Kind::kRegex, "(?=a)", {}, "guided_regex"});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message().substr(0, 13), "guided_regex:");
}

}  // namespace
}  // namespace kvserve::structured
