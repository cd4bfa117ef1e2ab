// /v1/responses over real sockets (in-process server, FakeEngine): the Response object, the
// streaming event sequence, input items and tools through the chat path, structured outputs,
// the store (GET / DELETE / cancel / previous_response_id, per tenant), and the 400s of the
// closed member set. The store's bounds are driven with a FakeClock directly.
#include <httplib.h>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "base/clock.h"
#include "server/openai/openai_param_support.h"
#include "server/openai/responses_store.h"
#include "tests/unit/server/fake_text_codec.h"
#include "tests/unit/server/http_test_client.h"
#include "tests/unit/server/test_server.h"

namespace kvserve::server::testing {
namespace {

using nlohmann::json;

constexpr base::Nanos kSecond = 1'000'000'000;

TEST(ResponseStoreTest, EntriesExpireAfterTheTtlAndTheOldestMakesRoom) {
  base::FakeClock clock;
  ResponseStore store({/*max_entries=*/2, /*ttl_ns=*/10 * kSecond}, &clock);
  store.Put("a", {"{}", "[]", "t"});
  clock.advance_ns(4 * kSecond);
  store.Put("b", {"{}", "[]", "t"});
  ASSERT_TRUE(store.Get("a").has_value());
  EXPECT_EQ(store.Get("a")->tenant, "t");
  clock.advance_ns(2 * kSecond);
  store.Put("c", {"{}", "[]", "t"});  // over the bound: "a", the oldest, goes
  EXPECT_FALSE(store.Get("a").has_value());
  EXPECT_TRUE(store.Get("b").has_value());
  clock.advance_ns(8 * kSecond);  // "b" is 10 s old: expired; "c" is 8 s old
  EXPECT_FALSE(store.Get("b").has_value());
  EXPECT_TRUE(store.Get("c").has_value());
  EXPECT_TRUE(store.Erase("c"));
  EXPECT_FALSE(store.Erase("c"));
  EXPECT_EQ(store.size(), 0);
  ResponseStore off({/*max_entries=*/0, 10 * kSecond}, &clock);
  off.Put("x", {"{}", "[]", ""});
  EXPECT_FALSE(off.enabled());
  EXPECT_FALSE(off.Get("x").has_value());
}

class ResponsesHttpTest : public ::testing::Test {
 protected:
  void Start(TestServerOptions options = {}) {
    options.chat_formats.tools = chat::ToolCallFormat::kHermes;
    options.chat_formats.reasoning = true;
    server_ = std::make_unique<TestServer>(std::move(options));
  }
  FakeEngine& engine() { return server_->engine(); }
  httplib::Client Client() {
    httplib::Client c("127.0.0.1", server_->http_port());
    c.set_read_timeout(30, 0);
    return c;
  }
  httplib::Result Post(const std::string& path, const json& body, const std::string& key = "") {
    return Client().Post(path.c_str(), BearerHeaders(key), body.dump(), "application/json");
  }
  json Create(const json& body, const std::string& key = "") {
    auto res = Post("/v1/responses", body, key);
    EXPECT_TRUE(res);
    if (!res) return json();
    EXPECT_EQ(res->status, 200) << res->body;
    return json::parse(res->body, nullptr, false);
  }
  // The prompt the engine got for the last request, as text.
  std::string LastPrompt() {
    auto specs = engine().submitted();
    if (specs.empty()) return "";
    return FakeTextCodec().Decode(specs.back().prompt_tokens, false);
  }

  std::unique_ptr<TestServer> server_;
};

const json kWeatherTool = {{"type", "function"},
                           {"name", "get_weather"},
                           {"description", "Weather in a city"},
                           {"parameters",
                            {{"type", "object"},
                             {"properties", {{"city", {{"type", "string"}}}}},
                             {"required", {"city"}}}}};
const std::string kToolReply =
    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";

// The data of each event of a Responses stream ("event: TYPE\ndata: JSON\n\n").
std::vector<std::string> EventData(const std::string& body) {
  std::vector<std::string> out;
  size_t pos = 0;
  while ((pos = body.find("data: ", pos)) != std::string::npos) {
    const size_t end = body.find("\n\n", pos);
    out.push_back(body.substr(pos + 6, end - pos - 6));
    pos = end;
  }
  return out;
}

std::string Scripted(const std::string& reply) {
  return "Weather? <<reply>>" + reply + "<</reply>>";
}

TEST_F(ResponsesHttpTest, CreateReturnsAResponseWithReasoningTextAndUsage) {
  Start();
  json r = Create({{"model", "kvs-tiny"},
                   {"instructions", "Be brief."},
                   {"input", Scripted("<think>hmm</think>Sunny.")},
                   {"max_output_tokens", 50},
                   {"metadata", {{"k", "v"}}}});
  EXPECT_TRUE(r["id"].get<std::string>().starts_with("resp_"));
  EXPECT_EQ(r["object"], "response");
  EXPECT_EQ(r["status"], "completed");
  EXPECT_EQ(r["model"], "kvs-tiny");
  EXPECT_EQ(r["instructions"], "Be brief.");
  EXPECT_EQ(r["metadata"]["k"], "v");
  ASSERT_EQ(r["output"].size(), 2u) << r.dump();
  EXPECT_EQ(r["output"][0]["type"], "reasoning");
  EXPECT_EQ(r["output"][0]["content"][0]["text"], "hmm");
  EXPECT_EQ(r["output"][1]["type"], "message");
  EXPECT_EQ(r["output"][1]["role"], "assistant");
  EXPECT_EQ(r["output"][1]["content"][0]["type"], "output_text");
  EXPECT_EQ(r["output"][1]["content"][0]["text"], "Sunny.");
  const json& u = r["usage"];
  EXPECT_GT(u["input_tokens"].get<int64_t>(), 0);
  EXPECT_GT(u["output_tokens"].get<int64_t>(), 0);
  EXPECT_EQ(u["total_tokens"],
            u["input_tokens"].get<int64_t>() + u["output_tokens"].get<int64_t>());
  // instructions are a system message ahead of the input.
  const std::string prompt = LastPrompt();
  EXPECT_LT(prompt.find("system\nBe brief."), prompt.find("user\nWeather?")) << prompt;

  // max_output_tokens cuts: status incomplete, with the reason.
  json cut = Create({{"input", "Hi"}, {"max_output_tokens", 3}});
  EXPECT_EQ(cut["status"], "incomplete");
  EXPECT_EQ(cut["incomplete_details"]["reason"], "max_output_tokens");
  EXPECT_EQ(cut["usage"]["output_tokens"], 3);
  EXPECT_EQ(engine().submitted().back().max_tokens, 3);
}

TEST_F(ResponsesHttpTest, StreamingSendsTheEventSequenceInOrder) {
  Start();
  auto res = Post("/v1/responses",
                  {{"input", Scripted("<think>hm</think>Sunny today.")}, {"stream", true}});
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(res->get_header_value("Content-Type").rfind("text/event-stream", 0), 0u);
  std::vector<std::string> types;
  std::string text, reasoning;
  int64_t seq = 0;
  json completed;
  for (const std::string& data : EventData(res->body)) {
    json e = json::parse(data);
    EXPECT_EQ(e["sequence_number"], seq++) << data;
    const std::string type = e["type"];
    if (types.empty() || types.back() != type) types.push_back(type);
    if (type == "response.output_text.delta") text += e["delta"].get<std::string>();
    if (type == "response.reasoning_text.delta") reasoning += e["delta"].get<std::string>();
    if (type == "response.completed") completed = e["response"];
  }
  // Every data line has its `event:` line.
  EXPECT_NE(res->body.find("event: response.created\ndata: "), std::string::npos);
  const std::vector<std::string> expected = {"response.created",
                                             "response.in_progress",
                                             "response.output_item.added",
                                             "response.content_part.added",
                                             "response.reasoning_text.delta",
                                             "response.reasoning_text.done",
                                             "response.content_part.done",
                                             "response.output_item.done",
                                             "response.output_item.added",
                                             "response.content_part.added",
                                             "response.output_text.delta",
                                             "response.output_text.done",
                                             "response.content_part.done",
                                             "response.output_item.done",
                                             "response.completed"};
  EXPECT_EQ(types, expected);
  EXPECT_EQ(text, "Sunny today.");
  EXPECT_EQ(reasoning, "hm");
  EXPECT_EQ(completed["status"], "completed");
  EXPECT_EQ(completed["output"][1]["content"][0]["text"], "Sunny today.");
  EXPECT_GT(completed["usage"]["output_tokens"].get<int64_t>(), 0);
}

TEST_F(ResponsesHttpTest, FunctionCallsRoundTripThroughInputItems) {
  Start();
  json r = Create({{"input", Scripted(kToolReply)}, {"tools", {kWeatherTool}}});
  ASSERT_EQ(r["output"].size(), 1u) << r.dump();
  const json& call = r["output"][0];
  EXPECT_EQ(call["type"], "function_call");
  EXPECT_EQ(call["name"], "get_weather");
  EXPECT_EQ(json::parse(call["arguments"].get<std::string>())["city"], "Paris");
  EXPECT_TRUE(call["call_id"].get<std::string>().starts_with("call_"));
  EXPECT_EQ(r["tools"][0]["name"], "get_weather");
  // The tools reached the template as chat tools.
  EXPECT_NE(LastPrompt().find("\"name\":\"get_weather\""), std::string::npos) << LastPrompt();

  // Streaming: the call is an item with its arguments events.
  auto s = Post("/v1/responses",
                {{"input", Scripted(kToolReply)}, {"tools", {kWeatherTool}}, {"stream", true}});
  ASSERT_TRUE(s);
  std::string args_done;
  for (const std::string& data : EventData(s->body)) {
    json e = json::parse(data);
    if (e["type"] == "response.function_call_arguments.done") args_done = e["arguments"];
  }
  EXPECT_EQ(json::parse(args_done)["city"], "Paris");

  // The call and its output go back as items: an assistant tool call and a tool message.
  json next =
      Create({{"input",
               {{{"role", "user"}, {"content", "Weather?"}},
                {{"type", "function_call"},
                 {"call_id", "call_9"},
                 {"name", "get_weather"},
                 {"arguments", "{\"city\":\"Paris\"}"}},
                {{"type", "function_call_output"}, {"call_id", "call_9"}, {"output", "21 C"}},
                {{"type", "message"},
                 {"role", "user"},
                 {"content", {{{"type", "input_text"}, {"text", "Thanks"}}}}}}},
              {"tools", {kWeatherTool}},
              {"tool_choice", "none"},
              {"max_output_tokens", 4}});
  EXPECT_EQ(next["output"][0]["type"], "message") << next.dump();
  const std::string prompt = LastPrompt();
  EXPECT_NE(prompt.find("<tool_call>[{\"id\":\"call_9\""), std::string::npos) << prompt;
  EXPECT_NE(prompt.find("tool\n21 C"), std::string::npos) << prompt;
  EXPECT_NE(prompt.find("user\nThanks"), std::string::npos) << prompt;
}

TEST_F(ResponsesHttpTest, TextFormatJsonSchemaConstrainsTheOutput) {
  Start();
  const json schema = {
      {"type", "object"}, {"properties", {{"ok", {{"type", "boolean"}}}}}, {"required", {"ok"}}};
  json r = Create(
      {{"input", "Answer"},
       {"text", {{"format", {{"type", "json_schema"}, {"name", "answer"}, {"schema", schema}}}}}});
  EXPECT_EQ(r["text"]["format"]["type"], "json_schema");
  ASSERT_FALSE(engine().submitted().empty());
  EXPECT_TRUE(engine().submitted().back().sampling.grammar != nullptr)
      << "no structured-output grammar reached the engine";
  auto bad =
      Post("/v1/responses", {{"input", "x"}, {"text", {{"format", {{"type", "json_schema"}}}}}});
  EXPECT_EQ(ExpectOpenAiError(bad, 400)["param"], "text.format.schema");
}

TEST_F(ResponsesHttpTest, StoredResponsesAreRetrievedContinuedDeletedPerTenant) {
  TestServerOptions o;
  o.tenants = {MakeTenant("a", {"sk-a"}), MakeTenant("b", {"sk-b"})};
  Start(std::move(o));
  json first =
      Create({{"input", Scripted("Paris is sunny.")}, {"instructions", "Old rules."}}, "sk-a");
  const std::string id = first["id"];
  auto got = Client().Get(("/v1/responses/" + id).c_str(), BearerHeaders("sk-a"));
  ASSERT_TRUE(got);
  ASSERT_EQ(got->status, 200) << got->body;
  EXPECT_EQ(json::parse(got->body), first);
  // Another tenant sees nothing, continues nothing, deletes nothing.
  ExpectOpenAiError(Client().Get(("/v1/responses/" + id).c_str(), BearerHeaders("sk-b")), 404);
  ExpectOpenAiError(
      Post("/v1/responses", {{"input", "more"}, {"previous_response_id", id}}, "sk-b"), 404);
  ExpectOpenAiError(Client().Delete(("/v1/responses/" + id).c_str(), BearerHeaders("sk-b")), 404);

  // previous_response_id: the earlier input and output come first; old instructions do not.
  json second = Create({{"input", "And tomorrow?"}, {"previous_response_id", id}}, "sk-a");
  EXPECT_EQ(second["previous_response_id"], id);
  const std::string prompt = LastPrompt();
  const size_t q1 = prompt.find("user\nWeather?"), a1 = prompt.find("assistant\nParis is sunny.");
  const size_t q2 = prompt.find("user\nAnd tomorrow?");
  EXPECT_TRUE(q1 < a1 && a1 < q2 && q2 != std::string::npos) << prompt;
  EXPECT_EQ(prompt.find("Old rules."), std::string::npos) << prompt;

  // store false: not kept.
  json unstored = Create({{"input", "x"}, {"store", false}, {"max_output_tokens", 2}}, "sk-a");
  ExpectOpenAiError(Client().Get(("/v1/responses/" + unstored["id"].get<std::string>()).c_str(),
                                 BearerHeaders("sk-a")),
                    404);

  // cancel: a clear 400 (nothing runs in the background); unknown ids are 404.
  json c = ExpectOpenAiError(Post("/v1/responses/" + id + "/cancel", json::object(), "sk-a"), 400);
  EXPECT_NE(c["message"].get<std::string>().find("background"), std::string::npos);
  ExpectOpenAiError(Post("/v1/responses/resp_nope/cancel", json::object(), "sk-a"), 404);

  auto del = Client().Delete(("/v1/responses/" + id).c_str(), BearerHeaders("sk-a"));
  ASSERT_TRUE(del);
  ASSERT_EQ(del->status, 200) << del->body;
  EXPECT_EQ(json::parse(del->body)["deleted"], true);
  ExpectOpenAiError(Client().Get(("/v1/responses/" + id).c_str(), BearerHeaders("sk-a")), 404);
  ExpectOpenAiError(Client().Get(("/v1/responses/" + id).c_str()), 401);
}

// Every /v1/responses row of the field table: refused rows are a 400 naming the member when
// they ask for something and accepted when they do not; a member in no row is a 400.
TEST_F(ResponsesHttpTest, MembersOutsideTheTableOrRefusedAre400sNamingThem) {
  Start();
  int refused = 0;
  for (const RequestField& f : RequestFields()) {
    if (!f.in(ParamScope::kResponses) || f.status != FieldStatus::kRefused) continue;
    ++refused;
    const std::string name(f.name);
    json asks = {{"input", "x"}, {"max_output_tokens", 1}, {name, json::parse(R"({"x": 1})")}};
    if (name == "background") asks[name] = true;
    if (name == "truncation") asks[name] = "auto";
    if (name == "top_logprobs") asks[name] = 3;
    if (name == "include") asks[name] = {"reasoning.encrypted_content"};
    EXPECT_EQ(ExpectOpenAiError(Post("/v1/responses", asks), 400)["param"], name);
    json not_asked = {{"input", "x"}, {"max_output_tokens", 1}, {name, nullptr}};
    if (!f.accepted_default_json.empty()) not_asked[name] = json::parse(f.accepted_default_json);
    auto ok = Post("/v1/responses", not_asked);
    ASSERT_TRUE(ok);
    EXPECT_EQ(ok->status, 200) << name << ": " << ok->body;
  }
  EXPECT_GE(refused, 5);
  EXPECT_EQ(ExpectOpenAiError(Post("/v1/responses", {{"input", "x"}, {"seed", 1}}), 400)["param"],
            "seed");
  EXPECT_EQ(ExpectOpenAiError(Post("/v1/responses", {{"input", "x"}, {"max_output_tokens", 0}}),
                              400)["param"],
            "max_output_tokens");
  EXPECT_EQ(ExpectOpenAiError(
                Post("/v1/responses", {{"input", "x"}, {"tools", {{{"type", "web_search"}}}}}),
                400)["param"],
            "tools[0].type");
  EXPECT_EQ(ExpectOpenAiError(
                Post("/v1/responses",
                     {{"input", {{{"role", "user"}, {"content", {{{"type", "input_image"}}}}}}}}),
                400)["param"],
            "input[0].content[0].type");
  EXPECT_EQ(ExpectOpenAiError(Post("/v1/responses", {{"max_output_tokens", 1}}), 400)["param"],
            "input");
  ExpectOpenAiError(Post("/v1/responses", {{"input", "x"}, {"model", "other"}}), 404);
}

}  // namespace
}  // namespace kvserve::server::testing
