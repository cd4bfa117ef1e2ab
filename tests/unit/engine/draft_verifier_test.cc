// The device-greedy half of draft verification (the CUDA runner's path, checked here on the
// host): AcceptArgmaxes over per-row argmaxes emits what VerifyDraft emits from the same logits
// (tokens, logprobs, accepted count, history), and RunnerBook::DraftMasks gives row j the
// grammar mask of the state after the first j guesses.
#include "engine/draft_verifier.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "structured/compiled_grammar.h"
#include "structured/grammar_cache.h"

namespace kvserve::engine {
namespace {

constexpr int kVocab = 16;

// Logits of `rows` rows with a distinct argmax per row and no ties.
std::vector<float> Rows(int rows) {
  std::vector<float> l(static_cast<size_t>(rows * kVocab));
  for (int r = 0; r < rows; ++r) {
    for (int t = 0; t < kVocab; ++t) {
      l[static_cast<size_t>(r * kVocab + t)] =
          0.1f * static_cast<float>((t * 7 + r * 5) % kVocab) - 0.03f * t;
    }
  }
  return l;
}

// Host argmax and raw log-softmax of it, as the device computes per row.
void Argmaxes(const std::vector<float>& logits, int rows, std::vector<int32_t>& argmax,
              std::vector<float>& logprob) {
  for (int r = 0; r < rows; ++r) {
    const float* row = logits.data() + r * kVocab;
    int best = 0;
    for (int t = 1; t < kVocab; ++t) {
      if (row[t] > row[best]) best = t;
    }
    double sum = 0.0;
    for (int t = 0; t < kVocab; ++t) sum += std::exp(static_cast<double>(row[t] - row[best]));
    argmax.push_back(best);
    logprob.push_back(static_cast<float>(-std::log(sum)));
  }
}

RunnerBook::Seq GreedySeq() {
  RunnerBook::Seq s;
  s.history = {1, 2, 3};
  s.num_prompt = 3;
  s.sampling.temperature = 0.0f;
  s.sampling.logprobs = 0;
  return s;
}

TEST(DraftVerifier, AcceptArgmaxesEmitsWhatVerifyDraftEmits) {
  constexpr int kGuesses = 3;
  const std::vector<float> logits = Rows(kGuesses + 1);
  std::vector<int32_t> argmax;
  std::vector<float> logprob;
  Argmaxes(logits, kGuesses + 1, argmax, logprob);
  // Every guess right (bonus token), the first wrong, the last wrong.
  const std::vector<std::vector<int32_t>> drafts = {
      {argmax[0], argmax[1], argmax[2]},
      {(argmax[0] + 1) % kVocab, argmax[1], argmax[2]},
      {argmax[0], argmax[1], (argmax[2] + 1) % kVocab}};
  const int32_t want_accepted[] = {3, 0, 2};
  model::Sampler sampler(kVocab);
  for (size_t d = 0; d < drafts.size(); ++d) {
    SCOPED_TRACE(d);
    RunnerBook::Seq ref = GreedySeq(), dev = GreedySeq();
    std::vector<scheduler::SampledToken> want, got;
    const cache::SeqId seq(7);
    const int32_t a = VerifyDraft(sampler, ref, seq, logits, kVocab, drafts[d], 5, want);
    const int32_t b = AcceptArgmaxes(dev, seq, argmax, logprob, drafts[d], got);
    EXPECT_EQ(a, want_accepted[d]);
    EXPECT_EQ(a, b);
    ASSERT_EQ(want.size(), got.size());
    ASSERT_EQ(got.size(), static_cast<size_t>(b + 1));
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(want[i].seq, got[i].seq);
      EXPECT_EQ(want[i].token_id, got[i].token_id) << "token " << i;
      EXPECT_NEAR(want[i].logprob, got[i].logprob, 1e-5f) << "token " << i;
    }
    EXPECT_EQ(ref.history, dev.history);
  }
  // Without logprobs asked for, none is reported (as model::Sampler).
  RunnerBook::Seq quiet = GreedySeq();
  quiet.sampling.logprobs.reset();
  std::vector<scheduler::SampledToken> out;
  AcceptArgmaxes(quiet, cache::SeqId(1), argmax, logprob, drafts[0], out);
  for (const auto& t : out) EXPECT_EQ(t.logprob, 0.0f);
}

TEST(DraftVerifier, DraftMasksFollowTheGuessesThroughTheGrammar) {
  // Tokens: 0 "a", 1 "b", 2 "c", 3 ".", 4 EOS.
  auto trie = std::make_shared<structured::TokenTrie>(
      std::vector<std::string>{"a", "b", "c", ".", ""}, std::vector<int32_t>{4}, 4);
  structured::GrammarCache grammars(trie);
  auto g = grammars.Get({structured::GrammarSpec::Kind::kRegex, "ab+c\\.", {}, "guided_regex"});
  ASSERT_TRUE(g.ok()) << g.status();
  RunnerBook::Seq s = GreedySeq();
  s.grammar = *g;
  s.grammar_state = s.grammar->start();
  const int32_t start = s.grammar_state;
  const std::vector<int32_t> draft = {0, 1, 3};  // "a", "b", then "." (refused after "ab")
  std::vector<std::span<const uint64_t>> masks(draft.size() + 1);
  RunnerBook::DraftMasks(s, draft, masks);
  int32_t state = start;
  for (size_t j = 0; j < 3; ++j) {
    ASSERT_FALSE(masks[j].empty()) << "row " << j;
    const structured::TokenMask& want = s.grammar->MaskFor(state);
    EXPECT_TRUE(std::equal(want.begin(), want.end(), masks[j].begin(), masks[j].end()))
        << "row " << j;
    state = s.grammar->Advance(state, draft[j]);
  }
  EXPECT_TRUE(structured::Allowed(s.grammar->MaskFor(start), 0));
  EXPECT_FALSE(structured::Allowed(s.grammar->MaskFor(start), 1));
  EXPECT_TRUE(masks[3].empty()) << "the row after a refused guess is unconstrained (never read)";
  EXPECT_EQ(s.grammar_state, start) << "the sequence's own state moved";
  // No grammar: every row unconstrained.
  RunnerBook::Seq plain = GreedySeq();
  RunnerBook::DraftMasks(plain, draft, masks);
  for (const auto& m : masks) EXPECT_TRUE(m.empty());
}

}  // namespace
}  // namespace kvserve::engine
