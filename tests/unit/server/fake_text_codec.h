// A byte-level TextCodec for front-end tests: every byte b is token b + 3, so tests can
// predict ids and text exactly. Special tokens: 0 <unk>, 1 <s> (BOS), 2 </s> (EOS),
// 259 <|im_start|>, 260 <|im_end|>; chat messages render ChatML-style.
#pragma once

#include "server/core/text_codec.h"

namespace kvserve::server::testing {

inline constexpr int32_t kFakeBos = 1;
inline constexpr int32_t kFakeEos = 2;
inline constexpr int32_t kFakeByteOffset = 3;
inline constexpr int32_t kFakeImStart = 259;
inline constexpr int32_t kFakeImEnd = 260;
inline constexpr int32_t kFakeVocabSize = 261;

// What chat_template_source() says: enough for the Hermes tool-call format and <think>
// reasoning to be detected, as from a Qwen3 template.
inline constexpr std::string_view kFakeChatTemplateSource =
    "{# fake ChatML: <tool_call>{...}</tool_call>, <think>...</think> #}";

inline int32_t FakeTokenOf(unsigned char byte) { return static_cast<int32_t>(byte) + kFakeByteOffset; }

class FakeTextCodec final : public TextCodec {
 public:
  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text, bool add_special_tokens) const override;
  std::string Decode(std::span<const int32_t> ids, bool skip_special_tokens) const override;
  std::string TokenText(int32_t id) const override;
  std::unique_ptr<TextStreamDecoder> NewStreamDecoder(bool at_text_start,
                                                      bool skip_special_tokens) const override;
  absl::StatusOr<ChatPrompt> EncodeChat(std::span<const ChatMessage> messages,
                                        const ChatPromptOptions& options) const override;
  std::string_view chat_template_source() const override;
  // Every byte is a token; <unk>, <s>, </s> (EOS) and the chat markers are special.
  std::shared_ptr<const structured::TokenTrie> token_trie() const override;
  int32_t vocab_size() const override { return kFakeVocabSize; }
};

// Token ids of `text` (no BOS).
std::vector<int32_t> FakeTokens(std::string_view text);

}  // namespace kvserve::server::testing
