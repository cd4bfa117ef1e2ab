// TextCodec over the real tokenizer (tokenizer/): a model directory's tokenizer.json and
// tokenizer_config.json, with the chat template chosen by model.chat_template.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "chat/chat_template.h"
#include "server/core/text_codec.h"
#include "tokenizer/tokenizer.h"

namespace kvserve::server {

class TokenizerTextCodec final : public TextCodec {
 public:
  // Errors name the file or the config option (model.chat_template) to fix.
  static absl::StatusOr<std::unique_ptr<TokenizerTextCodec>> Load(const std::string& model_dir,
                                                                  std::string_view chat_template_option);
  TokenizerTextCodec(std::unique_ptr<tokenizer::Tokenizer> tokenizer,
                     std::unique_ptr<chat::ChatTemplate> chat_template);

  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text, bool add_special_tokens) const override;
  std::string Decode(std::span<const int32_t> ids, bool skip_special_tokens) const override;
  std::string TokenText(int32_t id) const override;
  std::unique_ptr<TextStreamDecoder> NewStreamDecoder(bool at_text_start,
                                                      bool skip_special_tokens) const override;
  absl::StatusOr<ChatPrompt> EncodeChat(std::span<const ChatMessage> messages,
                                        const ChatPromptOptions& options) const override;
  std::string_view chat_template_source() const override { return chat_template_->source(); }
  std::shared_ptr<const structured::TokenTrie> token_trie() const override { return trie_; }
  int32_t vocab_size() const override { return tokenizer_->vocab_size(); }

  const tokenizer::Tokenizer& tokenizer() const { return *tokenizer_; }

 private:
  std::unique_ptr<tokenizer::Tokenizer> tokenizer_;
  std::unique_ptr<chat::ChatTemplate> chat_template_;
  std::shared_ptr<const structured::TokenTrie> trie_;
};

}  // namespace kvserve::server
