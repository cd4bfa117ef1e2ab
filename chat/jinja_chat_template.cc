#include "chat/jinja_chat_template.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "jinja/template.h"

namespace kvserve::chat {
namespace {

class JinjaChatTemplate final : public ChatTemplate {
 public:
  JinjaChatTemplate(jinja::Template tmpl, std::string source, const ChatTemplateTokens& tokens,
                    bool renders_bos, std::function<absl::Time()> clock)
      : template_(std::move(tmpl)), source_(std::move(source)), tokens_(tokens), renders_bos_(renders_bos),
        strftime_now_(jinja::MakeStrftimeNow(std::move(clock))) {}

  std::string_view name() const override { return "jinja"; }
  bool renders_bos() const override { return renders_bos_; }
  std::string_view source() const override { return source_; }

 protected:
  absl::StatusOr<std::string> DoRender(std::span<const ChatMessage> messages,
                                       const ChatRenderOptions& options) const override {
    jinja::Array list;
    list.reserve(messages.size());
    for (size_t i = 0; i < messages.size(); ++i) {
      const ChatMessage& m = messages[i];
      jinja::Object msg;
      msg.items.emplace_back("role", jinja::Value(m.role));
      msg.items.emplace_back("content", jinja::Value(m.content));
      if (!m.name.empty()) msg.items.emplace_back("name", jinja::Value(m.name));
      if (!m.tool_call_id.empty()) msg.items.emplace_back("tool_call_id", jinja::Value(m.tool_call_id));
      if (!m.tool_calls_json.empty()) {
        auto calls = jinja::ValueFromJson(m.tool_calls_json);
        if (!calls.ok() || !calls->is_array()) {
          return absl::InvalidArgumentError(
              absl::StrCat("messages[", i, "].tool_calls: not a JSON array"));
        }
        msg.items.emplace_back("tool_calls", *std::move(calls));
      }
      if (m.reasoning_content) {
        msg.items.emplace_back("reasoning_content", jinja::Value(*m.reasoning_content));
      }
      list.emplace_back(std::move(msg));
    }
    jinja::Object context;
    context.items.emplace_back("messages", jinja::Value(std::move(list)));
    if (!options.tools_json.empty()) {
      auto tools = jinja::ValueFromJson(options.tools_json);
      if (!tools.ok() || !tools->is_array()) return absl::InvalidArgumentError("tools: not a JSON array");
      context.items.emplace_back("tools", *std::move(tools));
    }
    context.items.emplace_back("add_generation_prompt", jinja::Value(options.add_generation_prompt));
    context.items.emplace_back("bos_token", jinja::Value(tokens_.bos));
    context.items.emplace_back("eos_token", jinja::Value(tokens_.eos));
    context.items.emplace_back("strftime_now", strftime_now_);
    // chat_template_kwargs last: as in vLLM they are extra template variables and may
    // override the ones above (e.g. a request's own `date_string` or `enable_thinking`).
    if (!options.template_kwargs_json.empty()) {
      auto kwargs = jinja::ValueFromJson(options.template_kwargs_json);
      if (!kwargs.ok() || !kwargs->is_object()) {
        return absl::InvalidArgumentError("chat_template_kwargs: not a JSON object");
      }
      for (auto& [key, value] : kwargs->object().items) context.Set(key, value);
    }
    return template_.Render(context);
  }

 private:
  jinja::Template template_;
  std::string source_;
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
  return std::make_unique<JinjaChatTemplate>(*std::move(tmpl), std::string(jinja_text), tokens, renders_bos, std::move(clock));
}

}  // namespace kvserve::chat
