#include "server/core/stream_consumer.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/check.h"

namespace kvserve::server {
namespace {

bool IsUtf8Continuation(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

}  // namespace

StreamConsumer::StreamConsumer(const TextCodec& codec, engine::EngineClient& engine,
                               std::shared_ptr<engine::TokenStream> stream, Options options)
    : codec_(codec), engine_(engine), stream_(std::move(stream)), options_(std::move(options)) {
  KVS_CHECK(options_.n >= 1 && num_choices() <= options_.n, "n=", options_.n,
            " choices=", options_.choices);
  for (const auto& s : options_.stop) hold_back_ = std::max(hold_back_, s.size());
  if (hold_back_ > 0) --hold_back_;
  samples_.resize(options_.n);
  for (size_t i = 0; i < samples_.size(); ++i) {
    Sample& s = samples_[i];
    s.decoder = codec_.NewStreamDecoder(options_.at_text_start, options_.skip_special_tokens);
    if (options_.chat_output) {
      chat::ChatOutputConfig config = *options_.chat_output;
      absl::StrAppend(&config.call_id_prefix, i, "_");
      s.parser = std::make_unique<chat::ChatOutputParser>(config);
    }
  }
}

bool StreamConsumer::Drain(std::vector<ChoiceDelta>& out) {
  const size_t before = out.size();
  if (done_) return false;
  // best_of: deltas are held until every sample finished.
  std::vector<ChoiceDelta>& sink = best_of() ? held_ : out;
  // Everything queued, under one lock; the buffer keeps its capacity between calls.
  stream_->pop_all(events_);
  EmitPromptParts(out, sink);
  for (engine::TokenEvent& event : events_) OnEvent(event, sink);
  events_.clear();
  // The request's last event carries usage and comes after every sample's final event;
  // the close that follows adds nothing, so do not wait for it.
  bool all_finished = true;
  for (const auto& s : samples_) all_finished &= s.finished;
  if (all_finished && engine_usage_) {
    done_ = true;
  } else if (stream_->done()) {
    // The engine closed the stream: a sample without its final event was cut short.
    for (int s = 0; s < options_.n; ++s) {
      Sample& sample = samples_[s];
      if (sample.finished) continue;
      ChoiceDelta d;
      d.index = options_.first_choice_index + s;
      sample.decoder->Finish(sample.pending);
      Emit(sample, /*everything=*/true, d);
      ParseChatOutput(sample, /*finished=*/true, d);
      sample.finished = true;
      d.finish = engine::FinishReason::kAbort;
      sink.push_back(std::move(d));
    }
    done_ = true;
  }
  if (done_ && best_of()) EmitBest(out);
  return out.size() > before;
}

std::vector<LogprobEntry> StreamConsumer::PromptEntries(
    const std::vector<engine::TokenLogprobs>& lps, int top) const {
  std::vector<LogprobEntry> entries;
  if (options_.prompt_ids.empty()) return entries;
  LogprobEntry first{options_.prompt_ids[0], codec_.TokenText(options_.prompt_ids[0]), 0.0f, {}};
  first.no_logprob = true;
  entries.push_back(std::move(first));
  for (const engine::TokenLogprobs& lp : lps) {
    LogprobEntry e{lp.token_id, codec_.TokenText(lp.token_id), lp.logprob, {}};
    e.rank = lp.rank;
    for (const auto& t : lp.top) {
      if (static_cast<int>(e.top.size()) >= top) break;
      e.top.push_back(TopLogprobEntry{t.token_id, codec_.TokenText(t.token_id), t.logprob});
    }
    entries.push_back(std::move(e));
  }
  return entries;
}

void StreamConsumer::EmitPromptParts(std::vector<ChoiceDelta>& out,
                                     std::vector<ChoiceDelta>& sink) {
  if (echo_sent_) return;
  const engine::TokenEvent* carrier = nullptr;
  for (const engine::TokenEvent& e : events_) {
    if (!e.prompt_logprobs.empty()) carrier = &e;
  }
  const bool waits = options_.echo_logprobs || options_.prompt_logprobs >= 0;
  if (waits && carrier == nullptr && events_.empty() && !stream_->done()) return;
  echo_sent_ = true;
  if (!options_.echo_text.empty()) {
    for (int s = 0; s < num_choices(); ++s) {
      ChoiceDelta d;
      d.index = options_.first_choice_index + s;
      d.text = options_.echo_text;
      if (options_.echo_logprobs && carrier != nullptr) {
        d.logprobs = PromptEntries(carrier->prompt_logprobs, options_.top_logprobs);
      }
      out.push_back(std::move(d));
    }
  }
  if (options_.prompt_logprobs >= 0 && carrier != nullptr) {
    for (int s = 0; s < options_.n; ++s) {
      ChoiceDelta d;
      d.index = options_.first_choice_index + s;
      d.prompt_logprobs = PromptEntries(carrier->prompt_logprobs, options_.prompt_logprobs);
      sink.push_back(std::move(d));
    }
  }
}

void StreamConsumer::EmitBest(std::vector<ChoiceDelta>& out) {
  std::vector<int> order(samples_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return samples_[a].cumulative_logprob > samples_[b].cumulative_logprob;
  });
  std::vector<int> rank_of(samples_.size(), -1);
  for (int rank = 0; rank < num_choices(); ++rank) rank_of[order[rank]] = rank;
  // Best first; each sample's deltas keep their order.
  for (int rank = 0; rank < num_choices(); ++rank) {
    for (ChoiceDelta& d : held_) {
      const int sample = d.index - options_.first_choice_index;
      if (sample < 0 || rank_of[sample] != rank) continue;
      d.index = -1;  // taken
      ChoiceDelta moved = std::move(d);
      moved.index = options_.first_choice_index + rank;
      out.push_back(std::move(moved));
    }
  }
  held_.clear();
}

void StreamConsumer::OnEvent(engine::TokenEvent& event, std::vector<ChoiceDelta>& out) {
  if (event.usage) engine_usage_ = std::move(event.usage);
  if (event.sample_index < 0 || event.sample_index >= options_.n) return;
  Sample& sample = samples_[event.sample_index];
  if (sample.finished) return;  // finished by a stop string; the engine is catching up

  ChoiceDelta d;
  d.index = options_.first_choice_index + event.sample_index;
  d.embedding = std::move(event.embedding);
  for (size_t i = 0; i < event.token_ids.size(); ++i) {
    const int32_t id = event.token_ids[i];
    ++sample.tokens;
    if (i < event.logprobs.size()) sample.cumulative_logprob += event.logprobs[i].logprob;
    d.token_ids.push_back(id);
    if (options_.logprobs && i < event.logprobs.size()) {
      const engine::TokenLogprobs& lp = event.logprobs[i];
      LogprobEntry entry{id, codec_.TokenText(id), lp.logprob, {}};
      for (const auto& t : lp.top) {
        if (static_cast<int>(entry.top.size()) >= options_.top_logprobs) break;
        entry.top.push_back(TopLogprobEntry{t.token_id, codec_.TokenText(t.token_id), t.logprob});
      }
      d.logprobs.push_back(std::move(entry));
    }
    sample.decoder->Push(id, sample.pending);
    if (sample.tokens < options_.min_tokens) continue;
    if (auto hit = FindStop(sample.pending)) {
      d.stop_string = sample.pending.substr(hit->first, hit->second);
      sample.pending.resize(hit->first + (options_.include_stop_str ? hit->second : 0));
      sample.finished = sample.finished_locally = true;
      d.finish = engine::FinishReason::kStop;
      break;
    }
  }
  if (!sample.finished && event.finish) {
    sample.decoder->Finish(sample.pending);
    std::optional<std::pair<size_t, size_t>> hit;
    if (sample.tokens >= options_.min_tokens) hit = FindStop(sample.pending);
    if (hit) {
      d.stop_string = sample.pending.substr(hit->first, hit->second);
      sample.pending.resize(hit->first + (options_.include_stop_str ? hit->second : 0));
      d.finish = engine::FinishReason::kStop;
    } else {
      d.finish = *event.finish;
      d.stop_token_id = event.stop_token_id;
      d.error = event.error;
      d.unavailable = event.unavailable;
    }
    sample.finished = true;
  }
  Emit(sample, sample.finished, d);
  ParseChatOutput(sample, sample.finished, d);
  if (!d.text.empty() || !d.token_ids.empty() || d.finish) out.push_back(std::move(d));
  if (sample.finished_locally) MaybeAbortAfterStop();
}

std::optional<std::pair<size_t, size_t>> StreamConsumer::FindStop(std::string_view text) const {
  std::optional<std::pair<size_t, size_t>> best;
  for (const auto& stop : options_.stop) {
    size_t pos = text.find(stop);
    if (pos != std::string_view::npos && (!best || pos < best->first)) {
      best = std::make_pair(pos, stop.size());
    }
  }
  return best;
}

void StreamConsumer::Emit(Sample& sample, bool everything, ChoiceDelta& delta) const {
  size_t n = sample.pending.size();
  if (!everything) {
    n = n > hold_back_ ? n - hold_back_ : 0;
    // Never split a character: the held-back tail starts on a UTF-8 lead byte.
    while (n > 0 && n < sample.pending.size() && IsUtf8Continuation(sample.pending[n])) --n;
  }
  if (n == 0) return;
  delta.text.append(sample.pending, 0, n);
  sample.pending.erase(0, n);
}

void StreamConsumer::ParseChatOutput(Sample& sample, bool finished, ChoiceDelta& delta) const {
  if (sample.parser == nullptr) return;
  chat::ChatOutputDelta out;
  sample.parser->Push(delta.text, out);
  if (finished) sample.parser->Finish(out);
  delta.text = std::move(out.content);
  if (options_.include_reasoning) delta.reasoning = std::move(out.reasoning);
  delta.tool_calls = std::move(out.tool_calls);
}

void StreamConsumer::MaybeAbortAfterStop() {
  if (abort_sent_) return;
  for (const auto& s : samples_) {
    if (!s.finished) return;
  }
  // Every sample is done as far as the client is concerned; stop the engine from
  // generating past the stop string. Its final events still arrive (with usage), and the
  // request is counted as finished by `stop`.
  abort_sent_ = true;
  engine_.FinishAsStopped(options_.engine_request_id);
}

UsageSummary StreamConsumer::usage() const {
  UsageSummary u;
  u.prompt_tokens = static_cast<int64_t>(options_.prompt_ids.size());
  for (const auto& s : samples_) u.completion_tokens += s.tokens;
  if (engine_usage_) {
    u.cached_prompt_tokens = engine_usage_->cached_prompt_tokens;
    u.compression = engine_usage_->compression;
    u.spec_draft_tokens = engine_usage_->spec_draft_tokens;
    u.spec_accepted_tokens = engine_usage_->spec_accepted_tokens;
  }
  return u;
}

void StreamConsumer::Abort() { engine_.Abort(options_.engine_request_id); }

}  // namespace kvserve::server
