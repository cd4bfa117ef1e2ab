#include "tests/unit/server/fake_text_codec.h"

#include "structured/token_trie.h"

#include "server/errors/error_mapping.h"

namespace kvserve::server::testing {
namespace {

const char* SpecialText(int32_t id) {
  switch (id) {
    case 0: return "<unk>";
    case kFakeBos: return "<s>";
    case kFakeEos: return "</s>";
    case kFakeImStart: return "<|im_start|>";
    case kFakeImEnd: return "<|im_end|>";
    default: return nullptr;
  }
}

// Length of the complete UTF-8 prefix of `s` (an unfinished trailing character is held).
size_t CompletePrefix(std::string_view s) {
  size_t n = s.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const unsigned char c = static_cast<unsigned char>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
    const size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return need > back ? n - back : n;
  }
  return n;
}

class FakeDecoder final : public TextStreamDecoder {
 public:
  explicit FakeDecoder(bool skip_special) : skip_special_(skip_special) {}
  void Push(int32_t id, std::string& out) override {
    if (const char* special = SpecialText(id)) {
      if (!skip_special_) pending_ += special;
    } else if (id >= kFakeByteOffset && id < kFakeImStart) {
      pending_.push_back(static_cast<char>(id - kFakeByteOffset));
    }
    const size_t n = CompletePrefix(pending_);
    out.append(pending_, 0, n);
    pending_.erase(0, n);
  }
  void Finish(std::string& out) override {
    for (size_t i = 0; i < pending_.size(); ++i) out += "\xEF\xBF\xBD";
    pending_.clear();
  }

 private:
  bool skip_special_;
  std::string pending_;
};

}  // namespace

std::vector<int32_t> FakeTokens(std::string_view text) {
  std::vector<int32_t> ids;
  for (unsigned char c : text) ids.push_back(FakeTokenOf(c));
  return ids;
}

absl::StatusOr<std::vector<int32_t>> FakeTextCodec::Encode(std::string_view text,
                                                           bool add_special_tokens) const {
  std::vector<int32_t> ids;
  if (add_special_tokens) ids.push_back(kFakeBos);
  for (unsigned char c : text) ids.push_back(FakeTokenOf(c));
  return ids;
}

std::string FakeTextCodec::Decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::string out;
  FakeDecoder d(skip_special_tokens);
  for (int32_t id : ids) d.Push(id, out);
  d.Finish(out);
  return out;
}

std::string FakeTextCodec::TokenText(int32_t id) const {
  if (const char* special = SpecialText(id)) return special;
  if (id >= kFakeByteOffset && id < kFakeImStart) return std::string(1, static_cast<char>(id - kFakeByteOffset));
  return {};
}

std::unique_ptr<TextStreamDecoder> FakeTextCodec::NewStreamDecoder(bool, bool skip_special_tokens) const {
  return std::make_unique<FakeDecoder>(skip_special_tokens);
}

absl::StatusOr<ChatPrompt> FakeTextCodec::EncodeChat(std::span<const ChatMessage> messages,
                                                     const ChatPromptOptions& options) const {
  if (messages.empty()) return FieldError("messages", "must contain at least one message");
  if (options.continue_final_message && options.add_generation_prompt) {
    return FieldError("messages", "continue_final_message and add_generation_prompt cannot both be true");
  }
  // ChatML; tools and tool calls are written as JSON lines so tests can see them arrive.
  ChatPrompt prompt;
  std::string& text = prompt.text;
  if (!options.tools_json.empty()) text += "<|im_start|>system\n<tools>" + options.tools_json + "</tools><|im_end|>\n";
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    text += "<|im_start|>" + m.role + "\n" + m.content;
    if (!m.tool_calls_json.empty()) text += "<tool_call>" + m.tool_calls_json + "</tool_call>";
    if (options.continue_final_message && i + 1 == messages.size()) break;
    text += "<|im_end|>\n";
  }
  if (options.add_generation_prompt) text += "<|im_start|>assistant\n";
  if (options.template_kwargs_json.find("\"enable_thinking\":false") != std::string::npos) {
    text += "<think>\n\n</think>\n\n";
  }
  prompt.ids.push_back(kFakeBos);
  for (size_t i = 0; i < text.size();) {
    if (text.compare(i, 12, "<|im_start|>") == 0) {
      prompt.ids.push_back(kFakeImStart);
      i += 12;
    } else if (text.compare(i, 10, "<|im_end|>") == 0) {
      prompt.ids.push_back(kFakeImEnd);
      i += 10;
    } else {
      prompt.ids.push_back(FakeTokenOf(static_cast<unsigned char>(text[i++])));
    }
  }
  return prompt;
}

std::string_view FakeTextCodec::chat_template_source() const { return kFakeChatTemplateSource; }

std::shared_ptr<const structured::TokenTrie> FakeTextCodec::token_trie() const {
  std::vector<std::string> bytes(kFakeVocabSize);
  bytes[0] = "<unk>";
  bytes[kFakeBos] = "<s>";
  bytes[kFakeEos] = "</s>";
  for (int b = 0; b < 256; ++b) bytes[FakeTokenOf(static_cast<unsigned char>(b))] = std::string(1, static_cast<char>(b));
  bytes[kFakeImStart] = "<|im_start|>";
  bytes[kFakeImEnd] = "<|im_end|>";
  return std::make_shared<structured::TokenTrie>(bytes, std::vector<int32_t>{0, kFakeBos, kFakeImStart, kFakeImEnd},
                                                 kFakeEos);
}

}  // namespace kvserve::server::testing
