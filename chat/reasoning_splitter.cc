#include "chat/reasoning_splitter.h"

#include "chat/json_scan.h"

namespace kvserve::chat {
namespace {

bool IsSpace(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

}  // namespace

ReasoningSplitter::ReasoningSplitter(ReasoningMarkers markers, bool starts_in_reasoning)
    : markers_(std::move(markers)), state_(starts_in_reasoning ? State::kReasoning : State::kStart) {}

bool ReasoningSplitter::PromptOpensReasoning(std::string_view prompt, const ReasoningMarkers& markers) {
  size_t end = prompt.size();
  while (end > 0 && IsSpace(prompt[end - 1])) --end;
  return !markers.start.empty() && prompt.substr(0, end).ends_with(markers.start);
}

void ReasoningSplitter::Push(std::string_view text, std::string& reasoning, std::string& content) {
  pending_.append(text);
  Drain(reasoning, content);
}

void ReasoningSplitter::Drain(std::string& reasoning, std::string& content) {
  for (;;) {
    switch (state_) {
      case State::kStart: {
        size_t first = 0;
        while (first < pending_.size() && IsSpace(pending_[first])) ++first;
        const std::string_view rest = std::string_view(pending_).substr(first);
        if (rest.empty()) return;  // only whitespace so far: undecided
        if (rest.starts_with(markers_.start)) {
          pending_.erase(0, first + markers_.start.size());
          state_ = State::kReasoning;
          continue;
        }
        if (std::string_view(markers_.start).starts_with(rest)) return;  // a marker in the making
        state_ = State::kContent;
        continue;
      }
      case State::kReasoning: {
        const size_t at = pending_.find(markers_.end);
        if (at != std::string::npos) {
          reasoning.append(pending_, 0, at);
          pending_.erase(0, at + markers_.end.size());
          state_ = State::kContent;
          continue;
        }
        const size_t keep = PartialMarkerSuffix(pending_, markers_.end);
        reasoning.append(pending_, 0, pending_.size() - keep);
        pending_.erase(0, pending_.size() - keep);
        return;
      }
      case State::kContent:
        content += pending_;
        pending_.clear();
        return;
    }
  }
}

void ReasoningSplitter::Finish(std::string& reasoning, std::string& content) {
  Drain(reasoning, content);
  if (state_ == State::kReasoning) {
    reasoning += pending_;
  } else {
    content += pending_;
  }
  pending_.clear();
}

}  // namespace kvserve::chat
