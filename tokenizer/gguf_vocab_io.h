// The GGUF vocabulary (gguf_vocab.h) read from and written to a GGUF file's metadata under
// llama.cpp's keys:
//
//   tokenizer.ggml.model / .pre / .tokens / .scores / .token_type / .merges
//   tokenizer.ggml.{bos,eos,eot,eom,unknown,padding}_token_id
//   tokenizer.ggml.add_bos_token / add_eos_token / add_space_prefix
//   tokenizer.chat_template
//   kvserve.tokenizer.normalized_token_ids   (our extension, gguf_vocab.h says why)
//
// A key of the wrong type is an error naming the key; an absent optional key stays unset.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "tokenizer/gguf_vocab.h"
#include "tokenizer/tokenizer.h"

namespace kvserve::tokenizer {

absl::StatusOr<GgufVocab> ReadGgufVocab(const gguf::GgufModel& model);
void WriteGgufVocab(const GgufVocab& vocab, gguf::GgufWriter& writer);

// The tokenizer of the GGUF model at `path` (a file or a directory holding one).
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadGgufTokenizer(const std::string& path);

}  // namespace kvserve::tokenizer
