#include "engine/draft_verifier.h"

#include "base/check.h"

namespace kvserve::engine {
namespace {

void Emit(cache::SeqId seq, const model::SampleResult& r,
          std::vector<scheduler::SampledToken>& out) {
  scheduler::SampledToken t;
  t.seq = seq;
  t.token_id = r.token;
  t.logprob = r.logprob;
  for (const auto& lp : r.top_logprobs) t.top_logprobs.emplace_back(lp.token, lp.logprob);
  out.push_back(std::move(t));
}

}  // namespace

void SampleNext(model::Sampler& sampler, RunnerBook::Seq& s, cache::SeqId seq,
                std::span<const float> logits, int32_t num_generated,
                std::vector<scheduler::SampledToken>& out) {
  model::SamplerRng rng = model::TokenRng(s.seed, num_generated, s.sample_index);
  model::SampleResult r =
      sampler.Sample(logits, s.sampling, s.prompt(), s.output(), rng, RunnerBook::AllowedFor(s));
  RunnerBook::Record(s, r.token);
  Emit(seq, r, out);
}

int32_t VerifyDraft(model::Sampler& sampler, RunnerBook::Seq& s, cache::SeqId seq,
                    std::span<const float> logits, int vocab, std::span<const int32_t> draft,
                    int32_t num_generated, std::vector<scheduler::SampledToken>& out) {
  const size_t v = static_cast<size_t>(vocab);
  const int32_t k = static_cast<int32_t>(draft.size());
  for (int32_t i = 0; i < k; ++i) {
    std::span<const float> row = logits.subspan(static_cast<size_t>(i) * v, v);
    model::SamplerRng rng = model::TokenRng(s.seed, num_generated + i, s.sample_index);
    model::VerifyResult r =
        sampler.Verify(row, s.sampling, s.prompt(), s.output(), rng, draft[static_cast<size_t>(i)],
                       RunnerBook::AllowedFor(s));
    RunnerBook::Record(s, r.sample.token);
    Emit(seq, r.sample, out);
    if (!r.accepted) return i;
  }
  // Every guess held: the last row gives one more token for free.
  SampleNext(sampler, s, seq, logits.subspan(static_cast<size_t>(k) * v, v), num_generated + k,
             out);
  return k;
}

int32_t AcceptArgmaxes(RunnerBook::Seq& s, cache::SeqId seq, std::span<const int32_t> argmax,
                       std::span<const float> logprob, std::span<const int32_t> draft,
                       std::vector<scheduler::SampledToken>& out) {
  const size_t k = draft.size();
  KVS_CHECK(argmax.size() > k && logprob.size() > k, "draft of ", k, " guesses over ",
            argmax.size(), " rows");
  size_t accepted = 0;
  while (accepted < k && draft[accepted] == argmax[accepted]) ++accepted;
  for (size_t j = 0; j <= accepted; ++j) {
    scheduler::SampledToken t;
    t.seq = seq;
    t.token_id = argmax[j];
    t.logprob = s.sampling.logprobs ? logprob[j] : 0.0f;
    RunnerBook::Record(s, t.token_id);
    out.push_back(std::move(t));
  }
  return static_cast<int32_t>(accepted);
}

}  // namespace kvserve::engine
