// The OpenAI-compatible HTTP front end over real sockets (cpp-httplib's client) and a
// FakeEngine: shapes, streaming, every error status, auth, drain.
#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <thread>

#include "absl/strings/escaping.h"

#include "tests/unit/server/http_test_client.h"
#include "tests/unit/server/test_server.h"

namespace kvserve::server::testing {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;

class HttpFrontendTest : public ::testing::Test {
 protected:
  void Start(TestServerOptions options = {}) { server_ = std::make_unique<TestServer>(std::move(options)); }
  FakeEngine& engine() { return server_->engine(); }

  httplib::Client Client() {
    httplib::Client c("127.0.0.1", server_->http_port());
    c.set_read_timeout(30, 0);
    return c;
  }
  httplib::Result Post(const std::string& path, const std::string& body, const std::string& key = "") {
    return Client().Post(path.c_str(), BearerHeaders(key), body, "application/json");
  }
  httplib::Result Get(const std::string& path, const std::string& key = "") {
    return Client().Get(path.c_str(), BearerHeaders(key));
  }
  json ExpectError(const httplib::Result& res, int status) { return ExpectOpenAiError(res, status); }

  std::unique_ptr<TestServer> server_;
};

TEST_F(HttpFrontendTest, CompletionReturnsTextAndUsage) {
  Start();
  auto res = Post("/v1/completions", R"({"model": "kvs-tiny", "prompt": "Hi", "max_tokens": 9, "temperature": 0})");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  json j = json::parse(res->body);
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["model"], "kvs-tiny");
  EXPECT_TRUE(j["id"].get<std::string>().starts_with("cmpl-"));
  EXPECT_EQ(res->get_header_value("X-Request-Id"), j["id"]);
  EXPECT_GT(j["created"].get<int64_t>(), 1600000000);
  ASSERT_EQ(j["choices"].size(), 1u);
  EXPECT_EQ(j["choices"][0]["text"], "The quick");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["prompt_tokens"], 3);  // BOS + 2 bytes
  EXPECT_EQ(j["usage"]["completion_tokens"], 9);
  EXPECT_EQ(j["usage"]["total_tokens"], 12);
  EXPECT_EQ(j["usage"]["kv_compression"]["policy"], "full");
}

TEST_F(HttpFrontendTest, ChatWithTwoSeededChoicesIsDeterministic) {
  Start();
  const std::string body = R"({"messages": [{"role": "user", "content": "Hello"}], "n": 2, "seed": 5,
                               "temperature": 0.8, "max_completion_tokens": 6})";
  auto a = Post("/v1/chat/completions", body);
  auto b = Post("/v1/chat/completions", body);
  ASSERT_TRUE(a && b);
  ASSERT_EQ(a->status, 200) << a->body;
  json ja = json::parse(a->body), jb = json::parse(b->body);
  EXPECT_EQ(ja["object"], "chat.completion");
  ASSERT_EQ(ja["choices"].size(), 2u);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(ja["choices"][i]["index"], i);
    EXPECT_EQ(ja["choices"][i]["message"]["role"], "assistant");
    EXPECT_EQ(ja["choices"][i]["message"]["content"], engine().ExpectedText(5, 0.8f, i, 6));
    EXPECT_EQ(ja["choices"][i]["message"]["content"], jb["choices"][i]["message"]["content"]);
  }
  EXPECT_NE(ja["choices"][0]["message"]["content"], ja["choices"][1]["message"]["content"]);
  EXPECT_EQ(ja["usage"]["completion_tokens"], 12);
}

TEST_F(HttpFrontendTest, StopStringEndsTheChoiceAndAbortsTheEngineRequest) {
  Start();
  auto res = Post("/v1/completions", R"({"prompt": "x", "max_tokens": 40, "temperature": 0, "stop": ["fox"]})");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  json j = json::parse(res->body);
  EXPECT_EQ(j["choices"][0]["text"], "The quick brown ");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(j["choices"][0]["stop_reason"], "fox");
  EXPECT_EQ(j["usage"]["completion_tokens"], 19);
  EXPECT_TRUE(engine().WaitForAbort(j["id"], milliseconds(5000)).has_value());
}

// `timeout`: past it the generation is aborted; a non-streaming client gets a 504, a
// streaming one the tokens so far, then an in-band 504 error and [DONE].
TEST_F(HttpFrontendTest, RequestTimeoutIs504AndAbortsTheGeneration) {
  Start();
  engine().SetPaused(true);
  const auto start = std::chrono::steady_clock::now();
  auto res = Post("/v1/completions", R"({"prompt": "x", "max_tokens": 50, "timeout": 0.3})");
  const auto took = std::chrono::steady_clock::now() - start;
  json e = ExpectError(res, 504);
  EXPECT_NE(e["message"].get<std::string>().find("timeout"), std::string::npos);
  EXPECT_GE(took, milliseconds(290));
  EXPECT_LT(took, milliseconds(3000));
  ASSERT_EQ(engine().submitted().size(), 1u);
  EXPECT_TRUE(engine().WaitForAbort(engine().submitted()[0].request_id, milliseconds(5000)).has_value());
  EXPECT_EQ(ExpectError(Post("/v1/completions", R"({"prompt": "x", "timeout": 0})"), 400)["param"], "timeout");
  EXPECT_EQ(ExpectError(Post("/v1/completions", R"({"prompt": "x", "timeout": "1"})"), 400)["param"], "timeout");
}

TEST_F(HttpFrontendTest, StreamingRequestTimeoutEndsInBand) {
  TestServerOptions o;
  o.engine.tick = std::chrono::microseconds(20000);  // 50 tokens a second
  Start(o);
  auto res = Post("/v1/completions", R"({"prompt": "x", "max_tokens": 1000, "ignore_eos": true,
                                        "stream": true, "timeout": 0.4})");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  std::vector<std::string> events = SseData(res->body);
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.back(), "[DONE]");
  json err = json::parse(events[events.size() - 2]);
  ASSERT_TRUE(err.contains("error")) << err.dump();
  EXPECT_EQ(err["error"]["code"], 504);
  int text_events = 0;
  for (size_t i = 0; i + 2 < events.size(); ++i) {
    if (json::parse(events[i]).contains("choices")) ++text_events;
  }
  EXPECT_GT(text_events, 0) << "the tokens generated before the timeout were sent";
  EXPECT_LT(text_events, 1000);
}

TEST_F(HttpFrontendTest, StreamingCompletionIsSseEndingWithDone) {
  Start();
  auto res =
      Post("/v1/completions", R"({"prompt": "x", "max_tokens": 12, "temperature": 0, "stream": true,
                                        "stream_options": {"include_usage": true},
                                        "speculative": {"method": "ngram"}})");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(res->get_header_value("Content-Type"), "text/event-stream");
  std::vector<std::string> events = SseData(res->body);
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.back(), "[DONE]");
  json usage = json::parse(events[events.size() - 2]);
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], 12);
  EXPECT_EQ(usage["usage"]["kv_compression"]["policy"], "full");
  // The fake engine reports one guess per token, half accepted, for an ngram request.
  EXPECT_EQ(usage["usage"]["speculative"]["draft_tokens"], 12);
  EXPECT_EQ(usage["usage"]["speculative"]["accepted_tokens"], 6);
  EXPECT_EQ(usage["usage"]["completion_tokens_details"]["accepted_prediction_tokens"], 6);
  EXPECT_EQ(usage["usage"]["completion_tokens_details"]["rejected_prediction_tokens"], 6);
  std::string text;
  int finishes = 0;
  for (size_t i = 0; i + 2 < events.size(); ++i) {
    json c = json::parse(events[i]);
    EXPECT_EQ(c["object"], "text_completion");
    EXPECT_TRUE(c.contains("usage") && c["usage"].is_null());
    text += c["choices"][0]["text"].get<std::string>();
    if (!c["choices"][0]["finish_reason"].is_null()) {
      ++finishes;
      EXPECT_EQ(c["choices"][0]["finish_reason"], "length");
    }
  }
  EXPECT_EQ(text, "The quick br");
  EXPECT_EQ(finishes, 1);
}

TEST_F(HttpFrontendTest, StreamingChatSendsRolesFirstAndOneFinishPerChoice) {
  Start();
  auto res = Post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "Hi"}], "n": 2,
                                             "seed": 1, "max_tokens": 5, "stream": true})");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  std::vector<std::string> events = SseData(res->body);
  ASSERT_GE(events.size(), 4u);
  EXPECT_EQ(events.back(), "[DONE]");
  std::map<int, std::string> text;
  std::map<int, int> finishes;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    json c = json::parse(events[i]);
    EXPECT_EQ(c["object"], "chat.completion.chunk");
    EXPECT_FALSE(c.contains("usage"));
    const json& choice = c["choices"][0];
    const int index = choice["index"];
    if (i < 2) {
      EXPECT_EQ(index, static_cast<int>(i));
      EXPECT_EQ(choice["delta"]["role"], "assistant");
    }
    if (choice["delta"].contains("content")) text[index] += choice["delta"]["content"].get<std::string>();
    if (!choice["finish_reason"].is_null()) ++finishes[index];
  }
  EXPECT_EQ(text[0], engine().ExpectedText(1, 1.0f, 0, 5));
  EXPECT_EQ(text[1], engine().ExpectedText(1, 1.0f, 1, 5));
  EXPECT_EQ(finishes[0], 1);
  EXPECT_EQ(finishes[1], 1);
}

TEST_F(HttpFrontendTest, EchoLogprobsAndSeveralPrompts) {
  Start();
  auto res =
      Post("/v1/completions", R"({"prompt": ["Q1 ", "Q2 "], "max_tokens": 3, "temperature": 0,
                                        "echo": true})");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  json j = json::parse(res->body);
  ASSERT_EQ(j["choices"].size(), 2u);
  EXPECT_EQ(j["choices"][0]["text"], "Q1 The");
  EXPECT_EQ(j["choices"][1]["text"], "Q2 The");
  EXPECT_EQ(j["choices"][1]["index"], 1);
  // echo with logprobs: the prompt's tokens lead, the first with null logprob and alternatives.
  auto both =
      Post("/v1/completions", R"({"prompt": "Q1 ", "echo": true, "logprobs": 2, "max_tokens": 2,
                                          "temperature": 0})");
  ASSERT_TRUE(both);
  ASSERT_EQ(both->status, 200) << both->body;
  const json both_json = json::parse(both->body);
  const json& elp = both_json["choices"][0]["logprobs"];
  ASSERT_EQ(elp["tokens"].size(), 6u) << elp;  // BOS, Q, 1, space, then 2 generated
  EXPECT_EQ(elp["tokens"][1], "Q");
  EXPECT_TRUE(elp["token_logprobs"][0].is_null());
  EXPECT_TRUE(elp["top_logprobs"][0].is_null());
  EXPECT_FLOAT_EQ(elp["token_logprobs"][2].get<float>(), -0.5f);
  EXPECT_EQ(elp["top_logprobs"][1].size(), 2u);
  EXPECT_FLOAT_EQ(elp["token_logprobs"][4].get<float>(), -0.5f);
  EXPECT_EQ(json::parse(both->body)["choices"][0]["text"], "Q1 Th");
  // vLLM's prompt_logprobs: per choice on completions, at the top level on chat.
  auto plp = Post("/v1/completions", R"({"prompt": "Q1 ", "prompt_logprobs": 1, "max_tokens": 1})");
  ASSERT_EQ(plp->status, 200) << plp->body;
  const json plp_json = json::parse(plp->body);
  const json& pl = plp_json["choices"][0]["prompt_logprobs"];
  ASSERT_EQ(pl.size(), 4u) << pl;
  EXPECT_TRUE(pl[0].is_null());
  ASSERT_EQ(pl[1].size(), 2u) << pl[1];  // the token itself and one alternative
  bool found_own = false;
  for (const auto& [id, entry] : pl[3].items()) {
    if (entry["decoded_token"] != " ") continue;
    found_own = true;
    EXPECT_FLOAT_EQ(entry["logprob"].get<float>(), -0.75f);
    EXPECT_EQ(entry["rank"], 3);
  }
  EXPECT_TRUE(found_own) << pl[3];
  auto chat = Post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "Hi"}],
                                               "prompt_logprobs": 0, "max_tokens": 1})");
  ASSERT_EQ(chat->status, 200) << chat->body;
  const json cj = json::parse(chat->body);
  ASSERT_TRUE(cj.contains("prompt_logprobs")) << chat->body;
  EXPECT_TRUE(cj["prompt_logprobs"][0].is_null());
  EXPECT_EQ(cj["prompt_logprobs"][1].size(), 1u);
  auto streamed =
      Post("/v1/completions", R"({"prompt": "Q", "prompt_logprobs": 1, "stream": true})");
  EXPECT_EQ(streamed->status, 400);
  EXPECT_EQ(json::parse(streamed->body)["error"]["param"], "prompt_logprobs");
  res = Post("/v1/completions",
             R"({"prompt": ["Q1 ", "Q2 "], "max_tokens": 3, "temperature": 0, "logprobs": 2})");
  ASSERT_EQ(res->status, 200) << res->body;
  j = json::parse(res->body);
  const json& lp = j["choices"][0]["logprobs"];
  EXPECT_EQ(lp["tokens"], json::array({"T", "h", "e"}));
  EXPECT_EQ(lp["top_logprobs"][0].size(), 2u);
  EXPECT_EQ(j["usage"]["prompt_tokens"], 8);
  EXPECT_EQ(j["usage"]["completion_tokens"], 6);
  EXPECT_EQ(j["usage"]["speculative"]["draft_tokens"], 0) << "no speculation asked";
  EXPECT_EQ(j["usage"]["completion_tokens_details"]["accepted_prediction_tokens"], 0);
}

TEST_F(HttpFrontendTest, EmbeddingsBatchedTextAndTokenIds) {
  Start();
  auto res = Post("/v1/embeddings", R"({"input": ["Q1 ", "Q22"], "encoding_format": "float"})");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const json j = json::parse(res->body);
  EXPECT_EQ(j["object"], "list");
  ASSERT_EQ(j["data"].size(), 2u);
  EXPECT_EQ(j["data"][1]["index"], 1);
  EXPECT_EQ(j["data"][0]["object"], "embedding");
  EXPECT_FLOAT_EQ(j["data"][0]["embedding"][0].get<float>(), 0.6f);  // normalised
  EXPECT_FLOAT_EQ(j["data"][0]["embedding"][1].get<float>(), 0.8f);
  EXPECT_EQ(j["usage"]["prompt_tokens"], 8);
  EXPECT_EQ(j["usage"]["total_tokens"], 8);
  const std::vector<engine::RequestSpec> specs = engine().submitted();
  ASSERT_EQ(specs.size(), 2u);
  EXPECT_EQ(specs[0].sampling.embed, scheduler::Pooling::kLast);
  EXPECT_EQ(specs[0].max_tokens, 1);
  auto ids = Post("/v1/embeddings", R"({"input": [5, 6, 7], "encoding_format": "base64"})");
  ASSERT_EQ(ids->status, 200) << ids->body;
  const json ij = json::parse(ids->body);
  ASSERT_EQ(ij["data"].size(), 1u);
  EXPECT_EQ(ij["usage"]["prompt_tokens"], 3);
  std::string bytes(2 * sizeof(float), '\0');
  const float want[2] = {0.6f, 0.8f};
  std::memcpy(bytes.data(), want, bytes.size());
  EXPECT_EQ(ij["data"][0]["embedding"], absl::Base64Escape(bytes));
  for (const auto& [body, param] : std::vector<std::pair<std::string, std::string>>{
           {R"({"input": "x", "dimensions": 8})", "dimensions"},
           {R"({"input": "x", "encoding_format": "int8"})", "encoding_format"},
           {R"({"input": []})", "input"},
           {R"({"input": "x", "temperature": 0})", "temperature"}}) {
    auto bad = Post("/v1/embeddings", body);
    ASSERT_EQ(bad->status, 400) << body;
    EXPECT_EQ(json::parse(bad->body)["error"]["param"], param) << body;
  }
}

TEST_F(HttpFrontendTest, RequestFieldsReachTheEngine) {
  Start();
  auto res = Post("/v1/completions", R"({"prompt": [5, 6], "max_tokens": 2, "top_k": 7, "min_p": 0.1,
      "presence_penalty": 0.5, "frequency_penalty": 0.25, "repetition_penalty": 1.2, "seed": 99,
      "stop_token_ids": [250], "ignore_eos": true, "priority": 4, "min_tokens": 1, "user": "me",
      "kv_compression": {"policy": "streamingllm", "budget": 64, "window": 8, "audit": true}})");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  std::vector<engine::RequestSpec> specs = engine().submitted();
  ASSERT_EQ(specs.size(), 1u);
  const engine::RequestSpec& s = specs[0];
  EXPECT_EQ(s.prompt_tokens, (std::vector<int32_t>{5, 6}));
  EXPECT_EQ(s.sampling.top_k, 7);
  EXPECT_FLOAT_EQ(s.sampling.min_p, 0.1f);
  EXPECT_FLOAT_EQ(s.sampling.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(s.sampling.frequency_penalty, 0.25f);
  EXPECT_FLOAT_EQ(s.sampling.repetition_penalty, 1.2f);
  EXPECT_EQ(s.sampling.seed, 99u);
  EXPECT_EQ(s.stop_token_ids, std::vector<int32_t>{250});
  EXPECT_TRUE(s.ignore_eos);
  EXPECT_EQ(s.priority, 4);
  EXPECT_EQ(s.min_tokens, 1);
  EXPECT_EQ(s.compression.policy, config::CompressionPolicyKind::kStreamingLlm);
  EXPECT_EQ(s.compression.budget, 64);
  EXPECT_EQ(s.compression.window, 8);
  json j = json::parse(res->body);
  EXPECT_EQ(j["usage"]["kv_compression"]["policy"], "streamingllm");
  EXPECT_EQ(j["usage"]["kv_compression"]["budget"], 64);
  EXPECT_EQ(j["usage"]["kv_compression"]["audit"].size(), 1u);
}

TEST_F(HttpFrontendTest, ModelsTokenizeAndDetokenize) {
  Start();
  auto models = Get("/v1/models");
  ASSERT_TRUE(models);
  ASSERT_EQ(models->status, 200);
  json m = json::parse(models->body);
  EXPECT_EQ(m["object"], "list");
  EXPECT_EQ(m["data"][0]["id"], "kvs-tiny");
  EXPECT_EQ(m["data"][0]["max_model_len"], 2048);

  auto tok = Post("/tokenize", R"({"prompt": "ab", "return_token_strs": true})");
  ASSERT_TRUE(tok);
  ASSERT_EQ(tok->status, 200) << tok->body;
  json t = json::parse(tok->body);
  EXPECT_EQ(t["tokens"], json::array({1, 100, 101}));
  EXPECT_EQ(t["count"], 3);
  EXPECT_EQ(t["max_model_len"], 2048);
  EXPECT_EQ(t["token_strs"], json::array({"<s>", "a", "b"}));
  auto chat = Post("/tokenize", R"({"messages": [{"role": "user", "content": "a"}]})");
  ASSERT_TRUE(chat);
  EXPECT_EQ(json::parse(chat->body)["tokens"][1], kFakeImStart);

  auto detok = Post("/detokenize", R"({"tokens": [100, 101]})");
  ASSERT_TRUE(detok);
  ASSERT_EQ(detok->status, 200);
  EXPECT_EQ(json::parse(detok->body)["prompt"], "ab");
  ExpectError(Post("/detokenize", R"({"tokens": [100000]})"), 400);
}

TEST_F(HttpFrontendTest, PublicEndpointsNeedNoKey) {
  TestServerOptions o;
  o.tenants.push_back(MakeTenant("alpha", {"sk-alpha"}));
  Start(o);
  auto health = Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(health->body, "");
  auto ready = Get("/ready");
  ASSERT_TRUE(ready);
  EXPECT_EQ(ready->status, 200);
  auto version = Get("/version");
  ASSERT_TRUE(version);
  EXPECT_EQ(json::parse(version->body)["version"], "0.1.0-test");
  auto metrics = Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->status, 200);
  EXPECT_TRUE(metrics->get_header_value("Content-Type").starts_with("text/plain"));
  EXPECT_NE(metrics->body.find("kvserve_test_up 1"), std::string::npos);
  ExpectError(Get("/v1/models"), 401);  // guarded
  ExpectError(Post("/v1/embeddings", R"({"input": "x"})"), 401);
  EXPECT_EQ(Post("/v1/embeddings", R"({"input": "x"})", "sk-alpha")->status, 200);

  engine().SetAlive(false);
  EXPECT_EQ(Get("/health")->status, 503);
  EXPECT_EQ(Get("/ready")->status, 503);
}

// server.metrics_api_key: /metrics opens to that key only (not to a tenant's), and the 401s
// never echo what was sent.
TEST_F(HttpFrontendTest, MetricsKeyGuardsMetricsOnly) {
  TestServerOptions o;
  o.tenants.push_back(MakeTenant("alpha", {"sk-alpha"}));
  o.metrics_api_key = "sk-metrics-scraper";
  Start(o);
  auto none = Get("/metrics");
  ASSERT_TRUE(none);
  EXPECT_EQ(none->status, 401);
  auto tenant_key = Get("/metrics", "sk-alpha");
  ASSERT_TRUE(tenant_key);
  EXPECT_EQ(tenant_key->status, 401);
  EXPECT_EQ(tenant_key->body.find("sk-alpha"), std::string::npos);
  auto wrong = Get("/metrics", "sk-metrics-scrapeR");
  ASSERT_TRUE(wrong);
  EXPECT_EQ(wrong->status, 401);
  auto right = Get("/metrics", "sk-metrics-scraper");
  ASSERT_TRUE(right);
  EXPECT_EQ(right->status, 200);
  EXPECT_NE(right->body.find("kvserve_test_up 1"), std::string::npos);
  // The metrics key is not a tenant key, and /health stays public.
  ExpectError(Get("/v1/models", "sk-metrics-scraper"), 401);
  EXPECT_EQ(Get("/health")->status, 200);
}

TEST_F(HttpFrontendTest, BadRequestsAre400NamingTheField) {
  TestServerOptions o;
  o.engine.max_model_len = 64;
  Start(o);
  json e = ExpectError(Post("/v1/completions", "{not json"), 400);
  EXPECT_EQ(e["type"], "invalid_request_error");
  e = ExpectError(Post("/v1/completions", R"({"prompt": "x", "max_tokens": "many"})"), 400);
  EXPECT_EQ(e["param"], "max_tokens");
  e = ExpectError(Post("/v1/completions", R"({"prompt": "x", "temperature": 3})"), 400);
  EXPECT_EQ(e["param"], "temperature");
  e = ExpectError(Post("/v1/completions", R"({"prompt": "x", "kv_compression": {"policy": "zip"}})"), 400);
  EXPECT_EQ(e["param"], "kv_compression.policy");
  e = ExpectError(Post("/v1/completions", "{\"prompt\": \"" + std::string(100, 'x') + "\"}"), 400);
  EXPECT_EQ(e["param"], "prompt");
  EXPECT_NE(e["message"].get<std::string>().find("maximum context length is 64"), std::string::npos);
  e = ExpectError(Post("/v1/completions", R"({"prompt": "x", "max_tokens": 100})"), 400);
  EXPECT_EQ(e["param"], "max_tokens");
  e = ExpectError(Post("/v1/chat/completions", R"({"messages": []})"), 400);
  EXPECT_EQ(e["param"], "messages");
  EXPECT_TRUE(engine().submitted().empty());
}

TEST_F(HttpFrontendTest, ApiKeysMapToTenants) {
  TestServerOptions o;
  o.tenants.push_back(MakeTenant("alpha", {"sk-alpha"}));
  o.tenants.back().priority = 2;
  o.tenants.push_back(MakeTenant("beta", {"sk-beta"}));
  o.tenants.back().allowed_policies = {config::CompressionPolicyKind::kFull};
  Start(o);
  const std::string body = R"({"prompt": "x", "max_tokens": 2})";
  EXPECT_EQ(ExpectError(Post("/v1/completions", body), 401)["type"], "authentication_error");
  auto wrong = Post("/v1/completions", body, "sk-nope");
  ExpectError(wrong, 401);
  EXPECT_EQ(wrong->get_header_value("WWW-Authenticate"), "Bearer");
  auto ok = Post("/v1/completions", body, "sk-alpha");
  ASSERT_TRUE(ok);
  ASSERT_EQ(ok->status, 200) << ok->body;
  ASSERT_EQ(engine().submitted().size(), 1u);
  EXPECT_EQ(engine().submitted()[0].tenant, "alpha");
  EXPECT_EQ(engine().submitted()[0].priority, 2);
  json e = ExpectError(Post("/v1/completions", R"({"prompt": "x", "kv_compression": {"policy": "snapkv"}})",
                            "sk-beta"), 403);
  EXPECT_EQ(e["type"], "permission_error");
  EXPECT_EQ(Post("/v1/completions", R"({"prompt": "x", "max_tokens": 1, "kv_compression": "full"})", "sk-beta")->status, 200);
  ExpectError(Post("/tokenize", R"({"prompt": "x"})"), 401);
  EXPECT_EQ(Post("/tokenize", R"({"prompt": "x"})", "sk-beta")->status, 200);
}

TEST_F(HttpFrontendTest, UnknownModelAndRouteAre404) {
  Start();
  json e = ExpectError(Post("/v1/completions", R"({"model": "gpt-9", "prompt": "x"})"), 404);
  EXPECT_EQ(e["type"], "not_found_error");
  EXPECT_EQ(e["code"], "model_not_found");
  EXPECT_NE(e["message"].get<std::string>().find("gpt-9"), std::string::npos);
  e = ExpectError(Get("/v1/nothing"), 404);
  EXPECT_NE(e["message"].get<std::string>().find("/v1/nothing"), std::string::npos);
  ExpectError(Post("/v1/audio/speech", "{}"), 404);
  ExpectError(Post("/v1/embeddings", "{}"), 400);  // served: "input is required"
}

TEST_F(HttpFrontendTest, BodyOverTheLimitIs413) {
  TestServerOptions o;
  o.max_body_bytes = 1024;
  Start(o);
  json e = ExpectError(Post("/v1/completions", "{\"prompt\": \"" + std::string(4000, 'x') + "\"}"), 413);
  EXPECT_NE(e["message"].get<std::string>().find("1024"), std::string::npos);
  EXPECT_EQ(Post("/v1/completions", R"({"prompt": "x", "max_tokens": 1})")->status, 200);
}

TEST_F(HttpFrontendTest, QueueFullAndTenantQuotaAre429) {
  TestServerOptions o;
  o.engine.max_running = 1;
  o.engine.max_waiting = 1;
  Start(o);
  engine().SetPaused(true);
  std::vector<std::thread> held;
  for (int i = 0; i < 2; ++i) {
    held.emplace_back([this] { Post("/v1/completions", R"({"prompt": "x", "max_tokens": 2})"); });
  }
  ASSERT_TRUE(engine().WaitForSubmitted(2, milliseconds(10000)));
  auto res = Post("/v1/completions", R"({"prompt": "x", "max_tokens": 2})");
  json e = ExpectError(res, 429);
  EXPECT_EQ(e["type"], "rate_limit_error");
  EXPECT_EQ(res->get_header_value("Retry-After"), "1");
  engine().SetPaused(false);
  for (auto& t : held) t.join();

  engine().FailNextSubmit(absl::ResourceExhaustedError("tenant 'x' is over its quota"));
  ExpectError(Post("/v1/completions", R"({"prompt": "x"})"), 429);
  engine().FailNextSubmit(absl::InternalError("engine exploded"));
  EXPECT_EQ(ExpectError(Post("/v1/completions", R"({"prompt": "x"})"), 500)["type"], "server_error");
}

TEST_F(HttpFrontendTest, DrainRefusesNewRequestsAndAbortsLeftoversAfterTheTimeout) {
  TestServerOptions o;
  o.drain_timeout_seconds = 0.3;
  Start(o);
  engine().SetPaused(true);
  std::string streamed;
  std::thread client([&] {
    auto res = Post("/v1/completions", R"({"prompt": "x", "max_tokens": 50, "stream": true})");
    if (res) streamed = res->body;
  });
  ASSERT_TRUE(engine().WaitForSubmitted(1, milliseconds(10000)));
  server_->app().frontend().StartDrain();  // what Drain() does first, done here to observe it
  EXPECT_EQ(Get("/ready")->status, 503);
  EXPECT_EQ(Get("/health")->status, 200);
  EXPECT_EQ(ExpectError(Post("/v1/completions", R"({"prompt": "x"})"), 503)["type"], "service_unavailable_error");
  server_->app().Drain([](milliseconds d) {
    std::this_thread::sleep_for(d);
    return false;
  });
  client.join();
  std::vector<std::string> events = SseData(streamed);
  ASSERT_GE(events.size(), 2u) << streamed;
  EXPECT_EQ(events.back(), "[DONE]");
  json last = json::parse(events[events.size() - 2]);
  EXPECT_EQ(last["choices"][0]["finish_reason"], "abort");
}

// Opens `body` as a POST to /v1/completions on a raw socket, reads the response head if
// `head`, closes the socket and returns the request id and the time of the close.
std::pair<std::string, std::chrono::steady_clock::time_point> SendAndHangUp(
    int port, const std::string& body, FakeEngine& engine, bool head,
    const std::string& path = "/v1/completions") {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  EXPECT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  const std::string request = "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                              "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  EXPECT_EQ(send(fd, request.data(), request.size(), 0), static_cast<ssize_t>(request.size()));
  std::string id;
  if (head) {
    std::string got;
    char buf[4096];
    while (got.find("\r\n\r\n") == std::string::npos) {
      ssize_t n = recv(fd, buf, sizeof buf, 0);
      if (n <= 0) break;
      got.append(buf, static_cast<size_t>(n));
    }
    const std::string marker = "X-Request-Id: ";
    size_t at = got.find(marker);
    EXPECT_NE(at, std::string::npos) << got;
    if (at != std::string::npos) id = got.substr(at + marker.size(), got.find("\r\n", at) - at - marker.size());
  } else {
    EXPECT_TRUE(engine.WaitForSubmitted(1, milliseconds(10000)));
    id = engine.submitted()[0].request_id;
  }
  const auto closed = std::chrono::steady_clock::now();
  close(fd);
  return {id, closed};
}

TEST_F(HttpFrontendTest, DisconnectedStreamIsAbortedWithin100ms) {
  Start();
  engine().SetPaused(true);  // the engine stays silent: only the socket tells
  auto [id, closed] = SendAndHangUp(server_->http_port(), R"({"prompt": "x", "max_tokens": 50, "stream": true})",
                                    engine(), /*head=*/true);
  auto aborted = engine().WaitForAbort(id, milliseconds(5000));
  ASSERT_TRUE(aborted.has_value());
  EXPECT_LT(*aborted - closed, milliseconds(100));
}

TEST_F(HttpFrontendTest, DisconnectedNonStreamingRequestIsAborted) {
  Start();
  engine().SetPaused(true);
  auto [id, closed] = SendAndHangUp(server_->http_port(), R"({"prompt": "x", "max_tokens": 50})", engine(),
                                    /*head=*/false);
  auto aborted = engine().WaitForAbort(id, milliseconds(5000));
  ASSERT_TRUE(aborted.has_value());
  EXPECT_LT(*aborted - closed, milliseconds(100));
}

TEST_F(HttpFrontendTest, DisconnectIsAlsoNoticedByKeepAliveProbes) {
  TestServerOptions o;
  o.watch_connections = false;  // the fallback when the socket cannot be found
  Start(o);
  engine().SetPaused(true);
  auto [id, closed] = SendAndHangUp(server_->http_port(), R"({"prompt": "x", "max_tokens": 50, "stream": true})",
                                    engine(), /*head=*/true);
  auto aborted = engine().WaitForAbort(id, milliseconds(5000));
  ASSERT_TRUE(aborted.has_value());
  EXPECT_LT(*aborted - closed, milliseconds(100));
}

// The Responses stream probes liveness the same way (the shared SseLiveness and intervals).
TEST_F(HttpFrontendTest, ResponsesStreamDisconnectIsAlsoNoticedByKeepAliveProbes) {
  TestServerOptions o;
  o.watch_connections = false;
  Start(o);
  engine().SetPaused(true);
  auto [id, closed] = SendAndHangUp(server_->http_port(), R"({"input": "x", "max_output_tokens": 50, "stream": true})",
                                    engine(), /*head=*/false, "/v1/responses");
  auto aborted = engine().WaitForAbort(id, milliseconds(5000));
  ASSERT_TRUE(aborted.has_value());
  EXPECT_LT(*aborted - closed, milliseconds(100));
}

TEST_F(HttpFrontendTest, ServesHundredsOfConcurrentStreams) {
  TestServerOptions o;
  o.http_max_connections = 300;
  Start(o);
  constexpr int kStreams = 256;
  engine().SetPaused(true);
  std::vector<std::string> bodies(kStreams);
  std::vector<std::string> failures(kStreams);  // why a stream got no body: status or client error
  std::vector<std::thread> clients;
  for (int i = 0; i < kStreams; ++i) {
    clients.emplace_back([&, i] {
      auto [body, failure] =
          TakeBody(Post("/v1/completions", R"({"prompt": "x", "max_tokens": 8, "temperature": 0, "stream": true})"));
      bodies[i] = std::move(body);
      failures[i] = std::move(failure);
    });
  }
  // All of them are in the engine at once: no small worker pool holds them back ...
  ASSERT_TRUE(engine().WaitForSubmitted(kStreams, milliseconds(60000)));
  // ... and other requests are still served while they wait.
  auto models = Get("/v1/models");
  ASSERT_TRUE(models);
  EXPECT_EQ(models->status, 200);
  engine().SetPaused(false);
  for (auto& t : clients) t.join();
  for (int i = 0; i < kStreams; ++i) {
    std::vector<std::string> events = SseData(bodies[i]);
    ASSERT_FALSE(events.empty()) << "stream " << i << ": " << failures[i];
    EXPECT_EQ(events.back(), "[DONE]") << "stream " << i;
  }
}

}  // namespace
}  // namespace kvserve::server::testing
