// The field walk (issue 30): every row of the request field table (openai_param_support.h) is
// sent to the real parser. Honoured rows must carry their effect into the parsed request,
// refused rows must be a 400 naming the field (and accept their "not asked" values), hints
// must be accepted. docs/api.md's parameter table must be the table rendered.
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "server/errors/error_mapping.h"
#include "server/openai/openai_param_support.h"
#include "server/openai/openai_request_parser.h"

namespace kvserve::server {
namespace {

using json = nlohmann::ordered_json;
using Check = std::function<void(const HttpGenerationRequest&)>;

// How to ask for a field, and what the parsed request must then carry.
struct Case {
  std::string value;  // JSON of the field's value
  Check check;
  std::string extra = "";  // other members the value needs (JSON object text)
};

// Keyed "<scope>:<name>", scope c (completions), h (chat) or m (message; checks messages[0]).
const std::map<std::string, Case>& Cases() {
  static const auto* cases = new std::map<std::string, Case>{
      {"c:prompt",
       {R"(["a", [5, 6]])",
        [](auto& r) {
          ASSERT_EQ(r.request.prompts.size(), 2u);
          EXPECT_TRUE(r.request.prompts[1].is_token_ids);
        }}},
      {"h:messages",
       {R"([{"role": "developer", "content": "be brief"}, {"role": "user", "content": "hi"}])",
        [](auto& r) {
          ASSERT_EQ(r.request.messages.size(), 2u);
          EXPECT_EQ(r.request.messages[0].role, "system");
        }}},
      {"model", {R"("kvs-tiny")", [](auto& r) { EXPECT_EQ(r.request.model, "kvs-tiny"); }}},
      {"max_tokens", {"7", [](auto& r) { EXPECT_EQ(r.request.max_tokens, 7); }}},
      {"h:max_completion_tokens",
       {"9", [](auto& r) { EXPECT_EQ(r.request.max_tokens, 9); }, R"({"max_tokens": 3})"}},
      {"temperature",
       {"0.25", [](auto& r) { EXPECT_FLOAT_EQ(r.request.sampling.temperature, 0.25f); }}},
      {"top_p", {"0.5", [](auto& r) { EXPECT_FLOAT_EQ(r.request.sampling.top_p, 0.5f); }}},
      {"n", {"3", [](auto& r) { EXPECT_EQ(r.request.n, 3); }}},
      {"stop",
       {R"(["END"])", [](auto& r) { EXPECT_EQ(r.request.stop, std::vector<std::string>{"END"}); }}},
      {"seed", {"11", [](auto& r) { EXPECT_EQ(r.request.sampling.seed, 11u); }}},
      {"presence_penalty",
       {"0.5", [](auto& r) { EXPECT_FLOAT_EQ(r.request.sampling.presence_penalty, 0.5f); }}},
      {"frequency_penalty",
       {"-0.5", [](auto& r) { EXPECT_FLOAT_EQ(r.request.sampling.frequency_penalty, -0.5f); }}},
      {"logit_bias",
       {R"({"7": -100})",
        [](auto& r) {
          ASSERT_EQ(r.request.sampling.logit_bias.size(), 1u);
          EXPECT_EQ(r.request.sampling.logit_bias[0].token, 7);
          EXPECT_EQ(r.request.sampling.logit_bias[0].bias, -100.0f);
        }}},
      {"c:logprobs",
       {"2",
        [](auto& r) {
          EXPECT_TRUE(r.request.return_logprobs);
          EXPECT_EQ(r.request.sampling.logprobs, 2);
        }}},
      {"h:logprobs", {"true", [](auto& r) { EXPECT_TRUE(r.request.return_logprobs); }}},
      {"h:top_logprobs",
       {"4", [](auto& r) { EXPECT_EQ(r.request.sampling.logprobs, 4); }, R"({"logprobs": true})"}},
      {"c:best_of", {"3", [](auto& r) { EXPECT_EQ(r.request.best_of, 3); }}},
      {"c:echo", {"true", [](auto& r) { EXPECT_TRUE(r.request.echo); }}},
      {"prompt_logprobs", {"2", [](auto& r) { EXPECT_EQ(r.request.prompt_logprobs, 2); }}},
      {"stream", {"true", [](auto& r) { EXPECT_TRUE(r.stream); }}},
      {"stream_options",
       {R"({"include_usage": true, "continuous_usage_stats": true})",
        [](auto& r) {
          EXPECT_TRUE(r.include_usage);
          EXPECT_TRUE(r.continuous_usage);
        },
        R"({"stream": true})"}},
      {"h:tools",
       {R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}])",
        [](auto& r) {
          EXPECT_NE(r.request.chat.prompt.tools_json.find("\"f\""), std::string::npos);
          EXPECT_EQ(r.request.chat.tool_choice, ToolChoice::kAuto);
        }}},
      {"h:tool_choice",
       {R"("required")",
        [](auto& r) { EXPECT_EQ(r.request.chat.tool_choice, ToolChoice::kRequired); },
        R"({"tools": [{"type": "function", "function": {"name": "f"}}]})"}},
      {"h:parallel_tool_calls",
       {"false", [](auto& r) { EXPECT_FALSE(r.request.chat.parallel_tool_calls); }}},
      {"h:response_format",
       {R"({"type": "json_object"})",
        [](auto& r) {
          ASSERT_TRUE(r.request.grammar.has_value());
          EXPECT_EQ(r.request.grammar->kind, structured::GrammarSpec::Kind::kJsonObject);
        }}},
      {"top_k", {"5", [](auto& r) { EXPECT_EQ(r.request.sampling.top_k, 5); }}},
      {"min_p", {"0.1", [](auto& r) { EXPECT_FLOAT_EQ(r.request.sampling.min_p, 0.1f); }}},
      {"repetition_penalty",
       {"1.5", [](auto& r) { EXPECT_FLOAT_EQ(r.request.sampling.repetition_penalty, 1.5f); }}},
      {"min_tokens", {"3", [](auto& r) { EXPECT_EQ(r.request.min_tokens, 3); }}},
      {"include_stop_str_in_output",
       {"true", [](auto& r) { EXPECT_TRUE(r.request.include_stop_str_in_output); }}},
      {"allowed_token_ids",
       {"[3, 4]",
        [](auto& r) {
          EXPECT_EQ(r.request.sampling.allowed_token_ids, (std::vector<int32_t>{3, 4}));
        }}},
      {"bad_words",
       {R"(["foo", "bar baz"])",
        [](auto& r) {
          EXPECT_EQ(r.request.bad_words, (std::vector<std::string>{"foo", "bar baz"}));
        }}},
      {"truncate_prompt_tokens",
       {"5", [](auto& r) { EXPECT_EQ(r.request.truncate_prompt_tokens, 5); }}},
      {"stop_token_ids",
       {"[4, 9]",
        [](auto& r) {
          EXPECT_EQ(r.request.stop_token_ids, (std::vector<int32_t>{4, 9}));
        }}},
      {"ignore_eos", {"true", [](auto& r) { EXPECT_TRUE(r.request.ignore_eos); }}},
      {"skip_special_tokens",
       {"false", [](auto& r) { EXPECT_FALSE(r.request.skip_special_tokens); }}},
      {"c:add_special_tokens",
       {"false", [](auto& r) { EXPECT_FALSE(r.request.add_special_tokens); }}},
      {"c:return_token_ids", {"true", [](auto& r) { EXPECT_TRUE(r.return_token_ids); }}},
      {"priority", {"-2", [](auto& r) { EXPECT_EQ(r.request.priority, -2); }}},
      {"cache_salt", {R"("s1")", [](auto& r) { EXPECT_EQ(r.request.cache_salt, "s1"); }}},
      {"request_id",
       {R"("mine")", [](auto& r) { EXPECT_EQ(r.request.caller_request_id, "mine"); }}},
      {"guided_json",
       {R"({"type": "object"})",
        [](auto& r) {
          ASSERT_TRUE(r.request.grammar.has_value());
          EXPECT_EQ(r.request.grammar->kind, structured::GrammarSpec::Kind::kJsonSchema);
        }}},
      {"guided_regex",
       {R"("[0-9]+")",
        [](auto& r) {
          ASSERT_TRUE(r.request.grammar.has_value());
          EXPECT_EQ(r.request.grammar->kind, structured::GrammarSpec::Kind::kRegex);
        }}},
      {"guided_choice",
       {R"(["yes", "no"])",
        [](auto& r) {
          ASSERT_TRUE(r.request.grammar.has_value());
          EXPECT_EQ(r.request.grammar->choices.size(), 2u);
        }}},
      {"guided_grammar",
       {R"("root ::= \"a\"")",
        [](auto& r) {
          ASSERT_TRUE(r.request.grammar.has_value());
          EXPECT_EQ(r.request.grammar->kind, structured::GrammarSpec::Kind::kGrammar);
        }}},
      {"h:add_generation_prompt",
       {"false", [](auto& r) { EXPECT_FALSE(r.request.chat.prompt.add_generation_prompt); }}},
      {"h:continue_final_message",
       {"true", [](auto& r) { EXPECT_TRUE(r.request.chat.prompt.continue_final_message); },
        R"({"add_generation_prompt": false})"}},
      {"h:chat_template_kwargs",
       {R"({"enable_thinking": false})",
        [](auto& r) {
          EXPECT_NE(r.request.chat.prompt.template_kwargs_json.find("enable_thinking"),
                    std::string::npos);
        }}},
      {"h:include_reasoning",
       {"false", [](auto& r) { EXPECT_FALSE(r.request.chat.include_reasoning); }}},
      {"kv_compression",
       {R"({"policy": "snapkv", "budget": 64})",
        [](auto& r) {
          EXPECT_EQ(r.request.compression.policy, config::CompressionPolicyKind::kSnapKv);
          EXPECT_EQ(r.request.compression.budget, 64);
        }}},
      {"vllm_xargs",
       {R"({"kv_compression": "h2o", "kv_budget": 32})",
        [](auto& r) {
          EXPECT_EQ(r.request.compression.policy, config::CompressionPolicyKind::kH2O);
          EXPECT_EQ(r.request.compression.budget, 32);
        }}},
      {"timeout", {"2.5", [](auto& r) { EXPECT_EQ(r.timeout_seconds, 2.5); }}},
      {"speculative",
       {R"({"method": "ngram", "num_tokens": 3})",
        [](auto& r) {
          EXPECT_EQ(r.request.speculative.method, config::SpeculativeMethod::kNgram);
          EXPECT_EQ(r.request.speculative.num_tokens, 3);
        }}},
      // Message members (on messages[0], an assistant message unless `extra` says otherwise).
      {"m:role",
       {R"("developer")", [](auto& r) { EXPECT_EQ(r.request.messages[0].role, "system"); }}},
      {"m:content",
       {R"([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}])",
        [](auto& r) { EXPECT_EQ(r.request.messages[0].content, "a\nb"); }}},
      {"m:name", {R"("bob")", [](auto& r) { EXPECT_EQ(r.request.messages[0].name, "bob"); }}},
      {"m:tool_calls",
       {R"([{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"x\": 1}"}}])",
        [](auto& r) {
          EXPECT_NE(r.request.messages[0].tool_calls_json.find("\"x\":1"), std::string::npos);
        }}},
      {"m:tool_call_id",
       {R"("c1")", [](auto& r) { EXPECT_EQ(r.request.messages[0].tool_call_id, "c1"); },
        R"({"role": "tool"})"}},
      {"m:reasoning_content",
       {R"("because")",
        [](auto& r) { EXPECT_EQ(r.request.messages[0].reasoning_content, "because"); }}},
  };
  return *cases;
}

char ScopeKey(ParamScope s) {
  switch (s) {
    case ParamScope::kCompletion:
      return 'c';
    case ParamScope::kChat:
      return 'h';
    case ParamScope::kMessage:
      return 'm';
    case ParamScope::kGrpc:
      return 'g';
  }
  return '?';
}

const Case* FindCase(ParamScope s, std::string_view name) {
  const auto& cases = Cases();
  auto it = cases.find(std::string(1, ScopeKey(s)) + ":" + std::string(name));
  if (it == cases.end() && s != ParamScope::kMessage) it = cases.find(std::string(name));
  return it == cases.end() ? nullptr : &it->second;
}

// The request body for `name: value` in scope `s` (with the case's extra members), and the
// parameter a 400 must name.
struct Probe {
  std::string body;
  std::string param;
};

Probe MakeProbe(ParamScope s, std::string_view name, const std::string& value,
                const std::string& extra) {
  json extras = extra.empty() ? json::object() : json::parse(extra);
  json v = json::parse(value);
  json body = json::object();
  std::string param(name);
  switch (s) {
    case ParamScope::kCompletion:
      body["prompt"] = "p";
      break;
    case ParamScope::kChat:
      body["messages"] = json::array({{{"role", "user"}, {"content", "x"}}});
      break;
    case ParamScope::kMessage: {
      json m = {{"role", "assistant"}, {"content", "x"}};
      for (auto& [k, e] : extras.items()) m[k] = e;
      extras = json::object();
      m[std::string(name)] = v;
      body["messages"] = json::array({m});
      return {body.dump(), "messages[0]." + param};
    }
    case ParamScope::kGrpc:
      break;
  }
  for (auto& [k, e] : extras.items()) body[k] = e;
  body[std::string(name)] = v;
  return {body.dump(), param};
}

absl::StatusOr<HttpGenerationRequest> Parse(ParamScope s, const std::string& body) {
  return s == ParamScope::kCompletion ? ParseCompletionRequest(body) : ParseChatRequest(body);
}

TEST(RequestFieldsTest, EveryHttpFieldIsHonouredOrRefused) {
  int honoured = 0, refused = 0, hints = 0;
  for (const RequestField& f : RequestFields()) {
    for (ParamScope s : {ParamScope::kCompletion, ParamScope::kChat, ParamScope::kMessage}) {
      if (!f.in(s)) continue;
      SCOPED_TRACE(std::string(1, ScopeKey(s)) + ":" + std::string(f.name));
      switch (f.status) {
        case FieldStatus::kHonoured: {
          const Case* c = FindCase(s, f.name);
          ASSERT_NE(c, nullptr) << "an honoured field needs a case in this walk";
          const Probe p = MakeProbe(s, f.name, c->value, c->extra);
          auto r = Parse(s, p.body);
          ASSERT_TRUE(r.ok()) << p.body << ": " << r.status();
          c->check(*r);
          ++honoured;
          break;
        }
        case FieldStatus::kRefused: {
          // A value that asks for something (whatever the field's type).
          const Probe p = MakeProbe(s, f.name, R"({"x": 2})", "");
          auto r = Parse(s, p.body);
          ASSERT_FALSE(r.ok()) << p.body;
          EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
          EXPECT_EQ(ErrorParam(r.status()), p.param) << r.status();
          EXPECT_NE(r.status().message().find("not supported: " + std::string(f.text)),
                    std::string_view::npos)
              << r.status();
          for (std::string nothing : {std::string("null"), std::string(f.accepted_default_json)}) {
            if (nothing.empty()) continue;
            const Probe q = MakeProbe(s, f.name, nothing, "");
            auto ok = Parse(s, q.body);
            EXPECT_TRUE(ok.ok()) << q.body << ": " << ok.status();
          }
          ++refused;
          break;
        }
        case FieldStatus::kHint: {
          const Probe p = MakeProbe(s, f.name, R"("anything")", "");
          auto r = Parse(s, p.body);
          EXPECT_TRUE(r.ok()) << p.body << ": " << r.status();
          ++hints;
          break;
        }
      }
    }
  }
  EXPECT_GT(honoured, 50);
  EXPECT_GT(refused, 20);
  EXPECT_GT(hints, 5);
}

// Every case of the walk belongs to a row (a renamed or removed field fails here, not silently).
TEST(RequestFieldsTest, EveryCaseHasARow) {
  for (const auto& [key, c] : Cases()) {
    const size_t colon = key.find(':');
    const std::string name = colon == std::string::npos ? key : key.substr(colon + 1);
    bool found = false;
    for (ParamScope s : {ParamScope::kCompletion, ParamScope::kChat, ParamScope::kMessage}) {
      if (colon != std::string::npos && key[0] != ScopeKey(s)) continue;
      const RequestField* f = FindRequestField(s, name);
      found = found || (f != nullptr && f->status == FieldStatus::kHonoured);
    }
    EXPECT_TRUE(found) << key;
  }
}

TEST(RequestFieldsTest, OneRowPerScopeAndName) {
  const auto fields = RequestFields();
  for (size_t i = 0; i < fields.size(); ++i) {
    EXPECT_FALSE(fields[i].text.empty()) << fields[i].name;
    for (size_t j = i + 1; j < fields.size(); ++j) {
      EXPECT_FALSE(fields[i].name == fields[j].name && (fields[i].scopes & fields[j].scopes) != 0)
          << fields[i].name;
    }
  }
}

// docs/api.md carries the rendered table between two markers; a change to the table must be
// pasted there (the failure prints the block).
TEST(RequestFieldsTest, DocsTableIsTheFieldTable) {
  std::ifstream in(std::string(KVSERVE_SOURCE_DIR) + "/docs/api.md");
  ASSERT_TRUE(in) << "docs/api.md";
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string doc = ss.str();
  const std::string begin =
      "<!-- field-table:begin (generated: tests/unit/server/request_fields_test.cc) -->\n";
  const std::string end = "<!-- field-table:end -->";
  const size_t b = doc.find(begin);
  const size_t e = doc.find(end);
  ASSERT_NE(b, std::string::npos) << "docs/api.md lacks " << begin;
  ASSERT_NE(e, std::string::npos) << "docs/api.md lacks " << end;
  ASSERT_LT(b, e);
  const std::string block = doc.substr(b + begin.size(), e - b - begin.size());
  EXPECT_EQ(block, FieldTableMarkdown()) << "paste this block into docs/api.md:\n"
                                         << FieldTableMarkdown();
}

}  // namespace
}  // namespace kvserve::server
