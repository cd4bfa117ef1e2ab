// The BPE model of a Hugging Face tokenizer.json: vocabulary, ranked merges and the merge loop
// that turns one pre-tokenized word into token ids.
//
// Per-word state (BpeScratch, reused across words; no allocation once warm):
//
//   symbols:  [0]"l"  <->  [1]"o"  <->  [2]"w"  <->  [3]"e"  <->  [4]"r"     doubly linked
//   heap:     (rank, left pos, merged id) for each adjacent pair that has a merge rule
//
// Loop: pop the lowest (rank, pos); skip it if stale (left symbol dead, no right neighbour, or
// the pair there no longer merges into that id); else merge right into left, mark the right
// symbol dead (len 0) and push the new pairs with both neighbours. Position 0 never dies, so the
// word is read back by following `next` from 0. O(n log n) in the word length, which matters for
// SentencePiece-style files with no pre-tokenizer, where a whole text segment is one word.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"

namespace kvserve::tokenizer {

// Ids index flat tables, so they are bounded well above any real vocabulary (~260k today).
inline constexpr int32_t kMaxTokenId = (1 << 24) - 1;
// Vocabularies are dense in practice (ids 0..n-1, added tokens right after). Some holes are
// fine, but an id space far larger than the tokens in it is refused: every per-id table
// (strings, flags, decoded text) is sized by the largest id, so one stray id near
// kMaxTokenId in a 300-token file would cost half a gigabyte and seconds (found by fuzzing).
inline constexpr int64_t kIdSpaceSlack = 65536;
inline bool IdSpaceIsDense(int64_t id_limit, int64_t tokens) { return id_limit <= 2 * tokens + kIdSpaceSlack; }

struct BpeOptions {
  bool byte_fallback = false;     // unknown characters become <0xXX> byte tokens
  std::optional<int32_t> unk_id;  // else unknown characters map here (or are dropped if unset)
  bool fuse_unk = false;          // consecutive unknowns become one unk
  bool ignore_merges = false;     // a word that is itself in the vocabulary is emitted as is
};

struct BpeScratch {
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
    uint32_t len;  // bytes of the word this symbol covers; 0: merged away
    bool unk;
  };
  struct Candidate {
    int32_t rank;
    int32_t pos;
    int32_t new_id;
  };
  std::vector<Symbol> symbols;
  std::vector<Candidate> heap;
};

class BpeModel {
 public:
  // One merge rule by id: `left` followed by `right` becomes `merged`. Lower ranks merge first;
  // among equal ranks the leftmost pair in the word merges first.
  struct IdMerge {
    int32_t left;
    int32_t right;
    int32_t merged;
    int32_t rank;
  };

  // `vocab` maps token text to id (ids need not be dense, but must be distinct and in
  // [0, kMaxTokenId]).
  // `merges` in rank order; each side and their concatenation must be in the vocabulary.
  // Errors name the offending token or merge.
  static absl::StatusOr<BpeModel> Create(
      const std::vector<std::pair<std::string, int32_t>>& vocab,
      const std::vector<std::pair<std::string, std::string>>& merges, BpeOptions options);
  // The same model with merges given by id and explicit ranks (several rules may share a rank,
  // which SentencePiece's score rule needs: see spm_merges.h). Each id must be in `vocab` and
  // the merged token's text must be left's text followed by right's. A pair listed twice keeps
  // its lowest rank.
  static absl::StatusOr<BpeModel> CreateRanked(
      const std::vector<std::pair<std::string, int32_t>>& vocab, std::span<const IdMerge> merges,
      BpeOptions options);

  // Appends the ids of one word (valid UTF-8) to `out`.
  void EncodeWord(std::string_view word, BpeScratch& scratch, std::vector<int32_t>& out) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  // Empty view for ids the vocabulary does not define.
  std::string_view id_to_token(int32_t id) const;
  // One past the largest id in the vocabulary.
  int32_t id_limit() const { return static_cast<int32_t>(id_to_token_.size()); }
  const BpeOptions& options() const { return options_; }
  // The id of byte token <0xXX>, or -1.
  int32_t byte_id(uint8_t b) const { return byte_ids_[b]; }

 private:
  struct MergeValue {
    int32_t rank;
    int32_t new_id;
  };
  static uint64_t PairKey(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }
  static absl::StatusOr<BpeModel> WithVocab(
      const std::vector<std::pair<std::string, int32_t>>& vocab, BpeOptions options);
  void AddMerge(int32_t left, int32_t right, int32_t merged, int32_t rank);
  void PushCandidate(BpeScratch& s, int32_t pos) const;

  absl::flat_hash_map<std::string, int32_t> vocab_;
  std::vector<std::string> id_to_token_;
  absl::flat_hash_map<uint64_t, MergeValue> merges_;
  std::array<int32_t, 256> byte_ids_{};
  BpeOptions options_;
};

}  // namespace kvserve::tokenizer
