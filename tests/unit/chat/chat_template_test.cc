#include "chat/chat_template.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/unit/tokenizer/test_util.h"

namespace kvserve::chat {
namespace {

using tokenizer::testing::FixturePath;
using ::testing::HasSubstr;
using tokenizer::testing::ReadFileOrDie;

std::string Jinja(const std::string& name) {
  return ReadFileOrDie(FixturePath("chat_templates/" + name + ".jinja"));
}

std::unique_ptr<ChatTemplate> Select(std::string_view value, const std::string& jinja,
                                     const ChatTemplateTokens& tokens = {}) {
  auto t = SelectChatTemplate(value, jinja, tokens);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *std::move(t) : nullptr;
}

const std::vector<ChatMessage> kConversation = {
    {"system", "You are terse."},
    {"user", "Hi there "},
    {"assistant", " Hello! "},
    {"user", "Bye"},
};

// auto renders the model's own template with the Jinja interpreter; the rendering tests below
// check it reproduces what each family's native renderer writes.
TEST(ChatTemplate, AutoRendersTheModelsOwnTemplate) {
  for (const char* name : {"llama3", "llama2", "mistral", "chatml", "qwen2", "qwen2_5", "kvs_tiny",
                           "gemma_unsupported"})
    EXPECT_EQ(Select("auto", Jinja(name))->name(), "jinja") << name;
  EXPECT_EQ(std::string(kKvsTinyChatTemplate), Jinja("kvs_tiny"));
}

TEST(ChatTemplate, ChatmlRendering) {
  const auto t = Select("auto", Jinja("chatml"));
  auto out = t->Render(kConversation, /*add_generation_prompt=*/true);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(*out,
            "<|im_start|>system\nYou are terse.<|im_end|>\n"
            "<|im_start|>user\nHi there <|im_end|>\n"
            "<|im_start|>assistant\n Hello! <|im_end|>\n"
            "<|im_start|>user\nBye<|im_end|>\n"
            "<|im_start|>assistant\n");
  EXPECT_FALSE(t->renders_bos());
  auto no_prompt = t->Render(std::vector<ChatMessage>{{"user", "x"}}, false);
  EXPECT_EQ(*no_prompt, "<|im_start|>user\nx<|im_end|>\n");
}

TEST(ChatTemplate, QwenDefaultSystemPromptComesFromTheTemplate) {
  const std::vector<ChatMessage> user_only = {{"user", "Hi"}};
  auto qwen2 = Select("auto", Jinja("qwen2"))->Render(user_only, true);
  EXPECT_EQ(*qwen2,
            "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  auto qwen25 = Select("auto", Jinja("qwen2_5"))->Render(user_only, true);
  EXPECT_THAT(*qwen25, ::testing::StartsWith(
                           "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a "
                           "helpful assistant.<|im_end|>\n<|im_start|>user\nHi"));
  // An explicit system message replaces the default.
  auto with_system = Select("auto", Jinja("qwen2"))->Render(kConversation, false);
  EXPECT_THAT(*with_system, ::testing::StartsWith("<|im_start|>system\nYou are terse.<|im_end|>"));
  // kvs-tiny has no default system prompt.
  auto tiny = Select("kvs-tiny", Jinja("kvs_tiny"))->Render(user_only, true);
  EXPECT_EQ(*tiny, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplate, Llama3Rendering) {
  const auto t = Select("auto", Jinja("llama3"));
  auto out = t->Render(kConversation, true);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(*out,
            "<|begin_of_text|>"
            "<|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_TRUE(t->renders_bos());
}

TEST(ChatTemplate, Llama2Rendering) {
  const auto t = Select("auto", Jinja("llama2"));
  auto out = t->Render(kConversation, true);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out,
            "<s>[INST] <<SYS>>\nYou are terse.\n<</SYS>>\n\nHi there [/INST] Hello! </s>"
            "<s>[INST] Bye [/INST]");
  auto no_system = t->Render(std::vector<ChatMessage>{{"user", " q "}}, true);
  EXPECT_EQ(*no_system, "<s>[INST] q [/INST]");
  EXPECT_TRUE(t->renders_bos());
}

TEST(ChatTemplate, MistralRendering) {
  // The model's own template refuses a system message (it raises in Jinja); the error names
  // the template line.
  auto own = Select("auto", Jinja("mistral"))->Render(kConversation, true);
  ASSERT_FALSE(own.ok());
  EXPECT_THAT(std::string(own.status().message()), HasSubstr("template line 1: Conversation roles must alternate"));
  // The native "mistral" family (an override) folds the system prompt into the first turn.
  const auto t = Select("mistral", Jinja("mistral"));
  auto out = t->Render(kConversation, true);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, "<s>[INST] You are terse.\n\nHi there  [/INST] Hello! </s>[INST] Bye [/INST]");
  // The model's own BOS/EOS texts are used when given.
  auto custom = Select("mistral", "", {.bos = "<BOS>", .eos = "<EOS>"})
                    ->Render(std::vector<ChatMessage>{{"user", "a"}, {"assistant", "b"}}, false);
  EXPECT_EQ(*custom, "<BOS>[INST] a [/INST]b<EOS>");
}

TEST(ChatTemplate, ASystemMessageAloneIsAConversation) {
  const std::vector<ChatMessage> system_only = {{"system", "Be brief."}};
  EXPECT_EQ(*Select("llama2", "")->Render(system_only, true),
            "<s>[INST] <<SYS>>\nBe brief.\n<</SYS>> [/INST]");
  EXPECT_EQ(*Select("mistral", "")->Render(system_only, true), "<s>[INST] Be brief.\n\n [/INST]");
  for (const char* family : {"chatml", "llama3", "llama2", "mistral", "kvs-tiny"}) {
    auto out = Select(family, "")->Render(system_only, true);
    ASSERT_TRUE(out.ok()) << family << ": " << out.status();
    EXPECT_THAT(*out, HasSubstr("Be brief.")) << family;
  }
}

TEST(ChatTemplate, RoleOrderAndEmptyConversationsAreRejected) {
  const std::vector<ChatMessage> two_users = {{"user", "a"}, {"user", "b"}};
  for (const char* family : {"llama2", "mistral"}) {
    auto out = Select(family, "")->Render(two_users, true);
    ASSERT_FALSE(out.ok()) << family;
    EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(out.status().message()), HasSubstr("must alternate"));
  }
  auto starts_with_assistant =
      Select("llama2", "")
          ->Render(std::vector<ChatMessage>{{"system", "s"}, {"assistant", "a"}}, true);
  EXPECT_FALSE(starts_with_assistant.ok());
  for (const char* family : {"chatml", "llama3", "llama2", "mistral", "kvs-tiny"}) {
    EXPECT_FALSE(Select(family, "")->Render({}, true).ok()) << family;
  }
  // chatml and llama3 take any role.
  EXPECT_TRUE(Select("chatml", "")->Render(std::vector<ChatMessage>{{"tool", "42"}}, true).ok());
}

TEST(ChatTemplate, ExplicitConfigOverridesRecognition) {
  EXPECT_EQ(Select("llama3", Jinja("chatml"))->name(), "llama3");
  EXPECT_EQ(Select("chatml", "")->name(), "chatml");
  EXPECT_EQ(Select("kvs-tiny", Jinja("gemma_unsupported"))->name(), "kvs-tiny");
}

TEST(ChatTemplate, ErrorsNameTheConfigOption) {
  auto broken = SelectChatTemplate("auto", "line one\n{% if messages %}never closed");
  ASSERT_FALSE(broken.ok());
  EXPECT_THAT(std::string(broken.status().message()), HasSubstr("template line 2"));
  EXPECT_THAT(std::string(broken.status().message()), HasSubstr("endif"));
  auto none = SelectChatTemplate("auto", "");
  ASSERT_FALSE(none.ok());
  EXPECT_THAT(std::string(none.status().message()), HasSubstr("has no chat template"));
  EXPECT_THAT(std::string(none.status().message()), HasSubstr("model.chat_template"));
  auto bad_value = SelectChatTemplate("vicuna", Jinja("chatml"));
  ASSERT_FALSE(bad_value.ok());
  EXPECT_THAT(std::string(bad_value.status().message()),
              HasSubstr("model.chat_template: unknown value \"vicuna\"; allowed: auto|chatml"));
}

// transformers' continue_final_message: the text ends right after the final message's content.
TEST(ChatTemplate, ContinueFinalMessageCutsAfterTheLastMessage) {
  ChatRenderOptions o;
  o.add_generation_prompt = false;
  o.continue_final_message = true;
  const std::vector<ChatMessage> conv = {{"user", "Name a fruit"}, {"assistant", "Sure: ap"}};
  auto chatml = Select("auto", Jinja("chatml"))->Render(conv, o);
  ASSERT_TRUE(chatml.ok()) << chatml.status();
  EXPECT_EQ(*chatml, "<|im_start|>user\nName a fruit<|im_end|>\n<|im_start|>assistant\nSure: ap");
  // llama3 strips message content: the trailing space the message had is not re-added.
  const std::vector<ChatMessage> spaced = {{"user", "q"}, {"assistant", "Well, "}};
  auto llama3 = Select("auto", Jinja("llama3"), {"<|begin_of_text|>", ""})->Render(spaced, o);
  ASSERT_TRUE(llama3.ok()) << llama3.status();
  EXPECT_TRUE(llama3->ends_with("<|start_header_id|>assistant<|end_header_id|>\n\nWell,")) << *llama3;
  // chatml keeps it.
  EXPECT_TRUE(Select("chatml", "")->Render(spaced, o)->ends_with("assistant\nWell, "));
  o.add_generation_prompt = true;
  auto both = Select("chatml", "")->Render(conv, o);
  ASSERT_FALSE(both.ok());
  EXPECT_THAT(std::string(both.status().message()), HasSubstr("continue_final_message"));
  EXPECT_FALSE(CutAfterFinalMessage("<user>x</user>", "not there").ok());
}

// Tools, tool calls, tool results, reasoning and chat_template_kwargs reach a Jinja template.
TEST(ChatTemplate, JinjaTemplateSeesToolsAndKwargs) {
  const std::string source =
      "{% for t in tools %}[tool {{ t.function.name }}]{% endfor %}"
      "{% for m in messages %}<{{ m.role }}{% if m.name is defined %} name={{ m.name }}{% endif %}>"
      "{% if m.reasoning_content is defined %}(r:{{ m.reasoning_content }}){% endif %}{{ m.content }}"
      "{% for c in m.tool_calls | default([]) %}{call {{ c.function.name }} {{ c.function.arguments | tojson }}}"
      "{% endfor %}{% if m.tool_call_id is defined %}[for {{ m.tool_call_id }}]{% endif %}{% endfor %}"
      "{% if enable_thinking is defined and not enable_thinking %}<think></think>{% endif %}";
  auto t = Select("auto", source);
  ChatMessage call{"assistant", ""};
  call.reasoning_content = "why";
  call.tool_calls_json = R"([{"id":"c1","type":"function","function":{"name":"f","arguments":{"b":1,"a":2}}}])";
  ChatMessage result{"tool", "42"};
  result.tool_call_id = "c1";
  result.name = "f";
  ChatRenderOptions o;
  o.tools_json = R"([{"type":"function","function":{"name":"f"}}])";
  o.template_kwargs_json = R"({"enable_thinking":false})";
  auto out = t->Render(std::vector<ChatMessage>{{"user", "u"}, call, result}, o);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, "[tool f]<user>u<assistant>(r:why){call f {\"b\": 1, \"a\": 2}}<tool name=f>42[for c1]"
                  "<think></think>");
  EXPECT_EQ(t->source(), source);
  o.template_kwargs_json = "[1]";
  EXPECT_FALSE(t->Render(std::vector<ChatMessage>{{"user", "u"}}, o).ok());
}

TEST(ChatTemplate, NativeFamiliesRefuseTools) {
  ChatRenderOptions o;
  o.tools_json = R"([{"type":"function","function":{"name":"f"}}])";
  auto out = Select("chatml", "")->Render(std::vector<ChatMessage>{{"user", "u"}}, o);
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(std::string(out.status().message()), HasSubstr("cannot render tools"));
  EXPECT_THAT(std::string(out.status().message()), HasSubstr("model.chat_template=auto"));
}

}  // namespace
}  // namespace kvserve::chat
