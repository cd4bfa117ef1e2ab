#include "engine/prompt_logprobs.h"

#include <algorithm>
#include <cmath>

#include "base/check.h"

namespace kvserve::engine {

void ScorePromptRows(cache::SeqId seq, std::span<const int32_t> prompt, int64_t first_position,
                     std::span<const float> logits, int vocab, int top, std::vector<int32_t>& order,
                     std::vector<scheduler::PromptLogprob>& out) {
  const size_t v = static_cast<size_t>(vocab);
  KVS_CHECK(logits.size() % v == 0, "logits rows are not vocab-sized");
  const int64_t rows = static_cast<int64_t>(logits.size() / v);
  top = std::min(top, vocab);
  for (int64_t j = 0; j < rows; ++j) {
    const int64_t target = first_position + j + 1;
    if (target < 1 || target >= static_cast<int64_t>(prompt.size())) continue;
    std::span<const float> row = logits.subspan(static_cast<size_t>(j) * v, v);
    // Log-softmax of the raw row, as the sampled tokens' logprobs are reported.
    const float max_logit = *std::max_element(row.begin(), row.end());
    double sum = 0.0;
    for (float l : row) sum += std::exp(static_cast<double>(l) - max_logit);
    const double lse = max_logit + std::log(sum);
    scheduler::PromptLogprob e;
    e.seq = seq;
    e.position = static_cast<int32_t>(target);
    e.token_id = prompt[static_cast<size_t>(target)];
    const float mine = row[static_cast<size_t>(e.token_id)];
    e.logprob = static_cast<float>(mine - lse);
    int32_t higher = 0;
    for (float l : row) higher += l > mine ? 1 : 0;
    e.rank = higher + 1;
    if (top > 0) {
      order.resize(v);
      for (int32_t i = 0; i < vocab; ++i) order[static_cast<size_t>(i)] = i;
      auto better = [&](int32_t a, int32_t b) {
        const float la = row[static_cast<size_t>(a)], lb = row[static_cast<size_t>(b)];
        return la != lb ? la > lb : a < b;
      };
      std::partial_sort(order.begin(), order.begin() + top, order.end(), better);
      for (int i = 0; i < top; ++i) {
        const int32_t id = order[static_cast<size_t>(i)];
        e.top_logprobs.push_back({id, static_cast<float>(row[static_cast<size_t>(id)] - lse)});
      }
    }
    out.push_back(std::move(e));
  }
}

void PromptLogprobsBook::Add(const scheduler::PromptLogprob& e) {
  if (taken_ || e.position != static_cast<int32_t>(entries_.size()) + 1) return;
  TokenLogprobs lp;
  lp.token_id = e.token_id;
  lp.logprob = e.logprob;
  lp.rank = e.rank;
  for (const auto& [id, p] : e.top_logprobs) lp.top.push_back({id, p});
  entries_.push_back(std::move(lp));
}

std::vector<TokenLogprobs> PromptLogprobsBook::Take() {
  if (taken_) return {};
  taken_ = true;
  return std::move(entries_);
}

}  // namespace kvserve::engine
