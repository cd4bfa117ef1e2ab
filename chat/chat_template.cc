#include "chat/chat_template.h"

#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/check.h"
#include "chat/jinja_chat_template.h"
#include "tokenizer/utf8.h"

namespace kvserve::chat {
namespace {

using tokenizer::ScanUtf8;
using tokenizer::Utf8Scan;
using tokenizer::Utf8Step;

bool Contains(std::string_view haystack, std::string_view needle) {
  return haystack.find(needle) != std::string_view::npos;
}

// Python's str.isspace for the characters Jinja's trim filter and str.strip() remove.
bool IsPySpace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

// Jinja `| trim` / Python `.strip()`.
std::string_view Strip(std::string_view s) {
  size_t begin = 0;
  while (begin < s.size()) {
    const Utf8Scan scan = ScanUtf8(s, begin);
    if (scan.step != Utf8Step::kValid || !IsPySpace(scan.code_point)) break;
    begin += scan.length;
  }
  size_t end = s.size();
  while (end > begin) {
    size_t start = end - 1;
    while (start > begin && (static_cast<uint8_t>(s[start]) & 0xC0) == 0x80) --start;
    const Utf8Scan scan = ScanUtf8(s, start);
    if (scan.step != Utf8Step::kValid || scan.length != end - start || !IsPySpace(scan.code_point))
      break;
    end = start;
  }
  return s.substr(begin, end - begin);
}

// The native families have no way to show tools to the model: refuse rather than drop them.
absl::Status CheckNoTools(std::span<const ChatMessage> messages, const ChatRenderOptions& options,
                          std::string_view family) {
  bool calls = false;
  for (const ChatMessage& m : messages) calls |= !m.tool_calls_json.empty();
  if (options.tools_json.empty() && !calls) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "the chat template family '", std::string(family), "' cannot render ",
      calls ? "assistant tool_calls" : "tools", "; serve with ", std::string(kChatTemplateOption),
      "=auto and a model whose own template supports tools"));
}

absl::Status EmptyConversation(std::string_view family) {
  return absl::InvalidArgumentError(
      absl::StrCat("chat template ", std::string(family), ": the conversation has no messages"));
}

// Splits off a leading system message and checks that the rest alternates user, assistant,
// user, ... as the llama2 and mistral templates demand (they raise_exception otherwise).
absl::StatusOr<std::optional<std::string_view>> CheckAlternation(
    std::span<const ChatMessage>& messages, std::string_view family) {
  if (messages.empty()) return EmptyConversation(family);
  std::optional<std::string_view> system;
  if (messages.front().role == "system") {
    system = messages.front().content;
    messages = messages.subspan(1);
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string_view want = i % 2 == 0 ? "user" : "assistant";
    if (messages[i].role != want) {
      return absl::InvalidArgumentError(absl::StrCat(
          "chat template ", std::string(family),
          ": roles must alternate user/assistant/user/... after an optional system message; "
          "message ",
          i + (system ? 1 : 0), " has role \"", messages[i].role, "\", expected \"",
          std::string(want), "\""));
    }
  }
  return system;
}

class ChatmlTemplate final : public ChatTemplate {
 public:
  ChatmlTemplate(std::string name, std::string default_system)
      : name_(std::move(name)), default_system_(std::move(default_system)) {}

  absl::StatusOr<std::string> DoRender(std::span<const ChatMessage> messages,
                                       const ChatRenderOptions& options) const override {
    KVS_RETURN_IF_ERROR(CheckNoTools(messages, options, name()));
    const bool add_generation_prompt = options.add_generation_prompt;
    if (messages.empty()) return EmptyConversation(name_);
    std::string out;
    if (!default_system_.empty() && messages.front().role != "system") {
      absl::StrAppend(&out, "<|im_start|>system\n", default_system_, "<|im_end|>\n");
    }
    for (const ChatMessage& m : messages) {
      absl::StrAppend(&out, "<|im_start|>", m.role, "\n", m.content, "<|im_end|>\n");
    }
    if (add_generation_prompt) out += "<|im_start|>assistant\n";
    return out;
  }
  std::string_view name() const override { return name_; }
  bool renders_bos() const override { return false; }

 private:
  std::string name_;
  std::string default_system_;  // Qwen-style templates inject one when no system message leads
};

class Llama3Template final : public ChatTemplate {
 public:
  explicit Llama3Template(std::string bos) : bos_(std::move(bos)) {}

  absl::StatusOr<std::string> DoRender(std::span<const ChatMessage> messages,
                                       const ChatRenderOptions& options) const override {
    KVS_RETURN_IF_ERROR(CheckNoTools(messages, options, name()));
    const bool add_generation_prompt = options.add_generation_prompt;
    if (messages.empty()) return EmptyConversation("llama3");
    std::string out = bos_;
    for (const ChatMessage& m : messages) {
      absl::StrAppend(&out, "<|start_header_id|>", m.role, "<|end_header_id|>\n\n");
      const std::string_view content = Strip(m.content);
      out.append(content.data(), content.size());
      out += "<|eot_id|>";
    }
    if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
    return out;
  }
  std::string_view name() const override { return "llama3"; }
  bool renders_bos() const override { return true; }

 private:
  std::string bos_;
};

// Llama-2 chat: every user turn opens with BOS; the system prompt lives inside the first [INST].
class Llama2Template final : public ChatTemplate {
 public:
  Llama2Template(std::string bos, std::string eos) : bos_(std::move(bos)), eos_(std::move(eos)) {}

  // add_generation_prompt is ignored: the prompt ends in [/INST] either way.
  absl::StatusOr<std::string> DoRender(std::span<const ChatMessage> messages,
                                       const ChatRenderOptions& options) const override {
    KVS_RETURN_IF_ERROR(CheckNoTools(messages, options, name()));
    auto system = CheckAlternation(messages, "llama2");
    if (!system.ok()) return system.status();
    // A conversation of only a system message: its block opens an empty first user turn.
    const ChatMessage empty_user{"user", ""};
    if (messages.empty()) messages = std::span<const ChatMessage>(&empty_user, 1);
    std::string out;
    for (size_t i = 0; i < messages.size(); ++i) {
      std::string content;
      if (i == 0 && system->has_value()) {
        const std::string_view sys = **system;
        content =
            absl::StrCat("<<SYS>>\n", std::string(sys), "\n<</SYS>>\n\n", messages[i].content);
      } else {
        content = messages[i].content;
      }
      const std::string_view stripped = Strip(content);
      if (messages[i].role == "user") {
        absl::StrAppend(&out, bos_, "[INST] ");
        out.append(stripped.data(), stripped.size());
        out += " [/INST]";
      } else {
        out += " ";
        out.append(stripped.data(), stripped.size());
        absl::StrAppend(&out, " ", eos_);
      }
    }
    return out;
  }
  std::string_view name() const override { return "llama2"; }
  bool renders_bos() const override { return true; }

 private:
  std::string bos_;
  std::string eos_;
};

// Mistral instruct: one BOS, no system block; a system message is prepended to the first user
// message, separated by a blank line.
class MistralTemplate final : public ChatTemplate {
 public:
  MistralTemplate(std::string bos, std::string eos) : bos_(std::move(bos)), eos_(std::move(eos)) {}

  // add_generation_prompt is ignored: the prompt ends in [/INST] either way.
  absl::StatusOr<std::string> DoRender(std::span<const ChatMessage> messages,
                                       const ChatRenderOptions& options) const override {
    KVS_RETURN_IF_ERROR(CheckNoTools(messages, options, name()));
    auto system = CheckAlternation(messages, "mistral");
    if (!system.ok()) return system.status();
    const ChatMessage empty_user{"user", ""};  // system-only: an empty first user turn
    if (messages.empty()) messages = std::span<const ChatMessage>(&empty_user, 1);
    std::string out = bos_;
    for (size_t i = 0; i < messages.size(); ++i) {
      if (messages[i].role == "user") {
        out += "[INST] ";
        if (i == 0 && system->has_value()) absl::StrAppend(&out, std::string(**system), "\n\n");
        absl::StrAppend(&out, messages[i].content, " [/INST]");
      } else {
        absl::StrAppend(&out, messages[i].content, eos_);
      }
    }
    return out;
  }
  std::string_view name() const override { return "mistral"; }
  bool renders_bos() const override { return true; }

 private:
  std::string bos_;
  std::string eos_;
};

// Qwen-style templates write their default system prompt as one Jinja string literal,
// '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' (with a literal backslash-n in
// the source). Returns that prompt, or "" when the template has none.
std::string DefaultChatmlSystem(std::string_view jinja) {
  constexpr std::string_view kOpen = "<|im_start|>system\\n";
  constexpr std::string_view kClose = "<|im_end|>";
  size_t pos = jinja.find(kOpen);
  while (pos != std::string_view::npos) {
    const size_t begin = pos + kOpen.size();
    const size_t end = jinja.find(kClose, begin);
    if (end == std::string_view::npos) break;
    const std::string_view text = jinja.substr(begin, end - begin);
    // Only a plain literal counts: quotes, braces or escapes mean Jinja code sits in between.
    if (!text.empty() && text.find_first_of("'\"{}%\\") == std::string_view::npos) {
      return std::string(text);
    }
    pos = jinja.find(kOpen, begin);
  }
  return "";
}

std::string Or(const std::string& value, std::string_view fallback) {
  return value.empty() ? std::string(fallback) : value;
}

std::unique_ptr<ChatTemplate> Make(std::string_view family, std::string_view jinja,
                                   const ChatTemplateTokens& tokens) {
  if (family == "chatml" || family == "kvs-tiny") {
    return std::make_unique<ChatmlTemplate>(std::string(family), DefaultChatmlSystem(jinja));
  }
  if (family == "llama3")
    return std::make_unique<Llama3Template>(Or(tokens.bos, "<|begin_of_text|>"));
  if (family == "llama2") {
    return std::make_unique<Llama2Template>(Or(tokens.bos, "<s>"), Or(tokens.eos, "</s>"));
  }
  if (family == "mistral") {
    return std::make_unique<MistralTemplate>(Or(tokens.bos, "<s>"), Or(tokens.eos, "</s>"));
  }
  return nullptr;
}

std::optional<std::string_view> Recognise(std::string_view jinja) {
  if (jinja == kKvsTinyChatTemplate) return "kvs-tiny";
  if (Contains(jinja, "<|start_header_id|>") && Contains(jinja, "<|eot_id|>")) return "llama3";
  if (Contains(jinja, "<|im_start|>")) return "chatml";
  if (Contains(jinja, "[INST]") && Contains(jinja, "<<SYS>>")) return "llama2";
  if (Contains(jinja, "[INST]")) return "mistral";
  return std::nullopt;
}

}  // namespace

absl::StatusOr<std::string> CutAfterFinalMessage(std::string rendered, std::string_view final_content) {
  const std::string_view stripped = Strip(final_content);
  const size_t loc = rendered.rfind(stripped);
  if (loc == std::string::npos) {
    return absl::InvalidArgumentError(
        "continue_final_message: the final message does not appear in the rendered chat (the chat "
        "template rewrites it); the model cannot continue it");
  }
  // lstrip: the stripped text plus the trailing whitespace the message had.
  const size_t lstrip_len =
      final_content.size() - static_cast<size_t>(stripped.data() - final_content.data());
  if (std::string_view(rendered).substr(loc, lstrip_len) == final_content) {
    rendered.resize(loc + lstrip_len);  // the template kept the message's spacing
  } else {
    rendered.resize(loc + stripped.size());
  }
  return rendered;
}

absl::StatusOr<std::string> ChatTemplate::Render(std::span<const ChatMessage> messages,
                                                 const ChatRenderOptions& options) const {
  if (!options.continue_final_message) return DoRender(messages, options);
  if (options.add_generation_prompt) {
    return absl::InvalidArgumentError(
        "continue_final_message and add_generation_prompt cannot both be true");
  }
  if (messages.empty()) return EmptyConversation(name());
  KVS_ASSIGN_OR_RETURN(std::string text, DoRender(messages, options));
  return CutAfterFinalMessage(std::move(text), messages.back().content);
}

absl::StatusOr<std::unique_ptr<ChatTemplate>> SelectChatTemplate(std::string_view config_value,
                                                                 std::string_view jinja_text,
                                                                 const ChatTemplateTokens& tokens) {
  const std::string option(kChatTemplateOption);
  const std::string values(kChatTemplateValues);
  if (config_value != "auto") {
    auto t = Make(config_value, jinja_text, tokens);
    if (t == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          option, ": unknown value \"", std::string(config_value), "\"; allowed: ", values));
    }
    return t;
  }
  if (jinja_text.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the model has no chat template (tokenizer_config.json has no chat_template); set ", option,
        " to one of ", values.substr(5)));
  }
  // auto: the model's own template, rendered by the Jinja interpreter. (Recognise() still
  // supplies the family's default BOS/EOS texts when tokenizer_config.json names none.)
  ChatTemplateTokens with_defaults = tokens;
  if (std::optional<std::string_view> family = Recognise(jinja_text)) {
    const bool llama3 = *family == "llama3";
    const bool sentencepiece = *family == "llama2" || *family == "mistral";
    if (llama3 || sentencepiece) with_defaults.bos = Or(tokens.bos, llama3 ? "<|begin_of_text|>" : "<s>");
    if (sentencepiece) with_defaults.eos = Or(tokens.eos, "</s>");
  }
  return MakeJinjaChatTemplate(jinja_text, with_defaults, [] { return absl::Now(); });
}

}  // namespace kvserve::chat
