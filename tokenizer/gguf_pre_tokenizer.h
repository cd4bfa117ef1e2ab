// The pre-tokenizers a GGUF file names in `tokenizer.ggml.pre` (gpt2-style vocabularies), and the
// tokenizer.json pipeline each name stands for. llama.cpp keeps the regexes in its source, keyed
// by this name (the converter picks the name by hashing the HF tokenizer's output), so a GGUF
// file carries only the name. Each entry here is written as the Hugging Face tokenizer.json of
// the model family spells it:
//
//   text ─► [NFC, qwen2 only] ─► Split(regex 1, Isolated) ─► ... ─► ByteLevel(no prefix, no regex)
//
// (the GPT-2 tokenizer.json's ByteLevel(use_regex=true) is the same as Split(GPT-2 regex) then
// ByteLevel without a regex, and is read as such). A name missing here is refused, never
// approximated by a similar one.
//
// "default" is what llama.cpp uses when a gpt2-style file has no pre name: four splits applied
// one after the other (punctuation runs, the GPT-2 pattern, digit runs, groups of three ASCII
// digits); no tokenizer.json has it.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pre_tokenizer.h"

namespace kvserve::tokenizer {

// Split patterns of the model families, as their tokenizer.json files write them.
// Llama 3 (and tiktoken's cl100k): digits in runs of up to three.
inline constexpr std::string_view kLlama3SplitPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Qwen2, Qwen2.5, Qwen3: as Llama 3 but one digit per word.
inline constexpr std::string_view kQwen2SplitPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// tiktoken's o200k (GPT-4o, gpt-oss): case-aware words with contractions attached.
inline constexpr std::string_view kO200kSplitPattern =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Mistral's Tekken (Mistral NeMo and later): o200k's words without contractions, single digits.
inline constexpr std::string_view kTekkenSplitPattern =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

struct GgufPreTokenizerSpec {
  std::string_view name;                  // canonical tokenizer.ggml.pre value
  std::vector<std::string_view> aliases;  // other names llama.cpp reads as the same
  std::vector<std::string_view> splits;   // Split(Isolated) regexes, applied in order
  bool nfc = false;                       // NFC normalizer first (Qwen2's tokenizer.json)
  // BPE ignore_merges: a word that is itself a token is emitted as is (Llama 3 and Tekken, as
  // llama.cpp does for them; Llama 3's tokenizer.json says so too).
  bool ignore_merges = false;
  bool add_bos_default = false;  // llama.cpp's add_bos when the file does not say
};

// Every supported name.
const std::vector<GgufPreTokenizerSpec>& GgufPreTokenizers();

// The entry for a tokenizer.ggml.pre value (name or alias); Unimplemented naming it otherwise.
// An empty name reads as "default", as llama.cpp reads a file without the key.
absl::StatusOr<const GgufPreTokenizerSpec*> FindGgufPreTokenizer(std::string_view name);

// The entry whose pipeline is exactly `splits` (+ NFC when `nfc`); Unimplemented otherwise.
absl::StatusOr<const GgufPreTokenizerSpec*> MatchGgufPreTokenizer(
    const std::vector<std::string>& splits, bool nfc);

// Builds the normalizer and pre-tokenizer of `spec`.
absl::Status BuildGgufPreTokenizer(const GgufPreTokenizerSpec& spec, Normalizer& normalizer,
                                   PreTokenizer& pre_tokenizer);

}  // namespace kvserve::tokenizer
