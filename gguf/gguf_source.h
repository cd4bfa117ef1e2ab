// Whether a model path names a GGUF model rather than a Hugging Face directory, decided from
// the file system alone (no parsing), so every loader (model config, weights, tokenizer) can
// dispatch on the same answer:
//
//   path                                  is a GGUF source when
//   FILE                                  it starts with the magic "GGUF"
//   DIR                                   it holds no config.json and at least one *.gguf file
//
// GgufModel::Open then resolves the directory (one model, or one split set) and validates.
#pragma once

#include <string>

namespace kvserve::gguf {

bool IsGgufSource(const std::string& path);

}  // namespace kvserve::gguf
