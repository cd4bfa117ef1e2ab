// Cost of grammar-constrained decoding per generated token and sequence, on a synthetic
// vocabulary (the 256 single bytes plus random 2-10 byte pieces of ASCII text, JSON
// punctuation and UTF-8) of 32k and 128k tokens, for a JSON-schema grammar:
//   BM_MaskCold   computing one state's token mask (the trie walk; once per state and grammar)
//   BM_MaskWarm   a decode step once masks are cached: mask lookup, -inf on disallowed logits,
//                 advancing the automaton by the sampled token
//   BM_MaskWarmPerTokenBranch  the same step with the mask applied as it was before
//                 base::MaskLogits (a bit test and branch per token), kept as the baseline so
//                 that before/after are measured side by side in one run
// Items processed = tokens, so the per-token figure is the reported time per item.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "structured/grammar_cache.h"

namespace {

using namespace kvserve::structured;

constexpr const char* kSchema = R"js({"type": "object", "properties": {
  "name": {"type": "string", "maxLength": 24}, "age": {"type": "integer", "minimum": 0},
  "email": {"type": "string", "pattern": "[a-z]{1,12}@[a-z]{1,12}\\.(com|org)"},
  "tags": {"type": "array", "items": {"type": "string", "maxLength": 10}, "maxItems": 4},
  "active": {"type": "boolean"}, "score": {"type": "number"}}})js";
constexpr const char* kOutput =
    R"({"name": "Ada Lovelace", "age": 36, "email": "ada@math.org", "tags": ["math", "poet"], "active": true, "score": 9.5})";

std::shared_ptr<const TokenTrie> SyntheticVocab(int size) {
  std::mt19937 rng(42);
  const std::string alphabet =
      "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789      .,:;\"'{}[]()-_!?\n";
  const std::vector<std::string> utf8 = {"é", "ü", "ß", "日", "本", "語", "—", "€"};
  std::vector<std::string> tokens = {"<s>", "</s>"};
  for (int b = 0; b < 256; ++b) tokens.emplace_back(1, static_cast<char>(b));
  while (static_cast<int>(tokens.size()) < size) {
    const int len = 2 + static_cast<int>(rng() % 9);
    std::string t;
    for (int i = 0; i < len; ++i) {
      if (rng() % 40 == 0) {
        t += utf8[rng() % utf8.size()];
      } else {
        t += alphabet[rng() % alphabet.size()];
      }
    }
    tokens.push_back(std::move(t));
  }
  return std::make_shared<TokenTrie>(tokens, std::vector<int32_t>{0}, /*eos=*/1);
}

struct Fixture {
  std::shared_ptr<const TokenTrie> trie;
  std::shared_ptr<const CompiledGrammar> grammar;
  std::vector<int32_t> path;    // tokens spelling kOutput (single bytes)
  std::vector<int32_t> states;  // state before each token
};

Fixture Make(int vocab) {
  Fixture f;
  f.trie = SyntheticVocab(vocab);
  GrammarCache cache(f.trie);
  f.grammar = *cache.Get({GrammarSpec::Kind::kJsonSchema, kSchema, {}, "bench"});
  int32_t s = f.grammar->start();
  for (unsigned char c : std::string(kOutput)) {
    const int32_t tok = 2 + c;  // the single-byte token
    f.states.push_back(s);
    f.path.push_back(tok);
    s = f.grammar->Advance(s, tok);
  }
  if (s == ByteDfa::kDead) std::abort();
  return f;
}

void BM_MaskCold(benchmark::State& state) {
  const Fixture f = Make(static_cast<int>(state.range(0)));
  size_t i = 0;
  for (auto _ : state) {
    TokenMask m = f.grammar->ComputeMask(f.states[i++ % f.states.size()]);
    benchmark::DoNotOptimize(m.data());
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_MaskWarm(benchmark::State& state) {
  const Fixture f = Make(static_cast<int>(state.range(0)));
  for (int32_t s : f.states) f.grammar->MaskFor(s);  // fill the cache
  std::vector<float> logits(f.trie->vocab_size(), 0.5f);
  for (auto _ : state) {
    int32_t s = f.grammar->start();
    for (int32_t tok : f.path) {
      CompiledGrammar::ApplyMask(f.grammar->MaskFor(s), logits);
      s = f.grammar->Advance(s, tok);
    }
    benchmark::DoNotOptimize(logits.data());
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(f.path.size()));
}

// The previous CompiledGrammar::ApplyMask / Sampler loop: one bit test and branch per token.
void ApplyMaskPerToken(const TokenMask& mask, std::span<float> logits) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const size_t n = logits.size();
  for (size_t w = 0; w * 64 < n; ++w) {
    const uint64_t bits = mask[w];
    if (bits == ~uint64_t{0}) continue;
    const size_t end = std::min(n, w * 64 + 64);
    for (size_t i = w * 64; i < end; ++i) {
      if (!((bits >> (i - w * 64)) & 1)) logits[i] = kNegInf;
    }
  }
}

void BM_MaskWarmPerTokenBranch(benchmark::State& state) {
  const Fixture f = Make(static_cast<int>(state.range(0)));
  for (int32_t s : f.states) f.grammar->MaskFor(s);
  std::vector<float> logits(f.trie->vocab_size(), 0.5f);
  for (auto _ : state) {
    int32_t s = f.grammar->start();
    for (int32_t tok : f.path) {
      ApplyMaskPerToken(f.grammar->MaskFor(s), logits);
      s = f.grammar->Advance(s, tok);
    }
    benchmark::DoNotOptimize(logits.data());
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(f.path.size()));
}

BENCHMARK(BM_MaskCold)->Arg(32000)->Arg(128000)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_MaskWarm)->Arg(32000)->Arg(128000)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_MaskWarmPerTokenBranch)->Arg(32000)->Arg(128000)->Unit(benchmark::kMicrosecond);

}  // namespace
