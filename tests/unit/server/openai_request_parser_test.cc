#include "server/openai/openai_request_parser.h"

#include <gtest/gtest.h>

#include "server/errors/error_mapping.h"
#include "server/openai/openai_param_support.h"

namespace kvserve::server {
namespace {

// The field a parse error names (OpenAI's `param`).
template <typename T>
std::string ParamOf(const absl::StatusOr<T>& r) {
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  return ErrorParam(r.status());
}

TEST(CompletionParserTest, ReadsEveryHonouredField) {
  auto r = ParseCompletionRequest(R"({
    "model": "kvs-tiny", "prompt": "Hello", "max_tokens": 7, "temperature": 0.5, "top_p": 0.9,
    "top_k": 40, "min_p": 0.05, "n": 2, "stop": ["\n", "END"], "stop_token_ids": [2, 5],
    "seed": 42, "presence_penalty": 0.1, "frequency_penalty": -0.2, "repetition_penalty": 1.1,
    "logprobs": 3, "ignore_eos": true, "user": "u1", "priority": -3,
    "min_tokens": 2, "cache_salt": "s", "stream": true, "return_token_ids": true,
    "stream_options": {"include_usage": true, "continuous_usage_stats": true},
    "kv_compression": {"policy": "triattention", "budget": 256, "ratio": 0.5, "divide_length": 64,
                       "window": 32, "sinks": 4, "protect_prompt": false, "audit": true},
    "some_unknown_extension": {"ignored": [1, 2, 3]}
  })");
  ASSERT_TRUE(r.ok()) << r.status();
  const GenerationRequest& g = r->request;
  EXPECT_EQ(g.kind, RequestKind::kCompletion);
  EXPECT_EQ(g.model, "kvs-tiny");
  ASSERT_EQ(g.prompts.size(), 1u);
  EXPECT_EQ(g.prompts[0].text, "Hello");
  EXPECT_EQ(g.max_tokens, 7);
  EXPECT_FLOAT_EQ(g.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(g.sampling.top_p, 0.9f);
  EXPECT_EQ(g.sampling.top_k, 40);
  EXPECT_FLOAT_EQ(g.sampling.min_p, 0.05f);
  EXPECT_EQ(g.n, 2);
  EXPECT_EQ(g.stop, (std::vector<std::string>{"\n", "END"}));
  EXPECT_EQ(g.stop_token_ids, (std::vector<int32_t>{2, 5}));
  EXPECT_EQ(g.sampling.seed, 42u);
  EXPECT_FLOAT_EQ(g.sampling.presence_penalty, 0.1f);
  EXPECT_FLOAT_EQ(g.sampling.frequency_penalty, -0.2f);
  EXPECT_FLOAT_EQ(g.sampling.repetition_penalty, 1.1f);
  EXPECT_EQ(g.sampling.logprobs, 3);
  EXPECT_TRUE(g.return_logprobs);
  EXPECT_TRUE(g.ignore_eos);
  EXPECT_EQ(g.priority, -3);
  EXPECT_EQ(g.min_tokens, 2);
  EXPECT_EQ(g.cache_salt, "s");
  EXPECT_TRUE(r->stream);
  EXPECT_TRUE(r->include_usage);
  EXPECT_TRUE(r->continuous_usage);
  EXPECT_TRUE(r->return_token_ids);
  EXPECT_EQ(g.compression.policy, config::CompressionPolicyKind::kTriAttention);
  EXPECT_EQ(g.compression.budget, 256);
  EXPECT_EQ(g.compression.ratio, 0.5);
  EXPECT_EQ(g.compression.divide_length, 64);
  EXPECT_EQ(g.compression.window, 32);
  EXPECT_EQ(g.compression.sinks, 4);
  EXPECT_EQ(g.compression.protect_prompt, false);
  EXPECT_TRUE(g.compression.audit);
}

TEST(CompletionParserTest, PromptShapes) {
  auto strings = ParseCompletionRequest(R"({"prompt": ["a", "b"]})");
  ASSERT_TRUE(strings.ok());
  ASSERT_EQ(strings->request.prompts.size(), 2u);
  EXPECT_EQ(strings->request.prompts[1].text, "b");

  auto ids = ParseCompletionRequest(R"({"prompt": [5, 6, 7]})");
  ASSERT_TRUE(ids.ok());
  ASSERT_EQ(ids->request.prompts.size(), 1u);
  EXPECT_TRUE(ids->request.prompts[0].is_token_ids);
  EXPECT_EQ(ids->request.prompts[0].token_ids, (std::vector<int32_t>{5, 6, 7}));

  auto batch = ParseCompletionRequest(R"({"prompt": [[5], [6, 7]]})");
  ASSERT_TRUE(batch.ok());
  ASSERT_EQ(batch->request.prompts.size(), 2u);
  EXPECT_EQ(batch->request.prompts[1].token_ids, (std::vector<int32_t>{6, 7}));

  EXPECT_EQ(ParamOf(ParseCompletionRequest(R"({"max_tokens": 3})")), "prompt");
  EXPECT_EQ(ParamOf(ParseCompletionRequest(R"({"prompt": []})")), "prompt");
  EXPECT_EQ(ParamOf(ParseCompletionRequest(R"({"prompt": 5})")), "prompt");
  EXPECT_EQ(ParamOf(ParseCompletionRequest(R"({"prompt": [1, "a"]})")), "prompt");
  EXPECT_EQ(ParamOf(ParseCompletionRequest(R"({"prompt": [true]})")), "prompt");
}

TEST(CompletionParserTest, WrongTypesNameTheField) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"prompt": "x", "max_tokens": "16"})", "max_tokens"},
      {R"({"prompt": "x", "max_tokens": 1.5})", "max_tokens"},
      {R"({"prompt": "x", "temperature": "hot"})", "temperature"},
      {R"({"prompt": "x", "n": [1]})", "n"},
      {R"({"prompt": "x", "stop": 3})", "stop"},
      {R"({"prompt": "x", "stop": ["a", 3]})", "stop"},
      {R"({"prompt": "x", "stop_token_ids": "2"})", "stop_token_ids"},
      {R"({"prompt": "x", "seed": "42"})", "seed"},
      {R"({"prompt": "x", "echo": 1})", "echo"},
      {R"({"prompt": "x", "return_token_ids": "yes"})", "return_token_ids"},
      {R"({"prompt": "x", "stream": "yes"})", "stream"},
      {R"({"prompt": "x", "logprobs": 21})", "logprobs"},
      {R"({"prompt": "x", "top_k": -2})", "top_k"},
      {R"({"prompt": "x", "kv_compression": 3})", "kv_compression"},
      {R"({"prompt": "x", "kv_compression": {"policy": "zip"}})", "kv_compression.policy"},
      {R"({"prompt": "x", "kv_compression": {"budget": "big"}})", "kv_compression.budget"},
      {R"({"prompt": "x", "kv_compression": {"kv_dtype": "int2"}})", "kv_compression.kv_dtype"},
      {R"({"prompt": "x", "kv_compression": {"k_dtype": 4}})", "kv_compression.k_dtype"},
      {R"({"prompt": "x", "kv_compression": {"v_dtype": "fp4"}})", "kv_compression.v_dtype"},
      {R"({"prompt": "x", "kv_compression": {"demote": 5}})", "kv_compression.demote"},
      {R"({"prompt": "x", "kv_compression": {"demote": {"int2": 64}}})",
       "kv_compression.demote.int2"},
      {R"({"prompt": "x", "kv_compression": {"demote": {"int8": "lots"}}})",
       "kv_compression.demote.int8"},
      {R"({"prompt": "x", "kv_compression": {"demote": {"int4": -1}}})",
       "kv_compression.demote.int4"},
      {R"({"prompt": "x", "kv_compression": {"demote": {"lowrank": -3}}})",
       "kv_compression.demote.lowrank"},
      {R"({"prompt": "x", "kv_compression": {"demote": {"lowrank": "all"}}})",
       "kv_compression.demote.lowrank"},
      {R"({"prompt": "x", "stream_options": {"include_usage": true}})", "stream_options"},
      {R"({"prompt": "x", "stream": true, "stream_options": {"include_usage": 1}})",
       "stream_options.include_usage"},
      {R"({"prompt": "x", "suffix": "tail"})", "suffix"},
      {R"({"prompt": "x", "speculative": "ngram"})", "speculative"},
      {R"({"prompt": "x", "speculative": {"method": "eagle"}})", "speculative.method"},
      {R"({"prompt": "x", "speculative": {"num_tokens": 0}})", "speculative.num_tokens"},
      {R"({"prompt": "x", "speculative": {"num_tokens": 17}})", "speculative.num_tokens"},
      {R"({"prompt": "x", "speculative": {"ngram_max": "4"}})", "speculative.ngram_max"},
      {R"({"prompt": "x", "speculative": {"ngram_min": 5, "ngram_max": 3}})",
       "speculative.ngram_min"},
  };
  for (const auto& [body, param] : cases) {
    EXPECT_EQ(ParamOf(ParseCompletionRequest(body)), param) << body;
  }
}

TEST(CompletionParserTest, NullsAndIntegralFloatsAreAccepted) {
  auto r = ParseCompletionRequest(
      R"({"prompt": "x", "max_tokens": 16.0, "temperature": null, "stop": null, "logprobs": null})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->request.max_tokens, 16);
  EXPECT_FLOAT_EQ(r->request.sampling.temperature, 1.0f);
  EXPECT_FALSE(r->request.return_logprobs);
}

TEST(CompletionParserTest, SpeculativeObject) {
  auto r = ParseCompletionRequest(
      R"({"prompt": "x", "speculative": {"method": "ngram", "num_tokens": 6, "ngram_min": 1, "ngram_max": 5}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->request.speculative.method, config::SpeculativeMethod::kNgram);
  EXPECT_EQ(r->request.speculative.num_tokens, 6);
  EXPECT_EQ(r->request.speculative.ngram_min, 1);
  EXPECT_EQ(r->request.speculative.ngram_max, 5);
  auto off = ParseCompletionRequest(R"({"prompt": "x", "speculative": {"method": "none"}})");
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_EQ(off->request.speculative.method, config::SpeculativeMethod::kNone);
  EXPECT_FALSE(off->request.speculative.num_tokens.has_value());
  auto absent = ParseCompletionRequest(R"({"prompt": "x"})");
  ASSERT_TRUE(absent.ok());
  EXPECT_FALSE(absent->request.speculative.method.has_value());
  // method draft parses (the engine refuses it when no draft model is loaded).
  auto draft = ParseCompletionRequest(R"({"prompt": "x", "speculative": {"method": "draft"}})");
  ASSERT_TRUE(draft.ok()) << draft.status();
  EXPECT_EQ(draft->request.speculative.method, config::SpeculativeMethod::kDraft);
  auto unknown = ParseCompletionRequest(R"({"prompt": "x", "speculative": {"method": "eagle"}})");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("speculative.method"), std::string::npos);
  EXPECT_NE(unknown.status().message().find("none|ngram|draft"), std::string::npos);
}

TEST(CompletionParserTest, KvCompressionPrecision) {
  auto both = ParseCompletionRequest(R"({"prompt": "x", "kv_compression": {"kv_dtype": "int8"}})");
  ASSERT_TRUE(both.ok()) << both.status();
  EXPECT_EQ(both->request.compression.k_dtype, config::KvDtype::kInt8);
  EXPECT_EQ(both->request.compression.v_dtype, config::KvDtype::kInt8);
  auto split = ParseCompletionRequest(
      R"({"prompt": "x", "kv_compression": {"policy": "full", "kv_dtype": "bf16", "v_dtype": "int4"}})");
  ASSERT_TRUE(split.ok()) << split.status();
  EXPECT_EQ(split->request.compression.k_dtype, config::KvDtype::kBf16);
  EXPECT_EQ(split->request.compression.v_dtype, config::KvDtype::kInt4);
  auto none = ParseCompletionRequest(R"({"prompt": "x", "kv_compression": {"policy": "full"}})");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->request.compression.k_dtype.has_value());
  EXPECT_FALSE(none->request.compression.v_dtype.has_value());
}

TEST(CompletionParserTest, KvCompressionDemoteSchedule) {
  auto r = ParseCompletionRequest(
      R"({"prompt": "x", "kv_compression": {"policy": "triattention", "budget": 512,
                                            "demote": {"int8": 1024, "int4": 2048.0}}})");
  ASSERT_TRUE(r.ok()) << r.status();
  const auto& d = r->request.compression.demote;
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0], (std::pair<config::KvDtype, int64_t>{config::KvDtype::kInt8, 1024}));
  EXPECT_EQ(d[1], (std::pair<config::KvDtype, int64_t>{config::KvDtype::kInt4, 2048}));
  EXPECT_FALSE(r->request.compression.demote_lowrank.has_value());
  auto none = ParseCompletionRequest(R"({"prompt": "x", "kv_compression": {"policy": "triattention"}})");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->request.compression.demote.empty());
  // "lowrank" names the low-rank key tier, beside the dtype tiers.
  auto lr = ParseCompletionRequest(
      R"({"prompt": "x", "kv_compression": {"policy": "triattention", "demote": {"int8": 64, "lowrank": 4096}}})");
  ASSERT_TRUE(lr.ok()) << lr.status();
  ASSERT_EQ(lr->request.compression.demote.size(), 1u);
  EXPECT_EQ(lr->request.compression.demote[0], (std::pair<config::KvDtype, int64_t>{config::KvDtype::kInt8, 64}));
  EXPECT_EQ(lr->request.compression.demote_lowrank, 4096);
}

TEST(CompletionParserTest, KvCompressionShorthandsAndVllmXargs) {
  auto s = ParseCompletionRequest(R"({"prompt": "x", "kv_compression": "streamingllm"})");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->request.compression.policy, config::CompressionPolicyKind::kStreamingLlm);
  auto x = ParseCompletionRequest(
      R"({"prompt": "x", "vllm_xargs": {"kv_compression": "triattention", "kv_budget": 512}})");
  ASSERT_TRUE(x.ok());
  EXPECT_EQ(x->request.compression.policy, config::CompressionPolicyKind::kTriAttention);
  EXPECT_EQ(x->request.compression.budget, 512);
}

TEST(CompletionParserTest, RejectsNonJsonAndNonObjects) {
  EXPECT_EQ(ParseCompletionRequest("{").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseCompletionRequest("[1]").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseCompletionRequest("").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ChatParserTest, MessagesAndChatOnlyFields) {
  auto r = ParseChatRequest(R"({
    "messages": [{"role": "system", "content": "Be brief."},
                 {"role": "user", "content": [{"type": "text", "text": "Hi"}, {"type": "text", "text": "there"}]},
                 {"role": "assistant", "content": null}],
    "max_tokens": 9, "max_completion_tokens": 5, "logprobs": true, "top_logprobs": 2})");
  ASSERT_TRUE(r.ok()) << r.status();
  const GenerationRequest& g = r->request;
  EXPECT_EQ(g.kind, RequestKind::kChat);
  ASSERT_EQ(g.messages.size(), 3u);
  EXPECT_EQ(g.messages[0].role, "system");
  EXPECT_EQ(g.messages[1].content, "Hi\nthere");
  EXPECT_EQ(g.messages[2].content, "");
  EXPECT_EQ(g.max_tokens, 5);  // max_completion_tokens wins
  EXPECT_TRUE(g.return_logprobs);
  EXPECT_EQ(g.sampling.logprobs, 2);
}

TEST(ChatParserTest, BadMessagesNameTheField) {
  EXPECT_EQ(ParamOf(ParseChatRequest(R"({"prompt": "x"})")), "messages");
  EXPECT_EQ(ParamOf(ParseChatRequest(R"({"messages": {}})")), "messages");
  EXPECT_EQ(ParamOf(ParseChatRequest(R"({"messages": [{"content": "x"}]})")), "messages[0].role");
  EXPECT_EQ(ParamOf(ParseChatRequest(R"({"messages": [{"role": "user", "content": 4}]})")),
            "messages[0].content");
  EXPECT_EQ(ParamOf(ParseChatRequest(
                R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})")),
            "messages[0].content[0].type");
  EXPECT_EQ(ParamOf(ParseChatRequest(R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})")),
            "top_logprobs");
  EXPECT_EQ(ParamOf(ParseChatRequest(
                R"({"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 0})")),
            "max_completion_tokens");
}

// Every row of the field table is walked in request_fields_test.cc.
TEST(UnsupportedParamsTest, DefaultsNullsAndEmptiesAndHintsAreAccepted) {
  EXPECT_TRUE(ParseCompletionRequest(R"({"prompt": "p", "best_of": 1, "user": "u"})").ok());
  EXPECT_EQ(ParamOf(ParseCompletionRequest(R"({"prompt": "p", "best_of": 3, "stream": true})")),
            "best_of");
  EXPECT_TRUE(ParseCompletionRequest(R"({"prompt": "p", "echo": true, "logprobs": 1})").ok());
  EXPECT_EQ(ParamOf(ParseCompletionRequest(R"({"prompt": "p", "prompt_logprobs": 21})")),
            "prompt_logprobs");
  const std::string chat = R"({"messages": [{"role": "user", "content": "x"}], )";
  for (const std::string extra :
       {R"("tools": [])", R"("tools": null)", R"("tool_choice": "none")",
        R"("response_format": {"type": "text"})", R"("modalities": ["text"])",
        R"("metadata": {"k": "v"}, "store": false, "user": "u", "service_tier": "auto")"}) {
    auto r = ParseChatRequest(chat + extra + "}");
    EXPECT_TRUE(r.ok()) << extra << ": " << r.status();
  }
  auto grammar = ParseChatRequest(chat + R"("guided_grammar": "root ::= \"a\""})");
  ASSERT_TRUE(grammar.ok()) << grammar.status();
  EXPECT_EQ(grammar->request.grammar->kind, structured::GrammarSpec::Kind::kGrammar);
  EXPECT_EQ(grammar->request.grammar->source, R"(root ::= "a")");
  EXPECT_EQ(ParamOf(ParseChatRequest(chat + R"("guided_grammar": 3})")), "guided_grammar");
  EXPECT_EQ(ParamOf(ParseChatRequest(chat + R"("guided_grammar": "root ::= \"a\"", "guided_regex": "a"})")),
            "guided_grammar");
  EXPECT_EQ(ParamOf(ParseCompletionRequest(R"({"prompt": "p", "structured_outputs": {"regex": "a"}})")),
            "structured_outputs");
  EXPECT_EQ(ParamOf(ParseChatRequest(chat + R"("functions": [{"name": "f"}]})")), "functions");
  // Completions refuse chat-only members that ask for something (issue 30: no silent ignores).
  EXPECT_EQ(ParamOf(ParseCompletionRequest(
                R"({"prompt": "p", "response_format": {"type": "json_object"}})")),
            "response_format");
  EXPECT_TRUE(
      ParseCompletionRequest(R"({"prompt": "p", "response_format": {"type": "text"}})").ok());
}

TEST(ChatParserTest, StructuredOutputs) {
  using Kind = structured::GrammarSpec::Kind;
  const std::string chat = R"({"messages": [{"role": "user", "content": "x"}], )";
  auto obj = ParseChatRequest(chat + R"("response_format": {"type": "json_object"}})");
  ASSERT_TRUE(obj.ok()) << obj.status();
  ASSERT_TRUE(obj->request.grammar.has_value());
  EXPECT_EQ(obj->request.grammar->kind, Kind::kJsonObject);
  auto schema = ParseChatRequest(chat + R"("response_format": {"type": "json_schema", "json_schema":
      {"name": "p", "strict": true, "schema": {"type": "object", "properties": {"b": {"type": "integer"}}}}}})");
  ASSERT_TRUE(schema.ok()) << schema.status();
  EXPECT_EQ(schema->request.grammar->kind, Kind::kJsonSchema);
  EXPECT_EQ(schema->request.grammar->source, R"({"type":"object","properties":{"b":{"type":"integer"}}})");
  EXPECT_EQ(schema->request.grammar->field, "response_format.json_schema.schema");
  EXPECT_FALSE(ParseChatRequest(chat + R"("response_format": {"type": "text"}})")->request.grammar.has_value());
  auto regex = ParseCompletionRequest(R"({"prompt": "p", "guided_regex": "[0-9]+"})");
  ASSERT_TRUE(regex.ok());
  EXPECT_EQ(regex->request.grammar->kind, Kind::kRegex);
  auto choice = ParseChatRequest(chat + R"("guided_choice": ["yes", "no"]})");
  ASSERT_TRUE(choice.ok());
  EXPECT_EQ(choice->request.grammar->choices, (std::vector<std::string>{"yes", "no"}));
  auto gj = ParseChatRequest(chat + R"("guided_json": "{\"type\": \"boolean\"}"})");
  ASSERT_TRUE(gj.ok());
  EXPECT_EQ(gj->request.grammar->source, R"({"type": "boolean"})");
  EXPECT_EQ(ParamOf(ParseChatRequest(chat + R"("response_format": {"type": "json_schema"}})")),
            "response_format.json_schema");
  EXPECT_EQ(ParamOf(ParseChatRequest(chat + R"("response_format": {"type": "xml"}})")), "response_format.type");
  EXPECT_EQ(ParamOf(ParseChatRequest(chat + R"("guided_regex": "a", "guided_choice": ["a"]})")), "guided_choice");
  EXPECT_EQ(ParamOf(ParseChatRequest(chat + R"("guided_choice": []})")), "guided_choice");
  // A named tool_choice keeps the tools' parameters; the front end makes them the grammar
  // (tool_choice_grammar_test).
  auto named = ParseChatRequest(chat + R"("tools": [{"type": "function", "function": {"name": "f",
      "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}],
      "tool_choice": {"type": "function", "function": {"name": "f"}}})");
  ASSERT_TRUE(named.ok()) << named.status();
  EXPECT_EQ(named->request.chat.tool_choice, ToolChoice::kNamed);
  EXPECT_FALSE(named->request.grammar.has_value());
  ASSERT_EQ(named->request.chat.tool_parameters.size(), 1u);
  EXPECT_EQ(named->request.chat.tool_parameters[0].first, "f");
  EXPECT_EQ(named->request.chat.tool_parameters[0].second, R"({"type":"object","properties":{"q":{"type":"string"}}})");
}

TEST(ChatParserTest, RolesAreCheckedAndDeveloperIsSystem) {
  EXPECT_EQ(ParamOf(ParseChatRequest(R"({"messages": [{"role": "wizard", "content": "x"}]})")),
            "messages[0].role");
  auto function = ParseChatRequest(
      R"({"messages": [{"role": "user", "content": "x"}, {"role": "function", "content": "42"}]})");
  EXPECT_EQ(ParamOf(function), "messages[1].role");
  EXPECT_NE(function.status().message().find("not supported"), std::string_view::npos);
  EXPECT_EQ(ParamOf(ParseChatRequest(R"({"messages": []})")), "messages");
  auto dev = ParseChatRequest(R"({"messages": [{"role": "developer", "content": "Be brief."}]})");
  ASSERT_TRUE(dev.ok()) << dev.status();
  EXPECT_EQ(dev->request.messages[0].role, "system");
}

TEST(ChatParserTest, ToolsToolCallsAndToolResults) {
  auto r = ParseChatRequest(R"({
    "messages": [
      {"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": null, "reasoning_content": "need a tool",
       "tool_calls": [{"id": "c1", "type": "function",
                       "function": {"name": "get_weather", "arguments": "{\"unit\": \"c\", \"city\": \"Paris\"}"}}]},
      {"role": "tool", "tool_call_id": "c1", "name": "get_weather", "content": "21"}],
    "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather",
               "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}],
    "parallel_tool_calls": false})");
  ASSERT_TRUE(r.ok()) << r.status();
  const GenerationRequest& g = r->request;
  EXPECT_EQ(g.chat.tool_choice, ToolChoice::kAuto);  // the default when tools are given
  EXPECT_FALSE(g.chat.parallel_tool_calls);
  // Kept in the client's order; tool-call arguments become objects for the template.
  EXPECT_EQ(g.chat.prompt.tools_json,
            R"([{"type":"function","function":{"name":"get_weather","description":"Weather",)"
            R"("parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}])");
  EXPECT_EQ(g.messages[1].tool_calls_json,
            R"([{"id":"c1","type":"function","function":{"name":"get_weather","arguments":{"unit":"c","city":"Paris"}}}])");
  EXPECT_EQ(g.messages[1].reasoning_content, "need a tool");
  EXPECT_EQ(g.messages[2].role, "tool");
  EXPECT_EQ(g.messages[2].tool_call_id, "c1");
  EXPECT_EQ(g.messages[2].name, "get_weather");

  const std::string user = R"({"messages": [{"role": "user", "content": "x"}], )";
  const std::string tools = R"("tools": [{"type": "function", "function": {"name": "f"}}])";
  auto none = ParseChatRequest(user + tools + R"(, "tool_choice": "none"})");
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->request.chat.tool_choice, ToolChoice::kNone);
  EXPECT_EQ(ParseChatRequest(user + R"("tool_choice": "none"})")->request.chat.tool_choice, ToolChoice::kNone);
  EXPECT_EQ(ParamOf(ParseChatRequest(user + R"("tool_choice": "auto"})")), "tool_choice");  // no tools
  EXPECT_EQ(ParamOf(ParseChatRequest(user + tools + R"(, "tool_choice": "sometimes"})")), "tool_choice");
  EXPECT_EQ(ParseChatRequest(user + tools + R"(, "tool_choice": "required"})")->request.chat.tool_choice,
            ToolChoice::kRequired);
  EXPECT_EQ(ParamOf(ParseChatRequest(
                user + tools + R"(, "tool_choice": {"type": "function", "function": {"name": "g"}}})")),
            "tool_choice.function.name");
  EXPECT_EQ(ParamOf(ParseChatRequest(user + R"("tools": [{"type": "function", "function": {}}]})")),
            "tools[0].function.name");
  EXPECT_EQ(ParamOf(ParseChatRequest(user + R"("tools": [{"type": "retrieval"}]})")), "tools[0].type");
  EXPECT_EQ(ParamOf(ParseChatRequest(
                R"({"messages": [{"role": "tool", "content": "21"}]})")),
            "messages[0].tool_call_id");
  EXPECT_EQ(ParamOf(ParseChatRequest(
                R"({"messages": [{"role": "user", "content": "x", "tool_calls": [{"function": {"name": "f"}}]}]})")),
            "messages[0].tool_calls");
  EXPECT_EQ(ParamOf(ParseChatRequest(R"({"messages": [{"role": "assistant", "tool_calls": [)"
                                     R"({"function": {"name": "f", "arguments": "{oops"}}]}]})")),
            "messages[0].tool_calls[0].function.arguments");
}

TEST(ChatParserTest, TemplateOptions) {
  auto r = ParseChatRequest(R"({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "Sure"}],
    "add_generation_prompt": false, "continue_final_message": true,
    "chat_template_kwargs": {"enable_thinking": false, "date_string": "1 Jan"}, "include_reasoning": false})");
  ASSERT_TRUE(r.ok()) << r.status();
  const ChatPromptOptions& o = r->request.chat.prompt;
  EXPECT_FALSE(o.add_generation_prompt);
  EXPECT_TRUE(o.continue_final_message);
  EXPECT_EQ(o.template_kwargs_json, R"({"enable_thinking":false,"date_string":"1 Jan"})");
  EXPECT_FALSE(r->request.chat.include_reasoning);
  // add_generation_prompt defaults to true, which continue_final_message contradicts.
  EXPECT_EQ(ParamOf(ParseChatRequest(
                R"({"messages": [{"role": "user", "content": "x"}], "continue_final_message": true})")),
            "continue_final_message");
  EXPECT_EQ(ParamOf(ParseChatRequest(
                R"({"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": [1]})")),
            "chat_template_kwargs");
  auto tok = ParseTokenizeRequest(R"({"messages": [{"role": "user", "content": "x"}],
    "add_generation_prompt": false, "chat_template_kwargs": {"k": 1}})");
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_FALSE(tok->chat.add_generation_prompt);
  EXPECT_EQ(tok->chat.template_kwargs_json, R"({"k":1})");
}

TEST(CompletionParserTest, LogitBias) {
  auto r = ParseCompletionRequest(R"({"prompt": "p", "logit_bias": {"7": -100, "12": 3.5}})");
  ASSERT_TRUE(r.ok()) << r.status();
  const auto& b = r->request.sampling.logit_bias;
  ASSERT_EQ(b.size(), 2u);
  // In the order the client wrote them.
  EXPECT_EQ(b[0].token, 7);
  EXPECT_FLOAT_EQ(b[0].bias, -100.0f);
  EXPECT_EQ(b[1].token, 12);
  EXPECT_FLOAT_EQ(b[1].bias, 3.5f);

  EXPECT_EQ(ParamOf(ParseCompletionRequest(R"({"prompt": "p", "logit_bias": [1, 2]})")), "logit_bias");
  EXPECT_EQ(ParamOf(ParseCompletionRequest(R"({"prompt": "p", "logit_bias": {"a": 1}})")), "logit_bias");
  EXPECT_EQ(ParamOf(ParseCompletionRequest(R"({"prompt": "p", "logit_bias": {"-1": 1}})")), "logit_bias");
  EXPECT_EQ(ParamOf(ParseCompletionRequest(R"({"prompt": "p", "logit_bias": {"99999999999": 1}})")),
            "logit_bias");
  EXPECT_EQ(ParamOf(ParseCompletionRequest(R"({"prompt": "p", "logit_bias": {"5": "x"}})")), "logit_bias.5");
  EXPECT_EQ(ParamOf(ParseCompletionRequest(R"({"prompt": "p", "logit_bias": {"5": 101}})")), "logit_bias.5");
  std::string many = R"({"prompt": "p", "logit_bias": {)";
  for (int i = 0; i <= 300; ++i) many += (i ? "," : "") + ("\"" + std::to_string(i) + "\": 1");
  EXPECT_EQ(ParamOf(ParseCompletionRequest(many + "}}")), "logit_bias");
  auto chat = ParseChatRequest(R"({"messages": [{"role": "user", "content": "x"}], "logit_bias": {"3": 1}})");
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_EQ(chat->request.sampling.logit_bias.size(), 1u);
}

TEST(TokenizerEndpointsParserTest, TokenizeAndDetokenize) {
  auto t = ParseTokenizeRequest(R"({"prompt": "abc", "add_special_tokens": false, "return_token_strs": true})");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->prompt, "abc");
  EXPECT_FALSE(t->add_special_tokens);
  EXPECT_TRUE(t->return_token_strs);
  auto m = ParseTokenizeRequest(R"({"messages": [{"role": "user", "content": "hi"}]})");
  ASSERT_TRUE(m.ok());
  EXPECT_TRUE(m->use_messages);
  EXPECT_EQ(ParamOf(ParseTokenizeRequest(R"({})")), "prompt");

  auto d = ParseDetokenizeRequest(R"({"tokens": [1, 2, 3]})");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->tokens, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(ParamOf(ParseDetokenizeRequest(R"({"tokens": "1 2"})")), "tokens");
  EXPECT_EQ(ParamOf(ParseDetokenizeRequest(R"({})")), "tokens");
}

}  // namespace
}  // namespace kvserve::server
