// The gRPC front end over real sockets with the generated stubs (and a generic stub for
// the standard health and reflection services) and a FakeEngine.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <gtest/gtest.h>

#include <functional>
#include <thread>

#include "kvserve/v1/kvserve.grpc.pb.h"
#include "tests/unit/server/test_server.h"

namespace kvserve::server::testing {
namespace {

using std::chrono::milliseconds;

class GrpcFrontendTest : public ::testing::Test {
 protected:
  void Start(TestServerOptions options = {}) {
    server_ = std::make_unique<TestServer>(std::move(options));
    channel_ = grpc::CreateChannel(server_->grpc_target(), grpc::InsecureChannelCredentials());
    stub_ = v1::KvServe::NewStub(channel_);
  }
  FakeEngine& engine() { return server_->engine(); }

  std::unique_ptr<grpc::ClientContext> Context(const std::string& key = "") {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    if (!key.empty()) ctx->AddMetadata("authorization", "Bearer " + key);
    return ctx;
  }

  // Runs Generate to the end; returns the chunks and the final status.
  std::pair<std::vector<v1::GenerateChunk>, grpc::Status> Generate(const v1::GenerateRequest& req,
                                                                   const std::string& key = "") {
    auto ctx = Context(key);
    auto reader = stub_->Generate(ctx.get(), req);
    std::vector<v1::GenerateChunk> chunks;
    v1::GenerateChunk c;
    while (reader->Read(&c)) chunks.push_back(c);
    return {chunks, reader->Finish()};
  }

  // A unary call through the generic stub: raw bytes in, raw bytes out.
  grpc::Status RawUnary(const std::string& method, const std::string& request, std::string* response) {
    grpc::GenericStub generic(channel_);
    grpc::CompletionQueue cq;
    grpc::ClientContext ctx;
    grpc::Slice slice(request);
    grpc::ByteBuffer in(&slice, 1), out;
    auto call = generic.PrepareUnaryCall(&ctx, method, in, &cq);
    call->StartCall();
    grpc::Status status;
    call->Finish(&out, &status, reinterpret_cast<void*>(1));
    void* tag;
    bool ok;
    EXPECT_TRUE(cq.Next(&tag, &ok));
    std::vector<grpc::Slice> slices;
    if (status.ok() && out.Dump(&slices).ok()) {
      for (const auto& s : slices) response->append(reinterpret_cast<const char*>(s.begin()), s.size());
    }
    cq.Shutdown();
    while (cq.Next(&tag, &ok)) {
    }
    return status;
  }

  std::unique_ptr<TestServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::KvServe::Stub> stub_;
};

v1::GenerateRequest Prompt(const std::string& text, int max_tokens) {
  v1::GenerateRequest r;
  r.set_prompt(text);
  r.mutable_sampling()->set_max_tokens(max_tokens);
  r.mutable_sampling()->set_temperature(0.0f);
  return r;
}

TEST_F(GrpcFrontendTest, GenerateStreamsChunksThenUsage) {
  Start();
  v1::GenerateRequest req = Prompt("Hi", 10);
  req.mutable_kv_compression()->set_policy("streamingllm");
  req.mutable_kv_compression()->set_budget(32);
  auto [chunks, status] = Generate(req);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_FALSE(chunks.empty());
  std::string text;
  int token_count = 0;
  for (const auto& c : chunks) {
    EXPECT_EQ(c.request_id(), chunks[0].request_id());
    text += c.text();
    token_count += c.token_ids_size();
  }
  EXPECT_EQ(text, "The quick ");
  EXPECT_EQ(token_count, 10);
  const v1::GenerateChunk& last = chunks.back();
  EXPECT_TRUE(last.has_usage());
  EXPECT_EQ(last.usage().prompt_tokens(), 3);
  EXPECT_EQ(last.usage().completion_tokens(), 10);
  EXPECT_EQ(last.usage().total_tokens(), 13);
  EXPECT_EQ(last.usage().kv_compression().policy(), "streamingllm");
  EXPECT_EQ(last.usage().kv_compression().budget(), 32);
  int finishes = 0;
  for (const auto& c : chunks) finishes += !c.finish_reason().empty();
  EXPECT_EQ(finishes, 1);
  ASSERT_EQ(engine().submitted().size(), 1u);
  EXPECT_EQ(engine().submitted()[0].compression.policy, config::CompressionPolicyKind::kStreamingLlm);
  EXPECT_FALSE(engine().submitted()[0].compression.k_dtype.has_value());

  // KV precision: kv_dtype sets both sides, v_dtype overrides one; a bad name is a 400
  // naming the field.
  v1::GenerateRequest precise = Prompt("Hi", 2);
  precise.mutable_kv_compression()->set_kv_dtype("bf16");
  precise.mutable_kv_compression()->set_v_dtype("int4");
  auto [pc, ps] = Generate(precise);
  ASSERT_TRUE(ps.ok()) << ps.error_message();
  ASSERT_EQ(engine().submitted().size(), 2u);
  EXPECT_EQ(engine().submitted()[1].compression.k_dtype, config::KvDtype::kBf16);
  EXPECT_EQ(engine().submitted()[1].compression.v_dtype, config::KvDtype::kInt4);
  v1::GenerateRequest bad_dtype = Prompt("Hi", 2);
  bad_dtype.mutable_kv_compression()->set_k_dtype("int3");
  auto [bc, bs] = Generate(bad_dtype);
  EXPECT_EQ(bs.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(bs.error_message().find("kv_compression.k_dtype"), std::string::npos) << bs.error_message();

  // Demotion schedule: a map of dtype -> tokens; a bad dtype or count names its entry.
  v1::GenerateRequest demote = Prompt("Hi", 2);
  (*demote.mutable_kv_compression()->mutable_demote())["int8"] = 1024;
  (*demote.mutable_kv_compression()->mutable_demote())["int4"] = 2048;
  auto [dc, ds] = Generate(demote);
  ASSERT_TRUE(ds.ok()) << ds.error_message();
  ASSERT_EQ(engine().submitted().size(), 3u);
  const auto sched = engine().submitted()[2].compression.demote;  // submitted() is a copy
  ASSERT_EQ(sched.size(), 2u);
  EXPECT_EQ(sched[0], (std::pair<config::KvDtype, int64_t>{config::KvDtype::kInt4, 2048}));  // sorted by name
  EXPECT_EQ(sched[1], (std::pair<config::KvDtype, int64_t>{config::KvDtype::kInt8, 1024}));
  // "lowrank" is the low-rank key tier, beside the dtype tiers.
  v1::GenerateRequest lowrank = Prompt("Hi", 2);
  (*lowrank.mutable_kv_compression()->mutable_demote())["lowrank"] = 4096;
  auto [lc, ls] = Generate(lowrank);
  ASSERT_TRUE(ls.ok()) << ls.error_message();
  ASSERT_EQ(engine().submitted().size(), 4u);
  EXPECT_TRUE(engine().submitted()[3].compression.demote.empty());
  EXPECT_EQ(engine().submitted()[3].compression.demote_lowrank, 4096);
  for (const auto& [name, tokens] :
       std::vector<std::pair<std::string, int64_t>>{{"int3", 8}, {"int8", -4}, {"lowrank", -1}}) {
    v1::GenerateRequest bad = Prompt("Hi", 2);
    (*bad.mutable_kv_compression()->mutable_demote())[name] = tokens;
    auto [xc, xs] = Generate(bad);
    EXPECT_EQ(xs.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(xs.error_message().find("kv_compression.demote." + name), std::string::npos) << xs.error_message();
  }
}

TEST_F(GrpcFrontendTest, CompleteWithTwoSeededSamplesAndStop) {
  Start();
  v1::GenerateRequest req;
  req.mutable_prompt_token_ids()->add_ids(50);
  auto* s = req.mutable_sampling();
  s->set_max_tokens(8);
  s->set_n(2);
  s->set_seed(11);
  s->set_temperature(0.7f);
  v1::CompleteResponse resp;
  auto ctx = Context();
  grpc::Status status = stub_->Complete(ctx.get(), req, &resp);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(resp.model(), "kvs-tiny");
  ASSERT_EQ(resp.choices_size(), 2);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(resp.choices(i).index(), i);
    EXPECT_EQ(resp.choices(i).text(), engine().ExpectedText(11, 0.7f, i, 8));
    EXPECT_EQ(resp.choices(i).finish_reason(), "length");
  }
  EXPECT_EQ(resp.usage().completion_tokens(), 16);

  v1::GenerateRequest stop = Prompt("x", 30);
  stop.mutable_sampling()->add_stop("brown");
  v1::CompleteResponse stopped;
  auto ctx2 = Context();
  ASSERT_TRUE(stub_->Complete(ctx2.get(), stop, &stopped).ok());
  EXPECT_EQ(stopped.choices(0).text(), "The quick ");
  EXPECT_EQ(stopped.choices(0).finish_reason(), "stop");
}

// vLLM's extras over gRPC reach the engine request as over HTTP (issue 30).
TEST_F(GrpcFrontendTest, VllmExtrasReachTheEngine) {
  Start();
  v1::GenerateRequest req = Prompt("abcdef", 30);
  auto* s = req.mutable_sampling();
  s->set_min_tokens(2);
  s->add_allowed_token_ids(7);
  s->add_allowed_token_ids(9);
  s->add_bad_words("q");
  s->set_truncate_prompt_tokens(2);
  s->add_stop("brown");
  s->set_include_stop_str_in_output(true);
  v1::CompleteResponse resp;
  auto ctx = Context();
  grpc::Status status = stub_->Complete(ctx.get(), req, &resp);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(resp.choices(0).text(), "The quick brown");
  EXPECT_EQ(resp.usage().prompt_tokens(), 2);
  const std::vector<engine::RequestSpec> specs = engine().submitted();
  ASSERT_FALSE(specs.empty());
  const engine::RequestSpec& spec = specs.back();
  EXPECT_EQ(spec.min_tokens, 2);
  EXPECT_EQ(spec.prompt_tokens, testing::FakeTokens("ef"));
  EXPECT_EQ(spec.sampling.allowed_token_ids, (std::vector<int32_t>{7, 9}));
  EXPECT_EQ(spec.sampling.bad_words, (std::vector<std::vector<int32_t>>{testing::FakeTokens("q")}));

  // best_of: unary Complete returns n of best_of samples and counts them all; the streaming
  // RPC refuses it.
  v1::GenerateRequest best = Prompt("x", 4);
  best.mutable_sampling()->set_best_of(3);
  best.mutable_sampling()->set_temperature(1.0f);
  auto ctx3 = Context();
  status = stub_->Complete(ctx3.get(), best, &resp);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(resp.choices_size(), 1);
  EXPECT_EQ(resp.usage().completion_tokens(), 12);
  auto [chunks, streamed] = Generate(best);
  EXPECT_EQ(streamed.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(streamed.error_message().starts_with("best_of")) << streamed.error_message();

  // Speculation: the per-request settings reach the engine, usage reports the counts (the
  // fake engine: one guess per token, half accepted), an unknown method names the field.
  v1::GenerateRequest spec_req = Prompt("x", 10);
  spec_req.mutable_speculative()->set_method("ngram");
  spec_req.mutable_speculative()->set_num_tokens(6);
  spec_req.mutable_speculative()->set_ngram_min(1);
  spec_req.mutable_speculative()->set_ngram_max(3);
  auto [spec_chunks, spec_status] = Generate(spec_req);
  ASSERT_TRUE(spec_status.ok()) << spec_status.error_message();
  ASSERT_TRUE(spec_chunks.back().has_usage());
  EXPECT_EQ(spec_chunks.back().usage().speculative_draft_tokens(), 10);
  EXPECT_EQ(spec_chunks.back().usage().speculative_accepted_tokens(), 5);
  const engine::SpeculativeRequest sr = engine().submitted().back().speculative;
  EXPECT_EQ(sr.method, config::SpeculativeMethod::kNgram);
  EXPECT_EQ(sr.num_tokens, 6);
  EXPECT_EQ(sr.ngram_min, 1);
  EXPECT_EQ(sr.ngram_max, 3);
  v1::ChatRequest chat_spec;
  auto* m = chat_spec.add_messages();
  m->set_role("user");
  m->set_content("hi");
  chat_spec.mutable_sampling()->set_max_tokens(2);
  chat_spec.mutable_speculative()->set_method("none");
  auto chat_ctx = Context();
  auto chat_reader = stub_->Chat(chat_ctx.get(), chat_spec);
  v1::GenerateChunk chat_chunk, read;
  while (chat_reader->Read(&read)) chat_chunk = read;
  ASSERT_TRUE(chat_reader->Finish().ok());
  EXPECT_EQ(engine().submitted().back().speculative.method, config::SpeculativeMethod::kNone);
  EXPECT_EQ(chat_chunk.usage().speculative_draft_tokens(), 0);
  v1::GenerateRequest bad_spec = Prompt("x", 4);
  bad_spec.mutable_speculative()->set_method("eagle");
  auto [bad_chunks, bad_status] = Generate(bad_spec);
  EXPECT_EQ(bad_status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(bad_status.error_message().starts_with("speculative.method"))
      << bad_status.error_message();
  v1::GenerateRequest draft_spec = Prompt("x", 4);
  draft_spec.mutable_speculative()->set_method("draft");
  auto [draft_chunks, draft_status] = Generate(draft_spec);
  ASSERT_TRUE(draft_status.ok()) << draft_status.error_message();
  EXPECT_EQ(engine().submitted().back().speculative.method, config::SpeculativeMethod::kDraft);

  v1::GenerateRequest bad = Prompt("x", 4);
  bad.mutable_sampling()->set_truncate_prompt_tokens(0);
  auto ctx2 = Context();
  status = stub_->Complete(ctx2.get(), bad, &resp);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(status.error_message().starts_with("truncate_prompt_tokens"))
      << status.error_message();
}

TEST_F(GrpcFrontendTest, ChatStreamsTheReply) {
  Start();
  v1::ChatRequest req;
  auto* m = req.add_messages();
  m->set_role("user");
  m->set_content("Hello");
  req.mutable_sampling()->set_max_tokens(4);
  req.mutable_sampling()->set_temperature(0.0f);
  auto ctx = Context();
  auto reader = stub_->Chat(ctx.get(), req);
  std::string text;
  v1::GenerateChunk c;
  bool usage = false;
  while (reader->Read(&c)) {
    text += c.text();
    usage |= c.has_usage();
  }
  ASSERT_TRUE(reader->Finish().ok());
  EXPECT_EQ(text, "The ");
  EXPECT_TRUE(usage);
  ASSERT_EQ(engine().submitted().size(), 1u);
  EXPECT_EQ(engine().submitted()[0].prompt_tokens[1], kFakeImStart);
}

// The text of a fake prompt's byte tokens (specials dropped).
std::string PromptText(const std::vector<int32_t>& ids) {
  std::string out;
  for (int32_t id : ids) {
    if (id >= kFakeByteOffset && id < kFakeByteOffset + 256) out.push_back(static_cast<char>(id - kFakeByteOffset));
  }
  return out;
}

v1::ChatRequest ToolRequest(const std::string& reply) {
  v1::ChatRequest req;
  auto* u = req.add_messages();
  u->set_role("user");
  u->set_content("Weather in Paris and Rome?");
  auto* a = req.add_messages();
  a->set_role("assistant");
  auto* call = a->add_tool_calls();
  call->set_id("call_1");
  call->set_name("get_weather");
  call->set_arguments(R"({"city": "Paris"})");
  auto* t = req.add_messages();
  t->set_role("tool");
  t->set_tool_call_id("call_1");
  t->set_content("21 C <<reply>>" + reply + "<</reply>>");
  auto* tool = req.add_tools();
  tool->set_name("get_weather");
  tool->set_description("Weather in a city");
  tool->set_parameters(R"({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})");
  req.mutable_sampling()->set_max_tokens(200);
  return req;
}

TEST_F(GrpcFrontendTest, ChatToolCallsRoundTrip) {
  TestServerOptions options;
  options.chat_formats.tools = chat::ToolCallFormat::kHermes;
  Start(std::move(options));
  const std::string rome = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n</tool_call>";
  for (const char* mode : {"", "auto", "required"}) {
    v1::ChatRequest req = ToolRequest(rome);
    if (*mode != 0) req.mutable_tool_choice()->set_mode(mode);
    auto ctx = Context();
    auto reader = stub_->Chat(ctx.get(), req);
    std::vector<v1::GenerateChunk> chunks;
    v1::GenerateChunk c;
    while (reader->Read(&c)) chunks.push_back(c);
    ASSERT_TRUE(reader->Finish().ok()) << mode;
    std::string text;
    std::vector<v1::ToolCall> calls;
    std::string finish;
    for (const auto& chunk : chunks) {
      text += chunk.text();
      calls.insert(calls.end(), chunk.tool_calls().begin(), chunk.tool_calls().end());
      if (!chunk.finish_reason().empty()) finish = chunk.finish_reason();
    }
    EXPECT_EQ(text, "") << mode;
    ASSERT_EQ(calls.size(), 1u) << mode;
    EXPECT_EQ(calls[0].name(), "get_weather");
    EXPECT_EQ(calls[0].arguments(), R"({"city":"Rome"})");
    EXPECT_TRUE(calls[0].id().starts_with("call_")) << calls[0].id();
    EXPECT_EQ(finish, "tool_calls");
  }
  // The tools, the earlier call and the tool result reached the template.
  const std::string prompt = PromptText(engine().submitted().back().prompt_tokens);
  EXPECT_NE(prompt.find(R"("name":"get_weather","description":"Weather in a city","parameters":{"type":"object")"),
            std::string::npos) << prompt;
  EXPECT_NE(prompt.find(R"(<tool_call>[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":{"city":"Paris"}}}])"),
            std::string::npos) << prompt;
  EXPECT_NE(prompt.find("tool\n21 C"), std::string::npos) << prompt;

  // tool_choice none: the same reply is content.
  v1::ChatRequest none = ToolRequest(rome);
  none.mutable_tool_choice()->set_mode("none");
  auto ctx = Context();
  auto reader = stub_->Chat(ctx.get(), none);
  std::string text;
  v1::GenerateChunk c;
  while (reader->Read(&c)) {
    text += c.text();
    EXPECT_EQ(c.tool_calls_size(), 0);
  }
  ASSERT_TRUE(reader->Finish().ok());
  EXPECT_EQ(text, rome);
}

TEST_F(GrpcFrontendTest, ChatToolErrorsNameTheField) {
  Start();  // no tool-call format: auto and required are refused, a named function is not
  struct Case {
    std::function<void(v1::ChatRequest&)> edit;
    std::string field;
  };
  const std::vector<Case> cases = {
      {[](v1::ChatRequest& r) { r.mutable_messages(2)->clear_tool_call_id(); }, "messages[2].tool_call_id"},
      {[](v1::ChatRequest& r) { r.mutable_messages(0)->set_tool_call_id("x"); }, "messages[0].tool_call_id"},
      {[](v1::ChatRequest& r) { r.mutable_messages(1)->mutable_tool_calls(0)->set_arguments("[1]"); },
       "messages[1].tool_calls[0].arguments"},
      {[](v1::ChatRequest& r) { r.mutable_tools(0)->set_parameters("{nope"); }, "tools[0].parameters"},
      {[](v1::ChatRequest& r) { r.mutable_tools(0)->clear_name(); }, "tools[0].name"},
      {[](v1::ChatRequest& r) { r.mutable_tool_choice()->set_function("get_time"); }, "tool_choice.function"},
      {[](v1::ChatRequest& r) { r.mutable_tool_choice()->set_mode("sometimes"); }, "tool_choice.mode"},
      {[](v1::ChatRequest& r) { r.mutable_tool_choice()->set_mode("required"); }, "tool_choice"},
      {[](v1::ChatRequest& r) { r.mutable_tool_choice()->set_mode("auto"); }, "tool_choice"},
      {[](v1::ChatRequest& r) {
         r.mutable_tool_choice()->set_function("get_weather");
         r.mutable_sampling()->mutable_structured()->set_regex("a");
       },
       "tool_choice"},
      {[](v1::ChatRequest& r) {
         r.clear_tools();
         r.mutable_tool_choice()->set_mode("required");
       },
       "tool_choice"},
  };
  for (const Case& k : cases) {
    v1::ChatRequest req = ToolRequest("x");
    k.edit(req);
    auto ctx = Context();
    auto reader = stub_->Chat(ctx.get(), req);
    v1::GenerateChunk c;
    while (reader->Read(&c)) {
    }
    const grpc::Status st = reader->Finish();
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << k.field;
    EXPECT_TRUE(st.error_message().starts_with(k.field + ":")) << k.field << " -> " << st.error_message();
  }
  // A named function needs no tool-call format: the output is its arguments, one call.
  v1::ChatRequest named = ToolRequest(R"({"city": "Oslo"})");
  named.mutable_tool_choice()->set_function("get_weather");
  auto ctx = Context();
  auto reader = stub_->Chat(ctx.get(), named);
  std::vector<v1::ToolCall> calls;
  v1::GenerateChunk c;
  while (reader->Read(&c)) calls.insert(calls.end(), c.tool_calls().begin(), c.tool_calls().end());
  ASSERT_TRUE(reader->Finish().ok());
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].name(), "get_weather");
  EXPECT_EQ(calls[0].arguments(), R"({"city": "Oslo"})");
}

TEST_F(GrpcFrontendTest, TokenizeDetokenizeAndListModels) {
  Start();
  v1::TokenizeRequest t;
  t.set_prompt("ab");
  v1::TokenizeResponse tr;
  auto c1 = Context();
  ASSERT_TRUE(stub_->Tokenize(c1.get(), t, &tr).ok());
  EXPECT_EQ(tr.count(), 3);
  EXPECT_EQ(tr.tokens(1), 100);
  EXPECT_EQ(tr.max_model_len(), 2048);

  v1::DetokenizeRequest d;
  d.add_tokens(100);
  d.add_tokens(101);
  v1::DetokenizeResponse dr;
  auto c2 = Context();
  ASSERT_TRUE(stub_->Detokenize(c2.get(), d, &dr).ok());
  EXPECT_EQ(dr.prompt(), "ab");

  v1::ListModelsResponse lm;
  auto c3 = Context();
  ASSERT_TRUE(stub_->ListModels(c3.get(), v1::ListModelsRequest(), &lm).ok());
  ASSERT_EQ(lm.models_size(), 1);
  EXPECT_EQ(lm.models(0).id(), "kvs-tiny");
  EXPECT_EQ(lm.models(0).max_model_len(), 2048);
}

TEST_F(GrpcFrontendTest, StatusCodes) {
  TestServerOptions o;
  o.tenants.push_back(MakeTenant("alpha", {"sk-a"}));
  o.tenants.back().allowed_policies = {config::CompressionPolicyKind::kFull};
  Start(o);
  v1::GenerateRequest bad = Prompt("x", 2);
  bad.mutable_sampling()->set_temperature(5.0f);
  auto [c1, s1] = Generate(bad, "sk-a");
  EXPECT_EQ(s1.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s1.error_message().find("temperature"), std::string::npos);

  auto [c2, s2] = Generate(Prompt("x", 2));
  EXPECT_EQ(s2.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  auto [c3, s3] = Generate(Prompt("x", 2), "sk-wrong");
  EXPECT_EQ(s3.error_code(), grpc::StatusCode::UNAUTHENTICATED);

  v1::GenerateRequest denied = Prompt("x", 2);
  denied.mutable_kv_compression()->set_policy("triattention");
  auto [c4, s4] = Generate(denied, "sk-a");
  EXPECT_EQ(s4.error_code(), grpc::StatusCode::PERMISSION_DENIED);

  v1::GenerateRequest unknown = Prompt("x", 2);
  unknown.set_model("other");
  auto [c5, s5] = Generate(unknown, "sk-a");
  EXPECT_EQ(s5.error_code(), grpc::StatusCode::NOT_FOUND);

  engine().FailNextSubmit(absl::ResourceExhaustedError("the waiting queue is full"));
  v1::CompleteResponse r;
  auto ctx = Context("sk-a");
  EXPECT_EQ(stub_->Complete(ctx.get(), Prompt("x", 2), &r).error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);

  v1::GenerateRequest no_prompt;
  auto [c6, s6] = Generate(no_prompt, "sk-a");
  EXPECT_EQ(s6.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s6.error_message().find("prompt"), std::string::npos);

  server_->app().frontend().StartDrain();
  auto [c7, s7] = Generate(Prompt("x", 2), "sk-a");
  EXPECT_EQ(s7.error_code(), grpc::StatusCode::UNAVAILABLE);
}

TEST_F(GrpcFrontendTest, ClientCancelAbortsTheEngineRequest) {
  Start();
  engine().SetPaused(true);
  v1::GenerateRequest req = Prompt("x", 50);
  req.set_request_id("cancel-me");
  auto ctx = Context();
  auto reader = stub_->Generate(ctx.get(), req);
  ASSERT_TRUE(engine().WaitForSubmitted(1, milliseconds(10000)));
  const auto cancelled = std::chrono::steady_clock::now();
  ctx->TryCancel();
  v1::GenerateChunk c;
  while (reader->Read(&c)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  auto aborted = engine().WaitForAbort("cancel-me", milliseconds(5000));
  ASSERT_TRUE(aborted.has_value());
  EXPECT_LT(*aborted - cancelled, milliseconds(100));
}

TEST_F(GrpcFrontendTest, AbortRpcEndsTheStreamWithAbort) {
  TestServerOptions o;
  o.tenants.push_back(MakeTenant("alpha", {"sk-a"}));
  o.tenants.push_back(MakeTenant("beta", {"sk-b"}));
  Start(o);
  engine().SetPaused(true);
  v1::GenerateRequest req = Prompt("x", 50);
  req.set_request_id("job-1");
  std::vector<v1::GenerateChunk> chunks;
  grpc::Status status;
  std::thread client([&] { std::tie(chunks, status) = Generate(req, "sk-a"); });
  ASSERT_TRUE(engine().WaitForSubmitted(1, milliseconds(10000)));

  v1::AbortRequest abort;
  abort.set_request_id("job-1");
  v1::AbortResponse resp;
  auto other = Context("sk-b");  // another tenant cannot see it
  ASSERT_TRUE(stub_->Abort(other.get(), abort, &resp).ok());
  EXPECT_FALSE(resp.found());
  auto mine = Context("sk-a");
  ASSERT_TRUE(stub_->Abort(mine.get(), abort, &resp).ok());
  EXPECT_TRUE(resp.found());
  client.join();
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_FALSE(chunks.empty());
  EXPECT_EQ(chunks.back().finish_reason(), "abort");
  EXPECT_EQ(chunks.back().request_id(), "job-1");
  EXPECT_TRUE(chunks.back().has_usage());
}

TEST_F(GrpcFrontendTest, HealthServiceAndReflectionAreOn) {
  Start();
  // grpc.health.v1.HealthCheckRequest{service: ""} is the empty message; the response
  // {status: SERVING} is field 1 = 1: bytes 08 01.
  std::string health;
  grpc::Status st = RawUnary("/grpc.health.v1.Health/Check", "", &health);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(health, std::string("\x08\x01", 2));
  health.clear();
  ASSERT_TRUE(RawUnary("/grpc.health.v1.Health/Check", std::string("\x0a\x12kvserve.v1.KvServe", 20), &health).ok());
  EXPECT_EQ(health, std::string("\x08\x01", 2));

  // Reflection: ServerReflectionRequest{list_services: ""} (field 7) on the bidi stream.
  grpc::GenericStub generic(channel_);
  grpc::CompletionQueue cq;
  grpc::ClientContext ctx;
  auto call = generic.PrepareCall(&ctx, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", &cq);
  void* tag;
  bool ok;
  call->StartCall(reinterpret_cast<void*>(1));
  ASSERT_TRUE(cq.Next(&tag, &ok) && ok);
  grpc::Slice req_slice(std::string("\x3a\x00", 2));
  grpc::ByteBuffer req(&req_slice, 1);
  call->Write(req, reinterpret_cast<void*>(2));
  ASSERT_TRUE(cq.Next(&tag, &ok) && ok);
  grpc::ByteBuffer reply;
  call->Read(&reply, reinterpret_cast<void*>(3));
  ASSERT_TRUE(cq.Next(&tag, &ok) && ok);
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(reply.Dump(&slices).ok());
  std::string bytes;
  for (const auto& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  EXPECT_NE(bytes.find("kvserve.v1.KvServe"), std::string::npos);
  EXPECT_NE(bytes.find("grpc.health.v1.Health"), std::string::npos);
  call->WritesDone(reinterpret_cast<void*>(4));
  ASSERT_TRUE(cq.Next(&tag, &ok));
  grpc::Status status;
  call->Finish(&status, reinterpret_cast<void*>(5));
  ASSERT_TRUE(cq.Next(&tag, &ok));
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }

  // Draining flips health to NOT_SERVING (2) while an in-flight call finishes.
  engine().SetPaused(true);
  std::thread client([this] { Generate(Prompt("x", 5)); });
  ASSERT_TRUE(engine().WaitForSubmitted(1, milliseconds(10000)));
  std::thread drain([this] {
    server_->app().Drain([](milliseconds d) {
      std::this_thread::sleep_for(d);
      return false;
    });
  });
  bool not_serving = false;
  for (int i = 0; i < 500 && !not_serving; ++i) {
    health.clear();
    RawUnary("/grpc.health.v1.Health/Check", "", &health);
    not_serving = health == std::string("\x08\x02", 2);
    if (!not_serving) std::this_thread::sleep_for(milliseconds(10));
  }
  EXPECT_TRUE(not_serving);
  engine().SetPaused(false);
  client.join();
  drain.join();
}

}  // namespace
}  // namespace kvserve::server::testing
