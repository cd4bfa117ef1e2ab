// Chat templates, rendered natively. Hugging Face ships chat templates as Jinja source in
// tokenizer_config.json; rather than embed a Jinja interpreter we recognise the common families
// by distinctive markers in that source and render them in C++:
//
//   family    marker(s) in the Jinja text          rendered shape (user "Hi", system "sys")
//   llama3    <|start_header_id|> and <|eot_id|>   <|begin_of_text|><|start_header_id|>user
//                                                  <|end_header_id|>\n\nHi<|eot_id|>
//   chatml    <|im_start|> (Qwen, kvs-tiny, ...)   <|im_start|>user\nHi<|im_end|>\n
//   llama2    [INST] and <<SYS>>                   <s>[INST] <<SYS>>\nsys\n<</SYS>>\n\nHi [/INST]
//   mistral   [INST] without <<SYS>>               <s>[INST] sys\n\nHi [/INST]
//   kvs-tiny  the bundled model's exact template   (chatml)
//
// The choice is the config option model.chat_template: "auto" recognises the family from the
// template text; a family name forces it. An unrecognised template is a startup error that
// names the option.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <string_view>

#include "absl/status/statusor.h"

namespace kvserve::chat {

struct ChatMessage {
  std::string role;  // "system", "user", "assistant", "tool" (chatml and llama3 accept any role)
  std::string content;
  ChatMessage() = default;
  ChatMessage(std::string r, std::string c) : role(std::move(r)), content(std::move(c)) {}
  // Members only some templates read; absent ("" / nullopt) members are not set at all, so
  // `message.name is defined` is false for them, as in transformers.
  std::string name;                              // optional participant name
  std::string tool_call_id;                      // role "tool": the call this result answers
  std::optional<std::string> reasoning_content;  // assistant: earlier turns' reasoning
  // Assistant tool calls as a JSON array of {"id", "type", "function": {"name", "arguments"}},
  // `arguments` already an object (vLLM parses OpenAI's argument strings before rendering,
  // as transformers' templates expect). "": none.
  std::string tool_calls_json;
};

// What a render needs besides the messages. JSON members are text ("" when absent) so that this
// header stays free of JSON types; the Jinja template converts them once per render.
struct ChatRenderOptions {
  bool add_generation_prompt = true;
  // vLLM/transformers `continue_final_message`: render without a generation prompt and cut the
  // text right after the final message's content, so the model continues that message.
  bool continue_final_message = false;
  std::string tools_json;            // the request's `tools` (JSON array), "" for none
  std::string template_kwargs_json;  // `chat_template_kwargs` (JSON object), "" for none
};

// Token texts some templates write into the prompt; empty means the family's usual token.
struct ChatTemplateTokens {
  std::string bos;
  std::string eos;
};

inline constexpr std::string_view kChatTemplateOption = "model.chat_template";
inline constexpr std::string_view kChatTemplateValues =
    "auto|chatml|llama3|llama2|mistral|kvs-tiny";

// The bundled model's template (models/kvs-tiny/tokenizer_config.json).
inline constexpr std::string_view kKvsTinyChatTemplate =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] "
    "+ '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ "
    "'<|im_start|>assistant\\n' }}{% endif %}";

class ChatTemplate {
 public:
  virtual ~ChatTemplate() = default;
  // InvalidArgument for conversations the template rejects (empty, or roles out of order for
  // llama2/mistral, which require user/assistant alternation after an optional system message),
  // for continue_final_message together with add_generation_prompt, and when the final message
  // cannot be found in the rendered text (the template rewrote it).
  absl::StatusOr<std::string> Render(std::span<const ChatMessage> messages,
                                     const ChatRenderOptions& options) const;
  absl::StatusOr<std::string> Render(std::span<const ChatMessage> messages,
                                     bool add_generation_prompt) const {
    ChatRenderOptions options;
    options.add_generation_prompt = add_generation_prompt;
    return Render(messages, options);
  }
  // "chatml", "llama3", "llama2", "mistral" or "kvs-tiny".
  virtual std::string_view name() const = 0;
  // True when the rendered text already carries the BOS token, so the prompt must be encoded
  // with add_special=false (else BOS would appear twice).
  virtual bool renders_bos() const = 0;
  // The template's source ("" for the native families): parsers detect their formats from it.
  virtual std::string_view source() const { return {}; }

 protected:
  // Renders without continue_final_message (Render handles it).
  virtual absl::StatusOr<std::string> DoRender(std::span<const ChatMessage> messages,
                                               const ChatRenderOptions& options) const = 0;
};

// transformers' continue_final_message cut: `rendered` up to the end of the last occurrence of
// `final_content` (stripped); its trailing whitespace is kept only where the template kept it.
absl::StatusOr<std::string> CutAfterFinalMessage(std::string rendered, std::string_view final_content);

// `config_value` is model.chat_template; `jinja_text` the model's template ("" if it has none).
absl::StatusOr<std::unique_ptr<ChatTemplate>> SelectChatTemplate(
    std::string_view config_value, std::string_view jinja_text,
    const ChatTemplateTokens& tokens = {});

}  // namespace kvserve::chat
