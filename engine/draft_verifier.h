// VerifyDraft: the model runner's half of speculative decoding for one sequence.
//
//   rows:   r0 (the fed token)  r1 (guess g1)  ...  rk (guess gk)      logits of all k + 1
//   i = 0:  Verify(r0, g1) ── accepted ──► i = 1: Verify(r1, g2) ... ──► all k: Sample(rk) (bonus)
//                └─ rejected: its correction is emitted and verification stops
//
// Row i predicts the token after g_i; its sampling context (penalties, grammar state) is the
// history with g1..g_i, which holds exactly when those were accepted, so each row is checked
// in order and Record()ed before the next. The i-th emitted token uses the RNG of generated
// token num_generated + i, as a plain decode of that token would: sampling stays stateless
// per token and reproducible per seed. Returns the accepted guesses (0..k); it appends
// accepted + 1 SampledTokens for `seq` to `out`.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/runner_book.h"
#include "model/sampler.h"
#include "scheduler/step_plan.h"

namespace kvserve::engine {

int32_t VerifyDraft(model::Sampler& sampler, RunnerBook::Seq& s, cache::SeqId seq,
                    std::span<const float> logits, int vocab, std::span<const int32_t> draft,
                    int32_t num_generated, std::vector<scheduler::SampledToken>& out);

// The same verification from argmaxes computed elsewhere, for a sequence that
// model::RouteFor routes to the device (greedy; no logit bias, penalties or top-N logprobs):
// row j's argmax[j] (over its grammar mask, RunnerBook::DraftMasks) and the raw log-softmax
// logprob[j] of that token, rows 0..k (k = draft.size()). Verify accepts guess j exactly when it
// is row j's argmax, so this emits what VerifyDraft emits from the same logits: the accepted
// guesses, then the argmax of the first mismatching row (the correction) or of row k (the
// bonus), each Record()ed, with its logprob when the request asks for logprobs (as
// model::Sampler). Returns the accepted guesses.
int32_t AcceptArgmaxes(RunnerBook::Seq& s, cache::SeqId seq, std::span<const int32_t> argmax,
                       std::span<const float> logprob, std::span<const int32_t> draft,
                       std::vector<scheduler::SampledToken>& out);

// The single-token case (no draft): sample the next token from one logits row.
void SampleNext(model::Sampler& sampler, RunnerBook::Seq& s, cache::SeqId seq,
                std::span<const float> logits, int32_t num_generated,
                std::vector<scheduler::SampledToken>& out);

}  // namespace kvserve::engine
