#include "tokenizer/jinja_chat_template.h"

#include <string>
#include <utility>

#include "jinja/template.h"

namespace kvserve::tokenizer {
namespace {

class JinjaChatTemplate final : public ChatTemplate {
 public:
  JinjaChatTemplate(jinja::Template tmpl, const ChatTemplateTokens& tokens, bool renders_bos,
                    std::function<absl::Time()> clock)
      : template_(std::move(tmpl)), tokens_(tokens), renders_bos_(renders_bos),
        strftime_now_(jinja::MakeStrftimeNow(std::move(clock))) {}

  absl::StatusOr<std::string> Render(std::span<const ChatMessage> messages,
                                     bool add_generation_prompt) const override {
    jinja::Array list;
    list.reserve(messages.size());
    for (const ChatMessage& m : messages) {
      jinja::Object msg;
      msg.items.emplace_back("role", jinja::Value(m.role));
      msg.items.emplace_back("content", jinja::Value(m.content));
      list.emplace_back(std::move(msg));
    }
    jinja::Object context;
    context.items.emplace_back("messages", jinja::Value(std::move(list)));
    context.items.emplace_back("add_generation_prompt", jinja::Value(add_generation_prompt));
    context.items.emplace_back("bos_token", jinja::Value(tokens_.bos));
    context.items.emplace_back("eos_token", jinja::Value(tokens_.eos));
    context.items.emplace_back("strftime_now", strftime_now_);
    return template_.Render(context);
  }
  std::string_view name() const override { return "jinja"; }
  bool renders_bos() const override { return renders_bos_; }

 private:
  jinja::Template template_;
  ChatTemplateTokens tokens_;
  bool renders_bos_;
  jinja::Value strftime_now_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ChatTemplate>> MakeJinjaChatTemplate(
    std::string_view jinja_text, const ChatTemplateTokens& tokens,
    std::function<absl::Time()> clock) {
  auto tmpl = jinja::Template::Compile(jinja_text);
  if (!tmpl.ok()) {
    return absl::InvalidArgumentError(
        std::string("the model's chat template does not compile: ") + std::string(tmpl.status().message()));
  }
  // Templates that write bos_token themselves get a prompt encoded without special tokens
  // (as transformers' apply_chat_template(tokenize=True) does), so BOS is not doubled.
  const bool renders_bos = jinja_text.find("bos_token") != std::string_view::npos;
  return std::make_unique<JinjaChatTemplate>(*std::move(tmpl), tokens, renders_bos, std::move(clock));
}

}  // namespace kvserve::tokenizer
