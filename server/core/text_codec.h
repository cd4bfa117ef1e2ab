// TextCodec: what the front ends need from a tokenizer, as an interface so that the HTTP
// and gRPC layers can be tested with a tiny fake and run over the real tokenizer
// (tokenizer_text_codec.h) in the daemon. All methods are const and thread-safe: many
// request threads encode and decode at once.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace kvserve::structured {
class TokenTrie;
}  // namespace kvserve::structured

namespace kvserve::server {

struct ChatMessage {
  std::string role;     // system | user | assistant | tool (others are passed to the template)
  std::string content;
  ChatMessage() = default;
  ChatMessage(std::string r, std::string c) : role(std::move(r)), content(std::move(c)) {}
  std::string name;                              // optional
  std::string tool_call_id;                      // role tool
  std::optional<std::string> reasoning_content;  // assistant: an earlier turn's reasoning
  std::string tool_calls_json;  // assistant: JSON array, arguments as objects ("" none)
};

// Per-request chat rendering (vLLM's request members of the same names).
struct ChatPromptOptions {
  bool add_generation_prompt = true;
  bool continue_final_message = false;
  std::string tools_json;            // `tools` as JSON text, "" for none
  std::string template_kwargs_json;  // `chat_template_kwargs` as a JSON object, "" for none
};

// A rendered and tokenized chat prompt; `text` is what the template wrote (the reasoning
// parser looks at how it ends).
struct ChatPrompt {
  std::vector<int32_t> ids;
  std::string text;
};

// Incremental detokenizer of one sample. Owned by one consumer thread at a time.
class TextStreamDecoder {
 public:
  virtual ~TextStreamDecoder() = default;
  // Appends to `out` the text completed by `token_id`. Never appends a partial UTF-8
  // sequence: bytes of an unfinished character are held back until it completes.
  virtual void Push(int32_t token_id, std::string& out) = 0;
  // End of the sample: appends whatever is still held back (lossy if it is broken UTF-8).
  virtual void Finish(std::string& out) = 0;
};

class TextCodec {
 public:
  virtual ~TextCodec() = default;

  // `add_special_tokens`: the model's BOS (and whatever else its tokenizer adds).
  virtual absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text,
                                                      bool add_special_tokens) const = 0;
  virtual std::string Decode(std::span<const int32_t> ids, bool skip_special_tokens) const = 0;
  // The text of one token as it appears inside generated text (for logprobs); may be a
  // fragment of a UTF-8 character, callers sanitise before putting it into JSON.
  virtual std::string TokenText(int32_t id) const = 0;
  // A decoder for one generated text. `at_text_start`: the text stands on its own (a chat
  // reply), so a SentencePiece-style leading space is dropped; false when it continues the
  // prompt (completions), where " world" keeps its space.
  virtual std::unique_ptr<TextStreamDecoder> NewStreamDecoder(bool at_text_start,
                                                              bool skip_special_tokens) const = 0;
  // Renders `messages` with the model's chat template and tokenizes the result (special
  // tokens in the template are matched as such, BOS is added once). Errors name the
  // field (`messages`).
  virtual absl::StatusOr<ChatPrompt> EncodeChat(std::span<const ChatMessage> messages,
                                                const ChatPromptOptions& options) const = 0;
  // The vocabulary as structured outputs see it (token bytes, special tokens excluded, EOS);
  // null when the codec cannot provide it (structured outputs are then refused).
  virtual std::shared_ptr<const structured::TokenTrie> token_trie() const { return nullptr; }
  // The chat template's source ("" for a native family or a test codec): tool-call and
  // reasoning formats are detected from it.
  virtual std::string_view chat_template_source() const { return {}; }
  virtual int32_t vocab_size() const = 0;
};

}  // namespace kvserve::server
