#include "server/core/request_builder.h"

#include <gtest/gtest.h>

#include <functional>

#include "server/errors/error_mapping.h"
#include "tests/unit/server/fake_text_codec.h"

namespace kvserve::server {
namespace {

using testing::FakeTextCodec;
using testing::FakeTokens;
using testing::kFakeBos;

class RequestBuilderTest : public ::testing::Test {
 protected:
  GenerationRequest Completion(std::string prompt) {
    GenerationRequest r;
    r.prompts.push_back(PromptInput{std::move(prompt), {}, false});
    return r;
  }
  absl::StatusOr<std::vector<PreparedPrompt>> Build(const GenerationRequest& r,
                                                    const config::TenantConfig* tenant = nullptr) {
    return BuildRequests(r, tenant, codec_, limits_, "cmpl-1");
  }
  FakeTextCodec codec_;
  ModelLimits limits_{"kvs-tiny", 32, {}};
};

TEST_F(RequestBuilderTest, TokenizesAndFillsTheSpec) {
  GenerationRequest r = Completion("abc");
  r.max_tokens = 4;
  r.n = 2;
  r.sampling.temperature = 0.0f;
  r.stop_token_ids = {7};
  r.priority = 5;
  auto built = Build(r);
  ASSERT_TRUE(built.ok()) << built.status();
  ASSERT_EQ(built->size(), 1u);
  const engine::RequestSpec& spec = (*built)[0].spec;
  EXPECT_EQ(spec.request_id, "cmpl-1");
  std::vector<int32_t> want = {kFakeBos};
  for (int32_t id : FakeTokens("abc")) want.push_back(id);
  EXPECT_EQ(spec.prompt_tokens, want);
  EXPECT_EQ(spec.max_tokens, 4);
  EXPECT_EQ(spec.n, 2);
  EXPECT_EQ(spec.stop_token_ids, std::vector<int32_t>{7});
  EXPECT_EQ(spec.priority, 5);
  EXPECT_EQ(spec.tenant, "");
}

TEST_F(RequestBuilderTest, DefaultMaxTokensDependOnTheEndpoint) {
  auto completion = Build(Completion("abc"));
  ASSERT_TRUE(completion.ok());
  EXPECT_EQ((*completion)[0].spec.max_tokens, 16);
  GenerationRequest chat;
  chat.kind = RequestKind::kChat;
  chat.messages = {{"user", "hi"}};
  auto c = Build(chat);
  ASSERT_TRUE(c.ok()) << c.status();
  // The rest of the context: 32 minus the rendered prompt.
  EXPECT_EQ((*c)[0].spec.max_tokens + static_cast<int>((*c)[0].spec.prompt_tokens.size()), 32);
}

TEST_F(RequestBuilderTest, SeveralPromptsGetNumberedEngineIds) {
  GenerationRequest r = Completion("a");
  r.prompts.push_back(PromptInput{{}, {10, 11}, true});
  r.echo = true;
  auto built = Build(r);
  ASSERT_TRUE(built.ok());
  ASSERT_EQ(built->size(), 2u);
  EXPECT_EQ((*built)[0].spec.request_id, "cmpl-1-0");
  EXPECT_EQ((*built)[1].spec.request_id, "cmpl-1-1");
  EXPECT_EQ((*built)[1].spec.prompt_tokens, (std::vector<int32_t>{10, 11}));
  EXPECT_EQ((*built)[0].echo_text, "a");
  EXPECT_EQ((*built)[1].echo_text, std::string("\x07\x08"));
}

TEST_F(RequestBuilderTest, UnknownModelIsNotFound) {
  GenerationRequest r = Completion("a");
  r.model = "gpt-4";
  auto built = Build(r);
  EXPECT_EQ(built.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(std::string(built.status().message()).find("gpt-4"), std::string::npos);
  r.model = "kvs-tiny";
  EXPECT_TRUE(Build(r).ok());
}

TEST_F(RequestBuilderTest, RangeErrorsNameTheField) {
  struct Case {
    const char* param;
    std::function<void(GenerationRequest&)> mutate;
  };
  const std::vector<Case> cases = {
      {"n", [](auto& r) { r.n = 0; }},
      {"max_tokens", [](auto& r) { r.max_tokens = 0; }},
      {"temperature", [](auto& r) { r.sampling.temperature = 2.5f; }},
      {"top_p", [](auto& r) { r.sampling.top_p = 0.0f; }},
      {"min_p", [](auto& r) { r.sampling.min_p = 1.5f; }},
      {"presence_penalty", [](auto& r) { r.sampling.presence_penalty = 3.0f; }},
      {"frequency_penalty", [](auto& r) { r.sampling.frequency_penalty = -3.0f; }},
      {"repetition_penalty", [](auto& r) { r.sampling.repetition_penalty = 0.0f; }},
      {"stop", [](auto& r) { r.stop = {""}; }},
      {"stop_token_ids", [](auto& r) { r.stop_token_ids = {9999}; }},
      {"logit_bias", [](auto& r) { r.sampling.logit_bias = {{9999, 1.0f}}; }},
      {"min_tokens", [](auto& r) { r.min_tokens = -1; }},
      {"kv_compression.budget", [](auto& r) { r.compression.budget = 0; }},
      {"kv_compression.ratio", [](auto& r) { r.compression.ratio = 1.5; }},
      {"prompt", [](auto& r) { r.prompts = {PromptInput{{}, {-1}, true}}; }},
      {"prompt", [](auto& r) { r.prompts = {PromptInput{{}, {}, true}}; }},
  };
  for (const Case& c : cases) {
    GenerationRequest r = Completion("abc");
    c.mutate(r);
    auto built = Build(r);
    EXPECT_EQ(built.status().code(), absl::StatusCode::kInvalidArgument) << c.param;
    EXPECT_EQ(ErrorParam(built.status()), c.param) << built.status();
  }
}

TEST_F(RequestBuilderTest, ContextLengthChecks) {
  GenerationRequest too_long = Completion(std::string(40, 'x'));
  auto a = Build(too_long);
  EXPECT_EQ(ErrorParam(a.status()), "prompt");
  EXPECT_NE(std::string(a.status().message()).find("maximum context length is 32"), std::string::npos);

  GenerationRequest over = Completion(std::string(20, 'x'));  // 21 tokens with BOS
  over.max_tokens = 12;
  auto b = Build(over);
  EXPECT_EQ(ErrorParam(b.status()), "max_tokens");
  over.max_tokens = 11;
  EXPECT_TRUE(Build(over).ok());
}

// Every configurable per-request limit is a 400 naming the field, at limit + 1 and not at
// the limit.
TEST_F(RequestBuilderTest, ConfigurableLimitsNameTheField) {
  config::RequestLimits& l = limits_.requests;
  l.max_prompts = 2;
  l.max_messages = 2;
  l.max_n = 3;
  l.max_stop_strings = 2;
  l.max_stop_string_bytes = 4;
  l.max_generated_tokens = 48;  // n = 3 at the default 16 tokens fits
  l.max_logprobs = 2;
  l.max_logit_bias = 1;
  struct Case {
    const char* param;
    std::function<void(GenerationRequest&)> at_limit;
    std::function<void(GenerationRequest&)> over;
  };
  const PromptInput p{"a", {}, false};
  const std::vector<Case> cases = {
      {"prompt", [&](auto& r) { r.prompts = {p, p}; }, [&](auto& r) { r.prompts = {p, p, p}; }},
      {"n", [](auto& r) { r.n = 3; }, [](auto& r) { r.n = 4; }},
      {"stop", [](auto& r) { r.stop = {"a", "b"}; }, [](auto& r) { r.stop = {"a", "b", "c"}; }},
      {"stop", [](auto& r) { r.stop = {"abcd"}; }, [](auto& r) { r.stop = {"abcde"}; }},
      {"max_tokens", [](auto& r) { r.n = 2; r.max_tokens = 24; }, [](auto& r) { r.n = 2; r.max_tokens = 25; }},
      {"logprobs", [](auto& r) { r.sampling.logprobs = 2; }, [](auto& r) { r.sampling.logprobs = 3; }},
      {"logit_bias", [](auto& r) { r.sampling.logit_bias = {{1, 1.0f}}; },
       [](auto& r) { r.sampling.logit_bias = {{1, 1.0f}, {2, 1.0f}}; }},
  };
  for (const Case& c : cases) {
    GenerationRequest ok = Completion("abc");
    c.at_limit(ok);
    EXPECT_TRUE(Build(ok).ok()) << c.param << ": " << Build(ok).status();
    GenerationRequest bad = Completion("abc");
    c.over(bad);
    auto built = Build(bad);
    EXPECT_EQ(built.status().code(), absl::StatusCode::kInvalidArgument) << c.param;
    EXPECT_EQ(ErrorParam(built.status()), c.param) << built.status();
  }
  GenerationRequest chat;
  chat.kind = RequestKind::kChat;
  chat.messages = {{"system", "s"}, {"user", "u"}, {"assistant", "a"}};
  EXPECT_EQ(ErrorParam(Build(chat).status()), "messages");
}

TEST_F(RequestBuilderTest, TenantPolicyPriorityAndCacheIsolation) {
  config::TenantConfig t;
  t.name = "alpha";
  t.priority = 3;
  t.allowed_policies = {config::CompressionPolicyKind::kFull, config::CompressionPolicyKind::kStreamingLlm};
  GenerationRequest r = Completion("a");
  r.compression.policy = config::CompressionPolicyKind::kTriAttention;
  auto denied = Build(r, &t);
  EXPECT_EQ(denied.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(std::string(denied.status().message()).find("triattention"), std::string::npos);

  r.compression.policy = config::CompressionPolicyKind::kStreamingLlm;
  r.cache_salt = "conv";
  auto ok = Build(r, &t);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ((*ok)[0].spec.tenant, "alpha");
  EXPECT_EQ((*ok)[0].spec.priority, 3);
  EXPECT_EQ((*ok)[0].spec.cache_salt, "alpha\x1f" "conv");

  t.prefix_cache_group = "shared";
  r.cache_salt.clear();
  r.priority = -1;
  auto grouped = Build(r, &t);
  ASSERT_TRUE(grouped.ok());
  EXPECT_EQ((*grouped)[0].spec.cache_salt, "shared");
  EXPECT_EQ((*grouped)[0].spec.priority, -1);
}

TEST_F(RequestBuilderTest, ReturnLogprobsAsksTheEngineForOneAlternative) {
  GenerationRequest r = Completion("a");
  r.return_logprobs = true;
  auto built = Build(r);
  ASSERT_TRUE(built.ok());
  EXPECT_EQ((*built)[0].spec.sampling.logprobs, 1);
}

// vLLM's extras that request_builder resolves: truncate_prompt_tokens keeps the last N prompt
// tokens (and an echo shows what was kept), bad_words become token sequences (alone and after a
// space), allowed_token_ids are checked against the vocabulary.
TEST_F(RequestBuilderTest, TruncatePromptTokensKeepsTheLastTokens) {
  GenerationRequest r = Completion("abcdef");
  r.truncate_prompt_tokens = 3;
  r.echo = true;
  auto built = Build(r);
  ASSERT_TRUE(built.ok()) << built.status();
  EXPECT_EQ((*built)[0].spec.prompt_tokens, FakeTokens("def"));
  EXPECT_EQ((*built)[0].echo_text, "def");
  r.truncate_prompt_tokens = 100;  // longer than the prompt: all of it (with BOS)
  built = Build(r);
  ASSERT_TRUE(built.ok());
  EXPECT_EQ((*built)[0].spec.prompt_tokens.size(), 7u);
  EXPECT_EQ((*built)[0].echo_text, "abcdef");
  r.truncate_prompt_tokens = 0;
  auto bad = Build(r);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(ErrorParam(bad.status()), "truncate_prompt_tokens");
}

TEST_F(RequestBuilderTest, BadWordsBecomeTokenSequences) {
  GenerationRequest r = Completion("abc");
  // Byte tokens: " xy" is one token longer than "xy", so only the word alone is banned (vLLM
  // adds the spaced form only when it is as long, i.e. a word token of its own); leading
  // spaces are stripped, duplicates dropped.
  r.bad_words = {"xy", "  z", "z"};
  auto built = Build(r);
  ASSERT_TRUE(built.ok()) << built.status();
  const auto& words = (*built)[0].spec.sampling.bad_words;
  const std::vector<std::vector<int32_t>> want = {FakeTokens("xy"), FakeTokens("z")};
  EXPECT_EQ(words, want);
}

TEST_F(RequestBuilderTest, AllowedTokenIdsMustBeInTheVocabulary) {
  GenerationRequest r = Completion("abc");
  r.sampling.allowed_token_ids = {5, testing::kFakeVocabSize};
  auto built = Build(r);
  ASSERT_FALSE(built.ok());
  EXPECT_EQ(ErrorParam(built.status()), "allowed_token_ids");
  r.sampling.allowed_token_ids = {5, 6};
  built = Build(r);
  ASSERT_TRUE(built.ok()) << built.status();
  EXPECT_EQ((*built)[0].spec.sampling.allowed_token_ids, (std::vector<int32_t>{5, 6}));
}

}  // namespace
}  // namespace kvserve::server
