#include "server/openai/openai_response_writer.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace kvserve::server {
namespace {

using nlohmann::json;

ResponseMeta Meta() { return {"cmpl-1", 1700000000, "kvs-tiny"}; }

UsageSummary Usage() {
  UsageSummary u;
  u.prompt_tokens = 5;
  u.completion_tokens = 3;
  u.cached_prompt_tokens = 2;
  u.compression.policy = "triattention";
  u.compression.budget = 64;
  u.compression.rounds = 1;
  u.compression.audit.push_back({1, 10, {0, 3}, 0xfeedfacecafebeefull});
  u.spec_draft_tokens = 7;
  u.spec_accepted_tokens = 2;
  return u;
}

TEST(OpenAiWriterTest, CompletionResponseShape) {
  ChoiceResult c;
  c.index = 0;
  c.text = "abc";
  c.finish = engine::FinishReason::kStop;
  c.stop_string = "\n";
  json j = json::parse(CompletionResponseJson(Meta(), {c}, Usage(), false));
  EXPECT_EQ(j["id"], "cmpl-1");
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["created"], 1700000000);
  EXPECT_EQ(j["model"], "kvs-tiny");
  EXPECT_EQ(j["choices"][0]["text"], "abc");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(j["choices"][0]["stop_reason"], "\n");
  EXPECT_TRUE(j["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(j["usage"]["total_tokens"], 8);
  EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], 2);
  // Speculation: OpenAI's Predicted Outputs slots and kvserve's own object.
  EXPECT_EQ(j["usage"]["completion_tokens_details"]["accepted_prediction_tokens"], 2);
  EXPECT_EQ(j["usage"]["completion_tokens_details"]["rejected_prediction_tokens"], 5);
  EXPECT_EQ(j["usage"]["speculative"]["draft_tokens"], 7);
  EXPECT_EQ(j["usage"]["speculative"]["accepted_tokens"], 2);
  EXPECT_EQ(j["usage"]["kv_compression"]["policy"], "triattention");
  EXPECT_EQ(j["usage"]["kv_compression"]["audit"][0]["token_ids_hash"], "feedfacecafebeef");
}

TEST(OpenAiWriterTest, ChatResponseAndChunks) {
  ChoiceResult c;
  c.text = "hi";
  c.finish = engine::FinishReason::kLength;
  c.logprobs.push_back({5, "h", -0.5f, {{5, "h", -0.5f}}});
  json j = json::parse(ChatResponseJson(Meta(), {c}, Usage(), true));
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(j["choices"][0]["message"]["content"], "hi");
  EXPECT_EQ(j["choices"][0]["logprobs"]["content"][0]["token"], "h");
  EXPECT_EQ(j["choices"][0]["logprobs"]["content"][0]["bytes"], json::array({104}));

  json role = json::parse(ChatRoleChunkJson(Meta(), 1, true));
  EXPECT_EQ(role["object"], "chat.completion.chunk");
  EXPECT_EQ(role["choices"][0]["index"], 1);
  EXPECT_EQ(role["choices"][0]["delta"]["role"], "assistant");
  EXPECT_TRUE(role.contains("usage") && role["usage"].is_null());

  ChoiceDelta d;
  d.index = 1;
  d.text = "x";
  json chunk = json::parse(ChatChunkJson(Meta(), d, false, nullptr, false));
  EXPECT_EQ(chunk["choices"][0]["delta"]["content"], "x");
  EXPECT_TRUE(chunk["choices"][0]["finish_reason"].is_null());
  EXPECT_FALSE(chunk.contains("usage"));

  json usage = json::parse(UsageChunkJson(Meta(), true, Usage()));
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], 3);
}

TEST(OpenAiWriterTest, CompletionLogprobsAndInvalidUtf8) {
  ChoiceDelta d;
  d.text = "ab";
  d.logprobs.push_back({5, "a", -1.0f, {{5, "a", -1.0f}, {6, "\xE2\x82", -2.0f}}});
  d.logprobs.push_back({6, "b", -0.5f, {}});
  json j = json::parse(CompletionChunkJson(Meta(), d, true, 10, nullptr, false));
  const json& lp = j["choices"][0]["logprobs"];
  EXPECT_EQ(lp["tokens"], json::array({"a", "b"}));
  EXPECT_EQ(lp["text_offset"], json::array({10, 11}));
  EXPECT_EQ(lp["top_logprobs"][0].size(), 2u);  // the broken character became U+FFFD
}

TEST(OpenAiWriterTest, TokenIdsOnlyWhenAskedFor) {
  ChoiceResult c;
  c.text = "ab";
  c.token_ids = {5, 6};
  ChoiceDelta d;
  d.text = "b";
  d.token_ids = {6};
  ResponseMeta meta = Meta();
  EXPECT_FALSE(json::parse(CompletionResponseJson(meta, {c}, Usage(), false))["choices"][0].contains("token_ids"));
  EXPECT_FALSE(json::parse(CompletionChunkJson(meta, d, false, 1, nullptr, false))["choices"][0].contains("token_ids"));
  meta.return_token_ids = true;
  EXPECT_EQ(json::parse(CompletionResponseJson(meta, {c}, Usage(), false))["choices"][0]["token_ids"],
            json::array({5, 6}));
  EXPECT_EQ(json::parse(CompletionChunkJson(meta, d, false, 1, nullptr, false))["choices"][0]["token_ids"],
            json::array({6}));
}

TEST(OpenAiWriterTest, ErrorModelsAndTokenizerShapes) {
  json e = json::parse(ErrorJson(MakeHttpError(404, "The model `x` does not exist.")));
  EXPECT_EQ(e["error"]["code"], 404);
  EXPECT_EQ(e["error"]["type"], "not_found_error");
  EXPECT_TRUE(e["error"]["param"].is_null());
  json p = json::parse(ErrorJson(MakeHttpError(400, "bad", "max_tokens")));
  EXPECT_EQ(p["error"]["param"], "max_tokens");

  FrontendOptions o;
  o.model_name = "kvs-tiny";
  o.max_model_len = 2048;
  json m = json::parse(ModelsJson(o));
  EXPECT_EQ(m["object"], "list");
  EXPECT_EQ(m["data"][0]["id"], "kvs-tiny");
  EXPECT_EQ(m["data"][0]["object"], "model");
  EXPECT_EQ(m["data"][0]["max_model_len"], 2048);

  TokenizeResult t;
  t.tokens = {1, 2};
  t.max_model_len = 2048;
  json tj = json::parse(TokenizeResponseJson(t));
  EXPECT_EQ(tj["count"], 2);
  EXPECT_EQ(tj["tokens"], json::array({1, 2}));
  EXPECT_EQ(json::parse(DetokenizeResponseJson("hi"))["prompt"], "hi");
  EXPECT_EQ(json::parse(VersionJson("0.1.0"))["version"], "0.1.0");
}

TEST(OpenAiWriterTest, ChatReasoningAndToolCalls) {
  ChoiceResult c;
  c.text = "\n";
  c.reasoning = "think first";
  c.tool_calls = {{"call_a_0_0", "get_weather", "{\"city\":\"Paris\"}"}};
  c.finish = engine::FinishReason::kStop;
  json j = json::parse(ChatResponseJson(Meta(), {c}, Usage(), false));
  const json& m = j["choices"][0]["message"];
  EXPECT_TRUE(m["content"].is_null());  // blank content next to tool calls
  EXPECT_EQ(m["reasoning_content"], "think first");
  EXPECT_EQ(m["tool_calls"][0]["id"], "call_a_0_0");
  EXPECT_EQ(m["tool_calls"][0]["type"], "function");
  EXPECT_EQ(m["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(m["tool_calls"][0]["function"]["arguments"], "{\"city\":\"Paris\"}");
  EXPECT_FALSE(m["tool_calls"][0].contains("index"));
  EXPECT_EQ(j["choices"][0]["finish_reason"], "tool_calls");
  // Cut by max_tokens: the calls that completed come back, and the reason says it was cut.
  c.finish = engine::FinishReason::kLength;
  j = json::parse(ChatResponseJson(Meta(), {c}, Usage(), false));
  EXPECT_EQ(j["choices"][0]["message"]["tool_calls"].size(), 1u);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");

  ChoiceResult plain;
  plain.text = "hi";
  json p = json::parse(ChatResponseJson(Meta(), {plain}, Usage(), false));
  EXPECT_EQ(p["choices"][0]["message"]["content"], "hi");
  EXPECT_FALSE(p["choices"][0]["message"].contains("reasoning_content"));
  EXPECT_FALSE(p["choices"][0]["message"].contains("tool_calls"));
  EXPECT_EQ(p["choices"][0]["finish_reason"], "stop");

  ChoiceDelta d;
  d.reasoning = "hmm";
  json chunk = json::parse(ChatChunkJson(Meta(), d, false, nullptr, false));
  EXPECT_EQ(chunk["choices"][0]["delta"]["reasoning_content"], "hmm");
  EXPECT_FALSE(chunk["choices"][0]["delta"].contains("content"));
  ChoiceDelta last;
  last.tool_calls = c.tool_calls;
  last.finish = engine::FinishReason::kStop;
  chunk = json::parse(ChatChunkJson(Meta(), last, false, nullptr, false));
  EXPECT_EQ(chunk["choices"][0]["delta"]["tool_calls"][0]["index"], 0);
  EXPECT_EQ(chunk["choices"][0]["delta"]["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(chunk["choices"][0]["finish_reason"], "tool_calls");
}

}  // namespace
}  // namespace kvserve::server
