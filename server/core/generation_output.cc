#include "server/core/generation_output.h"

#include "base/check.h"

namespace kvserve::server {

ChoiceAccumulator::ChoiceAccumulator(int num_choices) : results_(num_choices) {
  for (int i = 0; i < num_choices; ++i) results_[i].index = i;
}

void ChoiceAccumulator::Add(ChoiceDelta delta) {
  KVS_CHECK(delta.index >= 0 && delta.index < static_cast<int>(results_.size()), "choice ",
            delta.index, " of ", results_.size());
  ChoiceResult& r = results_[delta.index];
  r.text += delta.text;
  r.reasoning += delta.reasoning;
  for (auto& call : delta.tool_calls) r.tool_calls.push_back(std::move(call));
  r.token_ids.insert(r.token_ids.end(), delta.token_ids.begin(), delta.token_ids.end());
  for (auto& lp : delta.logprobs) r.logprobs.push_back(std::move(lp));
  for (auto& lp : delta.prompt_logprobs) r.prompt_logprobs.push_back(std::move(lp));
  if (!delta.embedding.empty()) r.embedding = std::move(delta.embedding);
  if (delta.finish) {
    r.finish = *delta.finish;
    r.stop_string = std::move(delta.stop_string);
    r.stop_token_id = delta.stop_token_id;
    r.error = std::move(delta.error);
    r.unavailable = delta.unavailable;
  }
}

const ChoiceResult* ChoiceAccumulator::first_error() const {
  for (const auto& r : results_) {
    if (r.finish == engine::FinishReason::kError) return &r;
  }
  return nullptr;
}

}  // namespace kvserve::server
