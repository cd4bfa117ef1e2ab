#include "server/core/stream_consumer.h"

#include <gtest/gtest.h>

#include "server/core/generation_output.h"
#include "tests/unit/server/fake_text_codec.h"

namespace kvserve::server {
namespace {

using engine::FinishReason;
using engine::TokenEvent;
using testing::FakeTextCodec;
using testing::FakeTokens;

// Records aborts; nothing else is used by the consumer.
class AbortRecorder final : public engine::EngineClient {
 public:
  absl::StatusOr<std::shared_ptr<engine::TokenStream>> Submit(engine::RequestSpec) override {
    return absl::UnimplementedError("not used");
  }
  void Abort(const std::string& id) override { aborts.push_back(id); }
  engine::EngineStats Stats() const override { return {}; }
  std::vector<std::string> aborts;
};

class StreamConsumerTest : public ::testing::Test {
 protected:
  StreamConsumer& Make(StreamConsumer::Options o) {
    o.engine_request_id = "req";
    if (o.prompt_ids.empty()) o.prompt_ids = {1, 2, 3};
    consumer_ = std::make_unique<StreamConsumer>(codec_, engine_, stream_, std::move(o));
    return *consumer_;
  }
  TokenEvent Tokens(std::string_view text, int sample = 0) {
    TokenEvent e;
    e.sample_index = sample;
    e.token_ids = FakeTokens(text);
    return e;
  }
  TokenEvent Final(int sample, FinishReason reason, bool usage = true) {
    TokenEvent e;
    e.sample_index = sample;
    e.finish = reason;
    if (usage) {
      engine::RequestUsage u;
      u.cached_prompt_tokens = 2;
      u.compression.policy = "streamingllm";
      u.compression.evicted_tokens = 5;
      e.usage = u;
    }
    return e;
  }
  std::vector<ChoiceResult> DrainAll() {
    std::vector<ChoiceDelta> out;
    consumer_->Drain(out);
    ChoiceAccumulator acc(consumer_n_);
    for (auto& d : out) acc.Add(std::move(d));
    return acc.results();
  }

  FakeTextCodec codec_;
  AbortRecorder engine_;
  std::shared_ptr<engine::TokenStream> stream_ = std::make_shared<engine::TokenStream>();
  std::unique_ptr<StreamConsumer> consumer_;
  int consumer_n_ = 1;
};

TEST_F(StreamConsumerTest, DetokenizesAndReportsUsage) {
  Make({});
  stream_->push(Tokens("Hello"));
  stream_->push(Tokens(" world"));
  stream_->push(Final(0, FinishReason::kLength));
  stream_->close();
  auto r = DrainAll();
  EXPECT_TRUE(consumer_->done());
  EXPECT_EQ(r[0].text, "Hello world");
  EXPECT_EQ(r[0].finish, FinishReason::kLength);
  EXPECT_EQ(r[0].token_ids.size(), 11u);
  UsageSummary u = consumer_->usage();
  EXPECT_EQ(u.prompt_tokens, 3);
  EXPECT_EQ(u.completion_tokens, 11);
  EXPECT_EQ(u.cached_prompt_tokens, 2);
  EXPECT_EQ(u.compression.policy, "streamingllm");
  EXPECT_TRUE(engine_.aborts.empty());
}

TEST_F(StreamConsumerTest, NeverSplitsAUtf8Character) {
  Make({});
  const std::string euro = "\xE2\x82\xAC";  // one character, three tokens
  std::vector<ChoiceDelta> out;
  stream_->push(Tokens(euro.substr(0, 2)));
  consumer_->Drain(out);
  for (const auto& d : out) EXPECT_EQ(d.text, "");
  stream_->push(Tokens(euro.substr(2)));
  out.clear();
  consumer_->Drain(out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].text, euro);
}

TEST_F(StreamConsumerTest, StopStringSplitAcrossTokensIsNeverEmitted) {
  Make({.stop = {"STOP"}});
  std::vector<ChoiceDelta> out;
  stream_->push(Tokens("abcST"));
  consumer_->Drain(out);
  std::string streamed;
  for (const auto& d : out) streamed += d.text;
  EXPECT_EQ(streamed, "ab");  // "cST" is held back: it might start "STOP"
  out.clear();
  stream_->push(Tokens("OPxyz"));
  consumer_->Drain(out);
  for (const auto& d : out) streamed += d.text;
  EXPECT_EQ(streamed, "abc");
  ASSERT_FALSE(out.empty());
  EXPECT_EQ(out.back().finish, FinishReason::kStop);
  EXPECT_EQ(out.back().stop_string, "STOP");
  // Every sample is done, so the engine request is aborted.
  EXPECT_EQ(engine_.aborts, std::vector<std::string>{"req"});
  EXPECT_FALSE(consumer_->done());
  // The engine's abort arrives; its tokens past the stop are not counted.
  TokenEvent late = Tokens("more");
  stream_->push(late);
  stream_->push(Final(0, FinishReason::kAbort));
  stream_->close();
  out.clear();
  consumer_->Drain(out);
  EXPECT_TRUE(out.empty());
  EXPECT_TRUE(consumer_->done());
  EXPECT_EQ(consumer_->usage().completion_tokens, 7);  // "abcST" + "OP"
}

TEST_F(StreamConsumerTest, EarliestStopStringWinsAndTailIsCheckedAtTheEnd) {
  Make({.stop = {"xyz", "b"}});
  stream_->push(Tokens("axyzb"));
  auto r = DrainAll();
  EXPECT_EQ(r[0].text, "a");
  EXPECT_EQ(r[0].stop_string, "xyz");

  stream_ = std::make_shared<engine::TokenStream>();
  Make({.stop = {"END"}});
  stream_->push(Tokens("abEN"));
  stream_->push(Final(0, FinishReason::kLength));
  stream_->close();
  r = DrainAll();
  EXPECT_EQ(r[0].text, "abEN");  // held-back tail released at the end
  EXPECT_EQ(r[0].finish, FinishReason::kLength);
}

// vLLM's include_stop_str_in_output keeps the match; min_tokens delays the search.
TEST_F(StreamConsumerTest, IncludeStopStrKeepsTheMatch) {
  Make({.stop = {"xyz"}, .include_stop_str = true});
  stream_->push(Tokens("axyzb"));
  auto r = DrainAll();
  EXPECT_EQ(r[0].text, "axyz");
  EXPECT_EQ(r[0].stop_string, "xyz");
  EXPECT_EQ(r[0].finish, FinishReason::kStop);
}

TEST_F(StreamConsumerTest, StopStringsAreNotSearchedBeforeMinTokens) {
  Make({.stop = {"b"}, .min_tokens = 3});
  stream_->push(Tokens("ab"));  // "b" is token 2 of at least 3: not a stop
  stream_->push(Tokens("cb"));  // the "b" of token 4 is
  auto r = DrainAll();
  EXPECT_EQ(r[0].finish, FinishReason::kStop);
  EXPECT_EQ(r[0].text, "abc");
  EXPECT_EQ(r[0].stop_string, "b");
}

// best_of: three samples run, the one with the highest cumulative logprob is the only choice
// (index 0), emitted once all finished; usage counts every sample's tokens.
TEST_F(StreamConsumerTest, BestOfReturnsTheMostLikelySamples) {
  consumer_n_ = 2;
  Make({.n = 3, .choices = 2});
  auto with_logprob = [&](std::string_view text, int sample, float lp) {
    TokenEvent e = Tokens(text, sample);
    for (int32_t id : e.token_ids) e.logprobs.push_back({id, lp, {}});
    return e;
  };
  stream_->push(with_logprob("aa", 0, -1.0f));   // -2
  stream_->push(with_logprob("bbb", 1, -0.5f));  // -1.5
  stream_->push(with_logprob("c", 2, -3.0f));    // -3
  std::vector<ChoiceDelta> out;
  consumer_->Drain(out);
  EXPECT_TRUE(out.empty());  // nothing before every sample finished
  stream_->push(Final(0, FinishReason::kLength, false));
  stream_->push(Final(1, FinishReason::kLength, false));
  stream_->push(Final(2, FinishReason::kLength));
  stream_->close();
  auto r = DrainAll();
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].text, "bbb");
  EXPECT_EQ(r[1].text, "aa");
  EXPECT_EQ(r[0].finish, FinishReason::kLength);
  EXPECT_EQ(consumer_->usage().completion_tokens, 6);
}

TEST_F(StreamConsumerTest, SamplesInterleaveAndAbortWaitsForAll) {
  consumer_n_ = 2;
  Make({.n = 2, .stop = {"!"}});
  stream_->push(Tokens("a!", 0));
  stream_->push(Tokens("bb", 1));
  std::vector<ChoiceDelta> out;
  consumer_->Drain(out);
  EXPECT_TRUE(engine_.aborts.empty());  // sample 1 still runs
  stream_->push(Tokens("c", 1));
  stream_->push(Tokens("ignored", 0));
  TokenEvent last = Final(1, FinishReason::kLength);
  stream_->push(last);
  stream_->close();
  consumer_->Drain(out);
  ChoiceAccumulator acc(2);
  for (auto& d : out) acc.Add(std::move(d));
  EXPECT_EQ(acc.results()[0].text, "a");
  EXPECT_EQ(acc.results()[0].finish, FinishReason::kStop);
  EXPECT_EQ(acc.results()[1].text, "bbc");
  EXPECT_EQ(acc.results()[1].finish, FinishReason::kLength);
  EXPECT_TRUE(engine_.aborts.empty());  // the engine finished sample 1 by itself
  EXPECT_EQ(consumer_->usage().completion_tokens, 5);
}

TEST_F(StreamConsumerTest, FirstChoiceIndexEchoAndStopTokenId) {
  Make({.first_choice_index = 4, .echo_text = "Q: "});
  TokenEvent e = Tokens("A");
  e.finish = FinishReason::kStop;
  e.stop_token_id = 7;
  stream_->push(e);
  stream_->close();
  std::vector<ChoiceDelta> out;
  consumer_->Drain(out);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].index, 4);
  EXPECT_EQ(out[0].text, "Q: ");
  EXPECT_EQ(out[1].text, "A");
  EXPECT_EQ(out[1].stop_token_id, 7);
}

TEST_F(StreamConsumerTest, ClosedWithoutFinalEventEndsAsAbort) {
  Make({});
  stream_->push(Tokens("par"));
  stream_->close();
  auto r = DrainAll();
  EXPECT_TRUE(consumer_->done());
  EXPECT_EQ(r[0].text, "par");
  EXPECT_EQ(r[0].finish, FinishReason::kAbort);
}

TEST_F(StreamConsumerTest, LogprobsAreTrimmedToTheRequestedAlternatives) {
  Make({.logprobs = true, .top_logprobs = 0});
  TokenEvent e = Tokens("a");
  e.logprobs.push_back({e.token_ids[0], -0.25f, {{e.token_ids[0], -0.25f}}});
  stream_->push(e);
  auto r = DrainAll();
  ASSERT_EQ(r[0].logprobs.size(), 1u);
  EXPECT_EQ(r[0].logprobs[0].token, "a");
  EXPECT_FLOAT_EQ(r[0].logprobs[0].logprob, -0.25f);
  EXPECT_TRUE(r[0].logprobs[0].top.empty());
}

TEST_F(StreamConsumerTest, EngineErrorIsCarried) {
  Make({});
  TokenEvent e = Final(0, FinishReason::kError);
  e.error = "device lost";
  stream_->push(e);
  stream_->close();
  auto r = DrainAll();
  EXPECT_EQ(r[0].finish, FinishReason::kError);
  EXPECT_EQ(r[0].error, "device lost");
}

// Chat output: stop strings apply to the raw text, then reasoning and tool calls are read out.
TEST_F(StreamConsumerTest, ChatOutputSplitsReasoningAndToolCalls) {
  StreamConsumer::Options o;
  chat::ChatOutputConfig config;
  config.split_reasoning = true;
  config.tools = chat::ToolCallFormat::kHermes;
  config.call_id_prefix = "call_r_";
  o.chat_output = config;
  o.stop = {"<STOP>"};
  Make(std::move(o));
  stream_->push(Tokens("<think>look it up</thi"));
  std::vector<ChoiceDelta> first;
  consumer_->Drain(first);
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].reasoning, "look it up");  // "</thi" held back: it may be the end marker
  EXPECT_EQ(first[0].text, "");
  stream_->push(Tokens("nk>On it.<tool_call>{\"name\": \"f\", \"arguments\": {\"x\": 1}}</tool_call><STOP>ignored"));
  stream_->push(Final(0, FinishReason::kStop));
  stream_->close();
  std::vector<ChoiceDelta> rest;
  consumer_->Drain(rest);
  ASSERT_FALSE(rest.empty());
  const ChoiceDelta& last = rest.back();
  EXPECT_EQ(last.finish, FinishReason::kStop);
  ASSERT_EQ(last.tool_calls.size(), 1u);
  EXPECT_EQ(last.tool_calls[0].id, "call_r_0_0");  // prefix, sample 0, call 0
  EXPECT_EQ(last.tool_calls[0].name, "f");
  EXPECT_EQ(last.tool_calls[0].arguments, "{\"x\":1}");
  std::string content;
  for (const auto& d : rest) content += d.text;
  EXPECT_EQ(content, "On it.");
}

TEST_F(StreamConsumerTest, ChatOutputCanDropReasoning) {
  StreamConsumer::Options o;
  chat::ChatOutputConfig config;
  config.split_reasoning = true;
  config.starts_in_reasoning = true;
  o.chat_output = config;
  o.include_reasoning = false;
  Make(std::move(o));
  stream_->push(Tokens("hidden</think>shown"));
  stream_->push(Final(0, FinishReason::kLength));
  stream_->close();
  auto r = DrainAll();
  EXPECT_EQ(r[0].text, "shown");
  EXPECT_EQ(r[0].reasoning, "");
}

}  // namespace
}  // namespace kvserve::server
