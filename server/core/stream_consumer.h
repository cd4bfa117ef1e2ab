// StreamConsumer: turns the token events of one engine request (one prompt, n samples)
// into choice deltas. Both front ends use it, so detokenization, stop strings and usage
// are implemented once.
//
//   TokenStream ─► per sample: decoder.Push(id) ─► pending text ─► emitted text (delta)
//                                                   │
//                      stop strings are searched in `pending`; the last (longest stop - 1)
//                      bytes stay held back so a stop string split across tokens is never
//                      half-emitted. A match truncates the sample there, finishes it with
//                      reason "stop", and once every sample is finished the engine request
//                      is aborted (stop strings are the front end's job; stop ids, EOS and
//                      max_tokens are the engine's).
//
// Invariants: every choice gets exactly one delta with `finish` set, after all its text;
// tokens that arrive after a choice finished are dropped and not counted in usage.
// Drain() runs on one consumer thread at a time; Abort() may be called from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "chat/chat_output_parser.h"
#include "engine/engine_client.h"
#include "engine/token_stream.h"
#include "server/core/generation_output.h"
#include "server/core/text_codec.h"

namespace kvserve::server {

class StreamConsumer {
 public:
  struct Options {
    std::string engine_request_id{};
    int n = 1;                        // samples of this engine request
    // Choices returned; 0: n. Fewer than n (best_of): every sample is held until all finished,
    // then the `choices` with the highest cumulative logprob are emitted, best first (the
    // engine must report sampled-token logprobs); usage still counts every sample.
    int choices = 0;
    int first_choice_index = 0;       // choice index of sample 0
    std::vector<std::string> stop{};  // stop strings
    bool include_stop_str = false;  // vLLM's include_stop_str_in_output: keep the match in the text
    int min_tokens = 0;             // stop strings are not searched before this many tokens
    bool logprobs = false;            // attach per-token logprob entries
    int top_logprobs = 0;             // alternatives kept per entry
    bool skip_special_tokens = true;
    std::string echo_text{};          // emitted first in every choice (completions echo)
    bool echo_logprobs = false;       // echo with logprobs: the echo carries the prompt's entries
    int prompt_logprobs = -1;         // >= 0: each sample's first delta carries prompt_logprobs
    std::vector<int32_t> prompt_ids{};  // its size is usage.prompt_tokens
    bool at_text_start = false;       // chat replies start a text; completions continue the prompt
    // Chat: reasoning and tool calls are read out of each sample's text (after stop strings).
    std::optional<chat::ChatOutputConfig> chat_output{};
    bool include_reasoning = true;    // false: reasoning is split off and dropped
  };

  StreamConsumer(const TextCodec& codec, engine::EngineClient& engine,
                 std::shared_ptr<engine::TokenStream> stream, Options options);
  StreamConsumer(const StreamConsumer&) = delete;
  StreamConsumer& operator=(const StreamConsumer&) = delete;

  // Consumes every event available now without blocking and appends the deltas.
  // Returns true if anything was appended.
  bool Drain(std::vector<ChoiceDelta>& out);
  // True once every choice finished and the engine's last event (the one with usage)
  // arrived, or the engine closed the stream.
  bool done() const { return done_; }
  UsageSummary usage() const;
  // Cancels the engine request (client gone). Thread-safe; the stream still ends normally.
  void Abort();

  engine::TokenStream& stream() { return *stream_; }
  const std::string& engine_request_id() const { return options_.engine_request_id; }

 private:
  struct Sample {
    std::unique_ptr<TextStreamDecoder> decoder;
    std::unique_ptr<chat::ChatOutputParser> parser;  // chat output formats, or null
    std::string pending;           // decoded, not yet emitted
    bool finished = false;
    bool finished_locally = false; // by a stop string (the engine still runs it)
    int64_t tokens = 0;
    double cumulative_logprob = 0.0;  // of the tokens counted in `tokens` (best_of)
  };

  int num_choices() const { return options_.choices > 0 ? options_.choices : options_.n; }
  bool best_of() const { return num_choices() < options_.n; }
  // best_of: moves the deltas of the best samples from held_ to `out`, re-indexed by rank.
  void EmitBest(std::vector<ChoiceDelta>& out);

  void OnEvent(engine::TokenEvent& event, std::vector<ChoiceDelta>& out);
  // The echo and the prompt logprobs, once: with prompt logprobs asked for, when the engine's
  // first event (which carries them) is in events_ or the stream ended without it.
  void EmitPromptParts(std::vector<ChoiceDelta>& out, std::vector<ChoiceDelta>& sink);
  // The prompt's entries (first token: no logprob), `top` alternatives each.
  std::vector<LogprobEntry> PromptEntries(const std::vector<engine::TokenLogprobs>& lps,
                                          int top) const;
  // Position and length of the earliest stop string in `text`.
  std::optional<std::pair<size_t, size_t>> FindStop(std::string_view text) const;
  // Moves the emittable part of `pending` into `delta.text`.
  void Emit(Sample& sample, bool everything, ChoiceDelta& delta) const;
  // Runs the text of `delta` (just emitted) through the sample's chat output parser.
  void ParseChatOutput(Sample& sample, bool finished, ChoiceDelta& delta) const;
  void MaybeAbortAfterStop();

  const TextCodec& codec_;
  engine::EngineClient& engine_;
  std::shared_ptr<engine::TokenStream> stream_;
  Options options_;
  size_t hold_back_ = 0;           // longest stop string - 1
  std::vector<Sample> samples_;
  std::vector<engine::TokenEvent> events_;  // Drain's batch (empty between calls)
  std::vector<ChoiceDelta> held_;           // best_of: every sample's deltas until all finished
  bool echo_sent_ = false;
  bool abort_sent_ = false;
  bool done_ = false;
  std::optional<engine::RequestUsage> engine_usage_;
};

}  // namespace kvserve::server
