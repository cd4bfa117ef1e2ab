// SentencePiece's BPE rule (llama.cpp's `llama` vocabularies: tokens with scores, no merges) as
// a ranked merge table for BpeModel.
//
// SentencePiece encodes a word by repeatedly joining the adjacent pair of pieces whose
// concatenation is itself a piece, choosing the one with the highest score (the leftmost among
// equal scores). That is BPE with this table: for every mergeable token t and every split of t
// at a character boundary into two mergeable tokens a + b, a rule (a, b) -> t whose rank is the
// position of score(t) among the distinct scores of such t, highest first. Equal scores share a
// rank, and BpeModel merges the leftmost of equally ranked pairs first.
//
//   tokens:  a    b    c    ab   bc   abc          merges:  (a, b)  -> ab    rank 0
//   scores:  0    0    0    -1   -2   -3                    (b, c)  -> bc    rank 1
//                                                           (ab, c) -> abc   rank 2
//                                                           (a, bc) -> abc   rank 2
//
// A tokenizer.json BPE exported with score = -(rank of the first merge producing the token)
// (tools/export_gguf, GgufVocabFromTokenizerJson) gets its merge order back, which is exact
// when its merges list every split of every merged token (SentencePiece-converted files do).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tokenizer/bpe_model.h"

namespace kvserve::tokenizer {

// `mergeable[id]` marks the tokens that take part (normal pieces; not control, byte or unused
// tokens). Scores must be finite for mergeable tokens; the error names the first that is not.
absl::StatusOr<std::vector<BpeModel::IdMerge>> SpmMergesFromScores(
    std::span<const std::string> tokens, std::span<const float> scores,
    const std::vector<bool>& mergeable);

}  // namespace kvserve::tokenizer
