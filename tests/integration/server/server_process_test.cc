// The serving daemon driven as a user drives it: a separate process (KVSERVE_SERVER_BIN,
// the fake-engine server or `kvserve serve`), started on 127.0.0.1 with ephemeral ports,
// exercised over real sockets with cpp-httplib's client and the generated gRPC stubs,
// stopped with SIGTERM. Assertions hold for any engine (they never assume the fake's text).
#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "kvserve/v1/kvserve.grpc.pb.h"
#include "tests/integration/server/server_process.h"
#include "tests/unit/server/http_test_client.h"

namespace kvserve::server::testing {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;

constexpr int kMaxModelLen = 2048;
constexpr char kConfig[] = R"({
  "logging": {"level": "warn"},
  "model": {"max_model_len": 2048},
  "server": {"host": "127.0.0.1", "http_port": 0, "grpc_port": 0, "max_body_bytes": 65536,
             "drain_timeout_seconds": 0.5},
  "scheduler": {"max_num_seqs": 2, "max_waiting": 1},
  "tenants": [
    {"name": "alpha", "api_keys": ["sk-alpha"]},
    {"name": "beta", "api_keys": ["sk-beta"], "allowed_policies": ["full"]}
  ]
})";

// The suite is named per server binary (KVSERVE_SERVER_SUITE) so that the fake-engine and
// the real-engine builds of this file register distinct ctest names.
class ServerProcessFixture : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_NO_FATAL_FAILURE(StartServer(kConfig)); }
  // (Re)starts the server under test with `config` (JSON).
  void StartServer(const std::string& config) {
    server_.reset();
    std::vector<std::string> argv = {KVSERVE_SERVER_BIN};
    if (std::string(KVSERVE_SERVER_SUBCOMMAND).size() > 0) argv.push_back(KVSERVE_SERVER_SUBCOMMAND);
    argv.push_back("--config");
    argv.push_back(WriteTempFile("kvserve.json", config));
    std::string error;
    server_ = ServerProcess::Start(argv, milliseconds(120000), &error);
    ASSERT_NE(server_, nullptr) << error;
    channel_ = grpc::CreateChannel(server_->grpc_target(), grpc::InsecureChannelCredentials());
    stub_ = v1::KvServe::NewStub(channel_);
  }
  void TearDown() override {
    if (HasFailure() && server_) std::cerr << "server stderr:\n" << server_->stderr_text();
  }

  httplib::Client Client() {
    httplib::Client c(server_->host(), server_->http_port());
    c.set_read_timeout(60, 0);
    return c;
  }
  httplib::Result Post(const std::string& path, const std::string& body, const std::string& key = "sk-alpha") {
    return Client().Post(path.c_str(), BearerHeaders(key), body, "application/json");
  }
  httplib::Result Get(const std::string& path, const std::string& key = "sk-alpha") {
    return Client().Get(path.c_str(), BearerHeaders(key));
  }
  json Error(const httplib::Result& res, int status) { return ExpectOpenAiError(res, status); }
  std::unique_ptr<grpc::ClientContext> Context(const std::string& key = "sk-alpha") {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    if (!key.empty()) ctx->AddMetadata("authorization", "Bearer " + key);
    return ctx;
  }
  // Sends a long streaming completion on a raw socket and returns the socket once the
  // response head arrived, i.e. once the engine has accepted the request, or with
  // `running`, once its first token arrived (-1 on failure).
  int OpenStream(bool running, std::string* consumed = nullptr) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(server_->http_port()));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) return -1;
    const std::string body = R"({"prompt": "a", "max_tokens": 2000, "ignore_eos": true, "stream": true,
                                 "stream_options": {"include_usage": true}})";
    const std::string request = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-alpha\r\n"
                                "Content-Type: application/json\r\nContent-Length: " +
                                std::to_string(body.size()) + "\r\n\r\n" + body;
    if (send(fd, request.data(), request.size(), 0) != static_cast<ssize_t>(request.size())) return -1;
    std::string head;
    char c;
    while (head.find("\r\n\r\n") == std::string::npos && recv(fd, &c, 1, 0) == 1) head.push_back(c);
    if (head.rfind("HTTP/1.1 200", 0) != 0) {
      ADD_FAILURE() << "stream refused: " << head;
      close(fd);
      return -1;
    }
    // Skip the keep-alive comments up to the first data event (a role-less completion chunk).
    std::string seen;
    while (running && seen.find("data: ") == std::string::npos && recv(fd, &c, 1, 0) == 1) seen.push_back(c);
    if (consumed != nullptr) *consumed = seen;
    return fd;
  }
  // The body of a stream opened by OpenStream (`consumed`: what OpenStream read of it),
  // chunked framing removed.
  static std::string ReadStream(int fd, std::string raw) {
    char buf[4096];
    ssize_t n;
    while ((n = recv(fd, buf, sizeof buf, 0)) > 0) {
      raw.append(buf, static_cast<size_t>(n));
      if (raw.find("\r\n0\r\n\r\n") != std::string::npos || raw.rfind("0\r\n\r\n", 0) == 0) break;
    }
    close(fd);
    std::string body;
    size_t pos = 0;
    while (pos < raw.size()) {
      size_t eol = raw.find("\r\n", pos);
      if (eol == std::string::npos) break;
      const size_t len = std::stoul(raw.substr(pos, eol - pos), nullptr, 16);
      if (len == 0) break;
      body.append(raw, eol + 2, len);
      pos = eol + 2 + len + 2;
    }
    return body;
  }

  std::unique_ptr<ServerProcess> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::KvServe::Stub> stub_;
};

class KVSERVE_SERVER_SUITE : public ServerProcessFixture {};

TEST_F(KVSERVE_SERVER_SUITE, HttpEndpoints) {
  auto health = Get("/health", "");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(Get("/ready", "")->status, 200);
  EXPECT_TRUE(json::parse(Get("/version", "")->body)["version"].is_string());
  auto metrics = Get("/metrics", "");
  EXPECT_EQ(metrics->status, 200);
  EXPECT_TRUE(metrics->get_header_value("Content-Type").starts_with("text/plain"));

  auto models = Get("/v1/models");
  ASSERT_EQ(models->status, 200);
  json m = json::parse(models->body);
  const std::string model = m["data"][0]["id"];
  EXPECT_EQ(m["data"][0]["max_model_len"], kMaxModelLen);

  // Completions, non-streaming: greedy text is reproducible.
  const std::string greedy = R"({"model": ")" + model +
                             R"(", "prompt": "Once upon a time", "max_tokens": 12, "temperature": 0, "ignore_eos": true})";
  auto a = Post("/v1/completions", greedy);
  auto b = Post("/v1/completions", greedy);
  ASSERT_EQ(a->status, 200) << a->body;
  json ja = json::parse(a->body);
  EXPECT_EQ(ja["object"], "text_completion");
  EXPECT_EQ(ja["model"], model);
  EXPECT_EQ(ja["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(ja["usage"]["completion_tokens"], 12);
  EXPECT_EQ(ja["usage"]["total_tokens"], ja["usage"]["prompt_tokens"].get<int>() + 12);
  EXPECT_TRUE(ja["usage"]["kv_compression"]["policy"].is_string());
  EXPECT_EQ(ja["choices"][0]["text"], json::parse(b->body)["choices"][0]["text"]);

  // A stop string taken from that text cuts it right before its first occurrence.
  const std::string text = ja["choices"][0]["text"];
  ASSERT_GE(text.size(), 4u);
  std::string stop = text.substr(text.size() / 2, 2);
  auto stopped = Post("/v1/completions", R"({"prompt": "Once upon a time", "max_tokens": 12, "temperature": 0,
                                             "ignore_eos": true, "stop": [)" + json(stop).dump() + "]}");
  ASSERT_EQ(stopped->status, 200) << stopped->body;
  json js = json::parse(stopped->body);
  EXPECT_EQ(js["choices"][0]["text"], text.substr(0, text.find(stop)));
  EXPECT_EQ(js["choices"][0]["finish_reason"], "stop");

  // Chat, streaming with usage and two seeded choices.
  auto chat = Post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "Hello"}], "n": 2,
      "seed": 7, "max_tokens": 6, "stream": true, "stream_options": {"include_usage": true},
      "kv_compression": {"policy": "full"}})");
  ASSERT_EQ(chat->status, 200) << chat->body;
  EXPECT_EQ(chat->get_header_value("Content-Type"), "text/event-stream");
  std::vector<std::string> events = SseData(chat->body);
  ASSERT_GE(events.size(), 4u);
  EXPECT_EQ(events.back(), "[DONE]");
  json usage = json::parse(events[events.size() - 2]);
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_GT(usage["usage"]["completion_tokens"].get<int>(), 0);
  EXPECT_EQ(usage["usage"]["kv_compression"]["policy"], "full");
  std::set<int> finished;
  for (size_t i = 0; i + 2 < events.size(); ++i) {
    json c = json::parse(events[i]);
    if (!c["choices"][0]["finish_reason"].is_null()) finished.insert(c["choices"][0]["index"].get<int>());
  }
  EXPECT_EQ(finished, (std::set<int>{0, 1}));

  // Tokenizer endpoints round-trip.
  auto tok = Post("/tokenize", R"({"prompt": "hello world", "add_special_tokens": false})");
  ASSERT_EQ(tok->status, 200) << tok->body;
  json t = json::parse(tok->body);
  EXPECT_EQ(t["count"], t["tokens"].size());
  auto detok = Post("/detokenize", json{{"tokens", t["tokens"]}}.dump());
  ASSERT_EQ(detok->status, 200) << detok->body;
  EXPECT_NE(json::parse(detok->body)["prompt"].get<std::string>().find("hello world"), std::string::npos);
}

#ifdef KVSERVE_REAL_ENGINE
// vLLM's extras on the bundled model, end to end (issue 30): each changes greedy output the
// way its row in the field table says.
TEST_F(KVSERVE_SERVER_SUITE, VllmExtrasShapeTheOutput) {
  auto complete = [&](const json& extra) {
    json body = {{"prompt", "Once upon a time"},
                 {"max_tokens", 8},
                 {"temperature", 0},
                 {"return_token_ids", true}};
    body.update(extra);
    auto r = Post("/v1/completions", body.dump());
    EXPECT_EQ(r->status, 200) << body.dump() << " -> " << r->body;
    return r->status == 200 ? json::parse(r->body) : json::object();
  };
  const json plain = complete({{"ignore_eos", true}});
  ASSERT_TRUE(plain.contains("choices"));
  const std::vector<int> ids = plain["choices"][0]["token_ids"];
  ASSERT_EQ(ids.size(), 8u);
  const int first = ids[0];

  // min_tokens masks stop ids: the greedy first token as a stop id ends a plain request at
  // once, but with min_tokens 3 it cannot be sampled before token 3.
  const json stopped = complete({{"stop_token_ids", {first}}});
  EXPECT_EQ(stopped["choices"][0]["token_ids"].size(), 1u);
  const json held = complete({{"stop_token_ids", {first}}, {"min_tokens", 3}});
  const std::vector<int> held_ids = held["choices"][0]["token_ids"];
  ASSERT_GE(held_ids.size(), 3u);
  EXPECT_NE(held_ids[0], first);
  EXPECT_NE(held_ids[1], first);

  // allowed_token_ids: every token comes from the list.
  const std::vector<int> allowed = {ids[3], ids[5], 264, 276};
  const json only = complete({{"allowed_token_ids", allowed}, {"ignore_eos", true}});
  for (int id : only["choices"][0]["token_ids"]) {
    EXPECT_NE(std::find(allowed.begin(), allowed.end(), id), allowed.end()) << id;
  }

  // bad_words: a word of the plain text whose tokens (as the server tokenizes a bad word:
  // alone, or after a space) occur in the plain output never occurs in the banned output.
  const std::string text = plain["choices"][0]["text"];
  auto tokens_of = [&](const std::string& t) {
    auto tok = Post("/tokenize", json{{"prompt", t}, {"add_special_tokens", false}}.dump());
    EXPECT_EQ(tok->status, 200) << tok->body;
    return json::parse(tok->body)["tokens"].get<std::vector<int>>();
  };
  auto occurs = [](const std::vector<int>& hay, const std::vector<int>& seq) {
    return !seq.empty() && std::search(hay.begin(), hay.end(), seq.begin(), seq.end()) != hay.end();
  };
  std::string word;
  std::vector<std::vector<int>> seqs;
  std::istringstream words(text);
  for (std::string w; word.empty() && words >> w;) {
    std::vector<std::vector<int>> variants = {tokens_of(w), tokens_of(" " + w)};
    if (occurs(ids, variants[0]) || occurs(ids, variants[1])) word = w, seqs = variants;
  }
  ASSERT_FALSE(word.empty()) << text;
  const json banned = complete({{"bad_words", {word}}, {"ignore_eos", true}});
  const std::vector<int> banned_ids = banned["choices"][0]["token_ids"];
  EXPECT_EQ(banned_ids.size(), 8u);
  EXPECT_FALSE(occurs(banned_ids, seqs[0])) << word;
  // The space variant is banned when it has as many tokens and another first token (vLLM).
  if (seqs[1].size() == seqs[0].size() && seqs[1][0] != seqs[0][0])
    EXPECT_FALSE(occurs(banned_ids, seqs[1])) << word;

  // include_stop_str_in_output: the stop string ends the text.
  const std::string stop = text.substr(text.size() / 2, 2);
  const json kept =
      complete({{"stop", {stop}}, {"ignore_eos", true}, {"include_stop_str_in_output", true}});
  EXPECT_EQ(kept["choices"][0]["text"], text.substr(0, text.find(stop) + stop.size()));

  // truncate_prompt_tokens: only the last 2 prompt tokens count.
  const json cut = complete({{"truncate_prompt_tokens", 2}});
  EXPECT_EQ(cut["usage"]["prompt_tokens"], 2);
  // best_of: of three seeded samples, the one with the highest cumulative logprob comes back
  // (the same three as n = 3 with that seed), and usage counts all three.
  const json three =
      complete({{"n", 3}, {"seed", 5}, {"temperature", 1}, {"ignore_eos", true}, {"logprobs", 0}});
  ASSERT_EQ(three["choices"].size(), 3u);
  double best_sum = -1e30;
  std::string best_text;
  for (const json& c : three["choices"]) {
    double sum = 0;
    for (const json& lp : c["logprobs"]["token_logprobs"]) sum += lp.get<double>();
    if (sum > best_sum) best_sum = sum, best_text = c["text"];
  }
  const json best =
      complete({{"best_of", 3}, {"seed", 5}, {"temperature", 1}, {"ignore_eos", true}});
  ASSERT_EQ(best["choices"].size(), 1u);
  EXPECT_EQ(best["choices"][0]["text"], best_text);
  EXPECT_EQ(best["usage"]["completion_tokens"], 24);
  // echo with logprobs: the logprobs the prefill gives the prompt's tokens are the ones decoding
  // gave them. Prompt = the prompt's ids then 4 greedy tokens; their echoed logprobs match.
  const json lp8 = complete({{"ignore_eos", true}, {"logprobs", 0}});
  auto tok = Post("/tokenize", json{{"prompt", "Once upon a time"}}.dump());
  std::vector<int> scored = json::parse(tok->body)["tokens"].get<std::vector<int>>();
  const size_t prompt_len = scored.size();
  scored.insert(scored.end(), ids.begin(), ids.begin() + 4);
  const json echoed =
      complete({{"prompt", scored}, {"echo", true}, {"logprobs", 1}, {"max_tokens", 1}});
  const json& elp = echoed["choices"][0]["logprobs"];
  ASSERT_EQ(elp["token_logprobs"].size(), scored.size() + 1) << echoed;
  EXPECT_TRUE(elp["token_logprobs"][0].is_null());
  for (size_t k = 0; k < 4; ++k) {
    EXPECT_NEAR(elp["token_logprobs"][prompt_len + k].get<double>(),
                lp8["choices"][0]["logprobs"]["token_logprobs"][k].get<double>(), 1e-3)
        << k;
  }
  const json plp = complete({{"prompt_logprobs", 0}});
  EXPECT_EQ(plp["choices"][0]["prompt_logprobs"].size(), prompt_len) << plp;
  // /v1/embeddings (one input per request: this fixture queues one request at a time): the
  // text and its token ids give the same normalised vector of the hidden size.
  auto embed = [&](const json& input) {
    auto r = Post("/v1/embeddings", json{{"input", input}}.dump());
    EXPECT_EQ(r->status, 200) << r->body;
    return r->status == 200 ? json::parse(r->body) : json::object();
  };
  const json by_text = embed("Once upon a time");
  const json by_ids =
      embed(std::vector<int>(scored.begin(), scored.begin() + static_cast<long>(prompt_len)));
  ASSERT_EQ(by_text["data"].size(), 1u);
  const std::vector<float> tv = by_text["data"][0]["embedding"],
                           iv = by_ids["data"][0]["embedding"];
  ASSERT_EQ(tv.size(), 192u) << "kvs-tiny's hidden size";
  ASSERT_EQ(iv.size(), tv.size());
  double sq = 0.0;
  for (size_t k = 0; k < tv.size(); ++k) {
    sq += static_cast<double>(tv[k]) * tv[k];
    EXPECT_NEAR(tv[k], iv[k], 1e-5) << k;
  }
  EXPECT_NEAR(sq, 1.0, 1e-4);
  EXPECT_EQ(by_ids["usage"]["prompt_tokens"], static_cast<int>(prompt_len));
  EXPECT_EQ(Error(Post("/v1/embeddings", R"({"input": "x", "dimensions": 4})"), 400)["param"],
            "dimensions");
  // Refused fields name themselves.
  auto beam = Post("/v1/completions", R"({"prompt": "x", "use_beam_search": true})");
  EXPECT_EQ(beam->status, 400);
  EXPECT_EQ(json::parse(beam->body)["error"]["param"], "use_beam_search");
}
#endif  // KVSERVE_REAL_ENGINE

#ifdef KVSERVE_REAL_ENGINE
// Compression through both front ends on the real daemon: the summary and the audit record
// come back over HTTP and gRPC and agree with each other.
TEST_F(KVSERVE_SERVER_SUITE, CompressionSummaryAndAuditOverHttpAndGrpc) {
  auto r = Post("/v1/completions", R"({"prompt": "And it came to pass in those days", "max_tokens": 96,
      "temperature": 0, "ignore_eos": true, "kv_compression": {"policy": "triattention", "budget": 32,
      "divide_length": 16, "protect_prompt": false, "audit": true}})");
  ASSERT_EQ(r->status, 200) << r->body;
  const json c = json::parse(r->body)["usage"]["kv_compression"];
  EXPECT_EQ(c["policy"], "triattention");
  EXPECT_EQ(c["budget"], 32);
  ASSERT_GT(c["rounds"].get<int>(), 0) << c.dump();
  EXPECT_LE(c["peak_kv_tokens"].get<int>(), 32 + 16 + 16);
  EXPECT_GT(c["compression_ratio"].get<double>(), 1.5);
  ASSERT_EQ(c["audit"].size(), c["rounds"].get<size_t>());
  size_t evicted = 0;
  for (const json& round : c["audit"]) {
    EXPECT_EQ(round["token_ids_hash"].get<std::string>().size(), 16u) << round.dump();
    evicted += round["positions"].size();
  }
  EXPECT_EQ(evicted, c["evicted_tokens"].get<size_t>());

  v1::GenerateRequest req;
  req.set_prompt("And it came to pass in those days");
  req.mutable_sampling()->set_max_tokens(96);
  req.mutable_sampling()->set_temperature(0.0f);
  req.mutable_sampling()->set_ignore_eos(true);
  v1::KvCompression* kc = req.mutable_kv_compression();
  kc->set_policy("triattention");
  kc->set_budget(32);
  kc->set_divide_length(16);
  kc->set_protect_prompt(false);
  kc->set_audit(true);
  auto ctx = Context();
  auto reader = stub_->Generate(ctx.get(), req);
  v1::GenerateChunk chunk;
  std::optional<v1::CompressionSummary> summary;
  while (reader->Read(&chunk)) {
    if (chunk.has_usage()) summary = chunk.usage().kv_compression();
  }
  ASSERT_TRUE(reader->Finish().ok());
  ASSERT_TRUE(summary.has_value());
  EXPECT_EQ(summary->rounds(), c["rounds"].get<int64_t>());
  EXPECT_EQ(summary->evicted_tokens(), c["evicted_tokens"].get<int64_t>());
  ASSERT_EQ(summary->audit_size(), static_cast<int>(c["audit"].size()));
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(summary->audit(0).token_ids_hash()));
  EXPECT_EQ(std::string(hex), c["audit"][0]["token_ids_hash"].get<std::string>()) << "same tokens, same hash";
}

// Tenant isolation on the real daemon: a tenant reuses its own cached prefix, but another
// tenant sending the very same prompt gets no prefix-cache hit (`cached_tokens` is 0).
TEST_F(KVSERVE_SERVER_SUITE, TenantsDoNotShareThePrefixCache) {
  std::string prompt;
  for (int i = 0; i < 40; ++i) prompt += "And it came to pass in those days. ";
  const std::string body = json{{"prompt", prompt}, {"max_tokens", 1}, {"temperature", 0}}.dump();
  auto cached = [&](const std::string& key) -> int64_t {
    auto r = Post("/v1/completions", body, key);
    EXPECT_TRUE(r);
    if (!r) return -1;
    EXPECT_EQ(r->status, 200) << r->body;
    return json::parse(r->body)["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>();
  };
  EXPECT_EQ(cached("sk-alpha"), 0);
  EXPECT_GT(cached("sk-alpha"), 0) << "the same tenant reuses its prefix";
  EXPECT_EQ(cached("sk-beta"), 0) << "another tenant must not hit alpha's prefix";
  EXPECT_GT(cached("sk-beta"), 0) << "beta reuses its own";
}
#endif

TEST_F(KVSERVE_SERVER_SUITE, HttpErrors) {
  EXPECT_EQ(Error(Post("/v1/completions", "{oops"), 400)["type"], "invalid_request_error");
  EXPECT_EQ(Error(Post("/v1/completions", R"({"prompt": "x", "n": "two"})"), 400)["param"], "n");
  EXPECT_EQ(Error(Post("/v1/completions", R"({"prompt": "x", "top_p": 0})"), 400)["param"], "top_p");
  std::string long_prompt;
  for (int i = 0; i < 4000; ++i) long_prompt += "hello ";
  EXPECT_EQ(Error(Post("/v1/completions", json{{"prompt", long_prompt}}.dump()), 400)["param"], "prompt");
  EXPECT_EQ(Error(Post("/v1/completions", R"({"prompt": "x", "max_tokens": 5000})"), 400)["param"], "max_tokens");
  Error(Post("/v1/completions", R"({"prompt": "x"})", ""), 401);
  Error(Post("/v1/completions", R"({"prompt": "x"})", "sk-wrong"), 401);
  Error(Get("/v1/models", ""), 401);
  EXPECT_EQ(Error(Post("/v1/completions", R"({"prompt": "x", "kv_compression": {"policy": "streamingllm"}})", "sk-beta"), 403)["type"],
            "permission_error");
  EXPECT_EQ(Error(Post("/v1/completions", R"({"model": "no-such-model", "prompt": "x"})"), 404)["type"], "not_found_error");
  Error(Get("/v1/no/such/route"), 404);
  Error(Post("/v1/completions", json{{"prompt", std::string(70000, 'x')}}.dump()), 413);
  // Strict handling: OpenAI members kvserve does not implement, unknown roles and a
  // malformed logit_bias are 400s naming the field, never a 200 that ignores them.
  EXPECT_EQ(Error(Post("/v1/completions", R"({"prompt": "x", "best_of": 3, "stream": true})"),
                  400)["param"],
            "best_of");
  EXPECT_EQ(Error(Post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}],
      "guided_grammar": "root ::= \"x\" item"})"), 400)["param"], "guided_grammar");  // undefined rule
#ifdef KVSERVE_REAL_ENGINE
  // The bundled model's template has a Hermes-style tool-call format: "required" works out of
  // the box, and ends after one call when parallel_tool_calls is false.
  {
    auto res = Post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}],
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
        "properties": {"city": {"enum": ["Paris", "Rome"]}}, "required": ["city"]}}}],
        "tool_choice": "required", "parallel_tool_calls": false, "max_tokens": 200})");
    ASSERT_TRUE(res);
    ASSERT_EQ(res->status, 200) << res->body;
    const json j = json::parse(res->body);
    EXPECT_EQ(j["choices"][0]["finish_reason"], "tool_calls") << res->body;
    ASSERT_EQ(j["choices"][0]["message"]["tool_calls"].size(), 1u) << res->body;
    EXPECT_EQ(j["choices"][0]["message"]["tool_calls"][0]["function"]["name"], "f");
    const json args = json::parse(
        j["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"].get<std::string>());
    EXPECT_TRUE(args["city"] == "Paris" || args["city"] == "Rome") << args;
  }
#else
  // The fake template is Hermes-style: "required" is accepted (and its reply parsed as calls).
  {
    auto res = Post("/v1/chat/completions", R"({"messages": [{"role": "user", "content":
        "x <<reply>><tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call><</reply>>"}],
        "tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "required"})");
    ASSERT_TRUE(res);
    ASSERT_EQ(res->status, 200) << res->body;
    const json j = json::parse(res->body);
    EXPECT_EQ(j["choices"][0]["finish_reason"], "tool_calls") << res->body;
    EXPECT_EQ(j["choices"][0]["message"]["tool_calls"][0]["function"]["name"], "f") << res->body;
  }
#endif
  EXPECT_EQ(Error(Post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}],
      "response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "array", "uniqueItems": true}}}})"),
                  400)["param"],
            "response_format.json_schema.schema.uniqueItems");
  EXPECT_EQ(Error(Post("/v1/chat/completions", R"({"messages": [{"role": "wizard", "content": "x"}]})"), 400)["param"],
            "messages[0].role");
  EXPECT_EQ(Error(Post("/v1/chat/completions", R"({"messages": []})"), 400)["param"], "messages");
  EXPECT_EQ(Error(Post("/v1/completions", R"({"prompt": "x", "logit_bias": {"x": 1}})"), 400)["param"], "logit_bias");
  EXPECT_EQ(Error(Post("/v1/completions", R"({"prompt": "x", "logit_bias": {"99999999": 1}})"), 400)["param"],
            "logit_bias");
  auto system_only = Post("/v1/chat/completions",
                          R"({"messages": [{"role": "system", "content": "Be brief."}], "max_tokens": 2})");
  ASSERT_TRUE(system_only);
  EXPECT_EQ(system_only->status, 200) << system_only->body;
}

TEST_F(KVSERVE_SERVER_SUITE, QueueFullIs429AndResourceExhausted) {
  // 2 running + 1 waiting fill the engine (scheduler.max_num_seqs=2, max_waiting=1).
  std::vector<int> held;
  for (int i = 0; i < 3; ++i) {
    held.push_back(OpenStream(/*running=*/i < 2));
    ASSERT_GE(held.back(), 0);
  }
  EXPECT_EQ(Error(Post("/v1/completions", R"({"prompt": "x", "max_tokens": 1})"), 429)["type"], "rate_limit_error");
  v1::GenerateRequest req;
  req.set_prompt("x");
  req.mutable_sampling()->set_max_tokens(1);
  v1::CompleteResponse resp;
  auto ctx = Context();
  EXPECT_EQ(stub_->Complete(ctx.get(), req, &resp).error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  for (int fd : held) close(fd);  // hanging up aborts them
}

TEST_F(KVSERVE_SERVER_SUITE, Grpc) {
  v1::ListModelsResponse models;
  auto c0 = Context();
  ASSERT_TRUE(stub_->ListModels(c0.get(), v1::ListModelsRequest(), &models).ok());
  ASSERT_EQ(models.models_size(), 1);

  v1::GenerateRequest req;
  req.set_prompt("Once upon a time");
  req.mutable_sampling()->set_max_tokens(8);
  req.mutable_sampling()->set_temperature(0.0f);
  req.mutable_sampling()->set_ignore_eos(true);
  req.mutable_kv_compression()->set_policy("full");
  auto c1 = Context();
  auto reader = stub_->Generate(c1.get(), req);
  v1::GenerateChunk chunk;
  std::string streamed;
  int tokens = 0;
  bool usage = false;
  std::string finish;
  while (reader->Read(&chunk)) {
    streamed += chunk.text();
    tokens += chunk.token_ids_size();
    if (!chunk.finish_reason().empty()) finish = chunk.finish_reason();
    usage |= chunk.has_usage();
  }
  ASSERT_TRUE(reader->Finish().ok());
  EXPECT_EQ(tokens, 8);
  EXPECT_EQ(finish, "length");
  EXPECT_TRUE(usage);

  v1::CompleteResponse complete;
  auto c2 = Context();
  ASSERT_TRUE(stub_->Complete(c2.get(), req, &complete).ok());
  EXPECT_EQ(complete.choices(0).text(), streamed);
  EXPECT_EQ(complete.usage().completion_tokens(), 8);

  v1::ChatRequest chat;
  auto* m = chat.add_messages();
  m->set_role("user");
  m->set_content("Hi");
  chat.mutable_sampling()->set_max_tokens(4);
  auto c3 = Context();
  auto chat_reader = stub_->Chat(c3.get(), chat);
  while (chat_reader->Read(&chunk)) {
  }
  EXPECT_TRUE(chat_reader->Finish().ok());

  v1::TokenizeRequest t;
  t.set_prompt("hello");
  v1::TokenizeResponse tr;
  auto c4 = Context();
  ASSERT_TRUE(stub_->Tokenize(c4.get(), t, &tr).ok());
  EXPECT_GT(tr.count(), 0);
  v1::DetokenizeRequest d;
  *d.mutable_tokens() = tr.tokens();
  v1::DetokenizeResponse dr;
  auto c5 = Context();
  ASSERT_TRUE(stub_->Detokenize(c5.get(), d, &dr).ok());
  EXPECT_NE(dr.prompt().find("hello"), std::string::npos);

  // Status codes.
  v1::GenerateRequest bad = req;
  bad.mutable_sampling()->set_top_p(2.0f);
  v1::CompleteResponse r;
  auto c6 = Context();
  grpc::Status st = stub_->Complete(c6.get(), bad, &r);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("top_p"), std::string::npos);
  auto c7 = Context("");
  EXPECT_EQ(stub_->Complete(c7.get(), req, &r).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  v1::GenerateRequest denied = req;
  denied.mutable_kv_compression()->set_policy("snapkv");
  auto c8 = Context("sk-beta");
  EXPECT_EQ(stub_->Complete(c8.get(), denied, &r).error_code(), grpc::StatusCode::PERMISSION_DENIED);

  // Abort by id, and a client cancel, both end the request in the engine.
  v1::GenerateRequest long_req = req;
  long_req.mutable_sampling()->set_max_tokens(2000);
  long_req.set_request_id("grpc-long-1");
  auto c9 = Context();
  auto long_reader = stub_->Generate(c9.get(), long_req);
  ASSERT_TRUE(long_reader->Read(&chunk));
  v1::AbortRequest abort;
  abort.set_request_id("grpc-long-1");
  v1::AbortResponse abort_resp;
  auto c10 = Context();
  ASSERT_TRUE(stub_->Abort(c10.get(), abort, &abort_resp).ok());
  EXPECT_TRUE(abort_resp.found());
  std::string last_finish;
  while (long_reader->Read(&chunk)) {
    if (!chunk.finish_reason().empty()) last_finish = chunk.finish_reason();
  }
  EXPECT_TRUE(long_reader->Finish().ok());
  EXPECT_EQ(last_finish, "abort");

  long_req.set_request_id("grpc-long-2");
  auto c11 = Context();
  auto cancel_reader = stub_->Generate(c11.get(), long_req);
  ASSERT_TRUE(cancel_reader->Read(&chunk));
  c11->TryCancel();
  while (cancel_reader->Read(&chunk)) {
  }
  EXPECT_EQ(cancel_reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
}

TEST_F(KVSERVE_SERVER_SUITE, ServesHundredsOfConcurrentStreams) {
  // The default scheduler limits (256 running sequences), one key.
  ASSERT_NO_FATAL_FAILURE(StartServer(R"({"logging": {"level": "warn"},
      "server": {"host": "127.0.0.1", "http_port": 0, "grpc_port": 0},
      "tenants": [{"name": "alpha", "api_keys": ["sk-alpha"]}]})"));
  constexpr int kStreams = 256;
  std::vector<std::string> bodies(kStreams);
  std::vector<std::string> failures(kStreams);  // why a stream got no body: status or client error
  std::vector<std::thread> clients;
  for (int i = 0; i < kStreams; ++i) {
    clients.emplace_back([this, &bodies, &failures, i] {
      auto [body, failure] = TakeBody(Post(
          "/v1/completions", R"({"prompt": "In the beginning", "max_tokens": 8, "ignore_eos": true, "stream": true})"));
      bodies[i] = std::move(body);
      failures[i] = std::move(failure);
    });
  }
  // Other requests are served while the streams run.
  auto models = Get("/v1/models");
  ASSERT_TRUE(models);
  EXPECT_EQ(models->status, 200);
  for (auto& t : clients) t.join();
  for (int i = 0; i < kStreams; ++i) {
    std::vector<std::string> events = SseData(bodies[i]);
    ASSERT_GE(events.size(), 2u) << "stream " << i << ": " << failures[i];
    EXPECT_EQ(events.back(), "[DONE]") << "stream " << i;
  }
}

TEST_F(KVSERVE_SERVER_SUITE, DisconnectedClientFreesItsSlot) {
  // Both engine slots are taken by long streams; the client of one of them hangs up. A
  // short request then runs at once instead of waiting for the long ones to finish.
  const int keeper = OpenStream(/*running=*/true);
  const int victim = OpenStream(/*running=*/true);
  ASSERT_GE(keeper, 0);
  ASSERT_GE(victim, 0);
  close(victim);
  const auto start = std::chrono::steady_clock::now();
  auto res = Post("/v1/completions", R"({"prompt": "b", "max_tokens": 2, "ignore_eos": true})");
  const auto took = std::chrono::steady_clock::now() - start;
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200) << res->body;
  EXPECT_LT(took, milliseconds(500));
  close(keeper);
}

// SIGHUP re-reads the API keys (a rotated Kubernetes secret) without a restart; the daemon
// keeps serving, and a configuration that no longer loads keeps the old keys.
TEST_F(KVSERVE_SERVER_SUITE, SighupReloadsApiKeys) {
  const std::string keys = WriteTempFile("alpha.keys", "sk-old\n");
  json cfg = json::parse(kConfig);
  cfg["tenants"][0] = {{"name", "alpha"}, {"api_keys_file", keys}};
  ASSERT_NO_FATAL_FAILURE(StartServer(cfg.dump()));
  ASSERT_EQ(Get("/v1/models", "sk-old")->status, 200);
  auto status_with = [&](const std::string& key) {
    auto r = Get("/v1/models", key);
    return r ? r->status : -1;
  };
  auto wait_for = [&](const std::function<bool()>& cond) {
    for (int i = 0; i < 500 && !cond(); ++i) std::this_thread::sleep_for(milliseconds(10));
    return cond();
  };

  { std::ofstream(keys) << "sk-new\n"; }
  server_->Signal(SIGHUP);
  ASSERT_TRUE(wait_for([&] { return status_with("sk-new") == 200; })) << server_->stderr_text();
  Error(Get("/v1/models", "sk-old"), 401);
  EXPECT_EQ(status_with("sk-beta"), 200) << "other tenants keep their keys";
  v1::TokenizeRequest treq;
  treq.set_prompt("a");
  v1::TokenizeResponse tresp;
  auto ctx = Context("sk-new");
  EXPECT_TRUE(stub_->Tokenize(ctx.get(), treq, &tresp).ok()) << "gRPC uses the new keys too";
  auto old_ctx = Context("sk-old");
  EXPECT_EQ(stub_->Tokenize(old_ctx.get(), treq, &tresp).error_code(), grpc::StatusCode::UNAUTHENTICATED);

  // An unreadable key file: the reload is refused, the current keys stay, nothing is leaked.
  { std::ofstream(keys) << "\n"; }
  server_->Signal(SIGHUP);
  ASSERT_TRUE(wait_for([&] { return server_->stderr_text().find("API keys unchanged") != std::string::npos; }))
      << server_->stderr_text();
  EXPECT_EQ(status_with("sk-new"), 200);
  EXPECT_EQ(server_->stderr_text().find("sk-new"), std::string::npos) << "keys never reach the log";
  EXPECT_EQ(Get("/health", "")->status, 200);

  server_->Signal(SIGTERM);
  std::optional<int> status = server_->WaitExit(milliseconds(30000));
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(*status, 0);
}

TEST_F(KVSERVE_SERVER_SUITE, SigtermDrainsAndExitsZero) {
  std::string consumed;
  const int stream = OpenStream(/*running=*/true, &consumed);
  ASSERT_GE(stream, 0);
  server_->Signal(SIGTERM);
  // Refusals start at once; poll for the observable switch.
  bool refused = false;
  for (int i = 0; i < 400 && !refused; ++i) {
    auto r = Get("/ready", "");
    refused = r && r->status == 503;
    if (!refused) std::this_thread::sleep_for(milliseconds(5));
  }
  EXPECT_TRUE(refused);
  Error(Post("/v1/completions", R"({"prompt": "x", "max_tokens": 1})"), 503);
  v1::GenerateRequest req;
  req.set_prompt("x");
  v1::CompleteResponse resp;
  auto ctx = Context();
  EXPECT_EQ(stub_->Complete(ctx.get(), req, &resp).error_code(), grpc::StatusCode::UNAVAILABLE);
  std::vector<std::string> events = SseData(ReadStream(stream, consumed));
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.back(), "[DONE]");
  const int64_t tokens = json::parse(events[events.size() - 2])["usage"]["completion_tokens"];
  const std::string finish = json::parse(events[events.size() - 3])["choices"][0]["finish_reason"];
  // Cut with "abort" at the drain timeout (0.5 s), unless the engine managed all 2000 tokens.
  if (tokens < 2000) {
    EXPECT_EQ(finish, "abort");
  } else {
    EXPECT_EQ(finish, "length");
  }
  std::optional<int> status = server_->WaitExit(milliseconds(30000));
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(*status, 0);
}

}  // namespace
}  // namespace kvserve::server::testing
