#include "server/core/tokenizer_text_codec.h"

#include <vector>

#include "base/absl_compat.h"
#include "base/check.h"
#include "server/errors/error_mapping.h"
#include "structured/token_trie.h"
#include "tokenizer/incremental_detokenizer.h"

namespace kvserve::server {
namespace {

class Detokenizer final : public TextStreamDecoder {
 public:
  Detokenizer(const tokenizer::Tokenizer& t, tokenizer::DetokenizerOptions o) : detok_(t, o) {}
  void Push(int32_t token_id, std::string& out) override { out += detok_.feed(token_id); }
  void Finish(std::string& out) override { out += detok_.flush(); }

 private:
  tokenizer::IncrementalDetokenizer detok_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<TokenizerTextCodec>> TokenizerTextCodec::Load(
    const std::string& model_dir, std::string_view chat_template_option) {
  KVS_ASSIGN_OR_RETURN(std::unique_ptr<tokenizer::Tokenizer> tok, tokenizer::LoadTokenizerDir(model_dir));
  KVS_ASSIGN_OR_RETURN(std::unique_ptr<chat::ChatTemplate> tmpl,
                       chat::SelectChatTemplate(chat_template_option, tok->chat_template(),
                                                     {tok->bos_token(), tok->eos_token()}));
  return std::make_unique<TokenizerTextCodec>(std::move(tok), std::move(tmpl));
}

TokenizerTextCodec::TokenizerTextCodec(std::unique_ptr<tokenizer::Tokenizer> tokenizer,
                                       std::unique_ptr<chat::ChatTemplate> chat_template)
    : tokenizer_(std::move(tokenizer)), chat_template_(std::move(chat_template)) {
  KVS_CHECK(tokenizer_ != nullptr && chat_template_ != nullptr);
  // Structured outputs' view of the vocabulary: each token's bytes; special tokens (BOS, chat
  // markers) never satisfy a grammar; the primary EOS ends one, the other EOS ids are excluded.
  std::vector<std::string> bytes(static_cast<size_t>(tokenizer_->vocab_size()));
  std::vector<int32_t> excluded;
  for (int32_t id = 0; id < tokenizer_->vocab_size(); ++id) {
    bytes[static_cast<size_t>(id)] = std::string(tokenizer_->token_decoder().bytes(id));
    if (tokenizer_->is_special(id)) excluded.push_back(id);
  }
  if (auto bos = tokenizer_->bos_id()) excluded.push_back(*bos);
  for (int32_t id : tokenizer_->eos_ids()) excluded.push_back(id);
  trie_ = std::make_shared<structured::TokenTrie>(bytes, excluded, tokenizer_->eos_id().value_or(-1));
}

absl::StatusOr<std::vector<int32_t>> TokenizerTextCodec::Encode(std::string_view text,
                                                                bool add_special_tokens) const {
  return tokenizer_->encode(text, add_special_tokens);
}

std::string TokenizerTextCodec::Decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  return tokenizer_->decode(ids, skip_special_tokens);
}

std::string TokenizerTextCodec::TokenText(int32_t id) const {
  return std::string(tokenizer_->token_decoder().bytes(id));
}

std::unique_ptr<TextStreamDecoder> TokenizerTextCodec::NewStreamDecoder(bool at_text_start,
                                                                        bool skip_special_tokens) const {
  return std::make_unique<Detokenizer>(*tokenizer_,
                                       tokenizer::DetokenizerOptions{skip_special_tokens, at_text_start});
}

absl::StatusOr<ChatPrompt> TokenizerTextCodec::EncodeChat(std::span<const ChatMessage> messages,
                                                          const ChatPromptOptions& options) const {
  std::vector<chat::ChatMessage> converted;
  converted.reserve(messages.size());
  for (const auto& m : messages) {
    chat::ChatMessage c(m.role, m.content);
    c.name = m.name;
    c.tool_call_id = m.tool_call_id;
    c.reasoning_content = m.reasoning_content;
    c.tool_calls_json = m.tool_calls_json;
    converted.push_back(std::move(c));
  }
  chat::ChatRenderOptions render;
  render.add_generation_prompt = options.add_generation_prompt;
  render.continue_final_message = options.continue_final_message;
  render.tools_json = options.tools_json;
  render.template_kwargs_json = options.template_kwargs_json;
  auto text = chat_template_->Render(converted, render);
  if (!text.ok()) return FieldError("messages", base::AsStd(text.status().message()));
  ChatPrompt prompt;
  // A template that writes BOS itself must not get a second one from the tokenizer.
  prompt.ids = tokenizer_->encode(*text, /*add_special=*/!chat_template_->renders_bos());
  prompt.text = *std::move(text);
  return prompt;
}

}  // namespace kvserve::server
