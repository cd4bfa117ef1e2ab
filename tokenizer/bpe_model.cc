#include "tokenizer/bpe_model.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/absl_compat.h"
#include "base/check.h"
#include "tokenizer/utf8.h"

namespace kvserve::tokenizer {
namespace {

// Min-heap order on (rank, pos): the lowest rank merges first, leftmost among equals.
bool HeapAfter(const BpeScratch::Candidate& a, const BpeScratch::Candidate& b) {
  return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
}

}  // namespace

absl::StatusOr<BpeModel> BpeModel::WithVocab(
    const std::vector<std::pair<std::string, int32_t>>& vocab, BpeOptions options) {
  BpeModel m;
  m.options_ = options;
  int32_t max_id = -1;
  for (const auto& [token, id] : vocab) {
    if (id < 0 || id > kMaxTokenId) {
      return absl::InvalidArgumentError(absl::StrCat("vocab token \"", token, "\" has id ", id,
                                                     ", outside [0, ", kMaxTokenId, "]"));
    }
    max_id = std::max(max_id, id);
  }
  if (!IdSpaceIsDense(static_cast<int64_t>(max_id) + 1, static_cast<int64_t>(vocab.size()))) {
    return absl::InvalidArgumentError(absl::StrCat("vocab id ", max_id, " is far beyond the ", vocab.size(),
                                                   " tokens of the vocabulary (ids must stay below 2 x tokens + ",
                                                   kIdSpaceSlack, ")"));
  }
  m.id_to_token_.resize(static_cast<size_t>(max_id) + 1);
  std::vector<bool> seen(m.id_to_token_.size(), false);
  m.vocab_.reserve(vocab.size());
  for (const auto& [token, id] : vocab) {
    if (seen[id]) {
      return absl::InvalidArgumentError(
          absl::StrCat("vocab id ", id, " is used twice (second: \"", token, "\")"));
    }
    if (!IsValidUtf8(token)) {
      return absl::InvalidArgumentError(absl::StrCat("vocab id ", id, " is not valid UTF-8"));
    }
    seen[id] = true;
    m.id_to_token_[id] = token;
    m.vocab_.emplace(token, id);
  }
  m.byte_ids_.fill(-1);
  for (int b = 0; b < 256; ++b) {
    if (auto id = m.token_to_id(absl::StrFormat("<0x%02X>", b))) m.byte_ids_[b] = *id;
  }
  if (options.unk_id && (*options.unk_id < 0 || *options.unk_id > max_id ||
                         m.id_to_token_[*options.unk_id].empty())) {
    return absl::InvalidArgumentError(
        absl::StrCat("unk id ", *options.unk_id, " is not in the vocabulary"));
  }
  return m;
}

void BpeModel::AddMerge(int32_t left, int32_t right, int32_t merged, int32_t rank) {
  auto [it, inserted] = merges_.try_emplace(PairKey(left, right), MergeValue{rank, merged});
  if (!inserted && rank < it->second.rank) it->second = MergeValue{rank, merged};
}

absl::StatusOr<BpeModel> BpeModel::Create(
    const std::vector<std::pair<std::string, int32_t>>& vocab,
    const std::vector<std::pair<std::string, std::string>>& merges, BpeOptions options) {
  KVS_ASSIGN_OR_RETURN(BpeModel m, WithVocab(vocab, options));
  m.merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [left, right] = merges[rank];
    const auto l = m.token_to_id(left);
    const auto r = m.token_to_id(right);
    const auto merged = m.token_to_id(left + right);
    if (!l || !r || !merged) {
      return absl::InvalidArgumentError(absl::StrCat("merge #", rank, " (\"", left, "\" \"", right,
                                                     "\"): ",
                                                     !l   ? "left side"
                                                     : !r ? "right side"
                                                          : "merged token",
                                                     " is not in the vocabulary"));
    }
    // The first (lowest-ranked) rule for a pair wins; duplicates later in the list are inert.
    m.AddMerge(*l, *r, *merged, static_cast<int32_t>(rank));
  }
  return m;
}

absl::StatusOr<BpeModel> BpeModel::CreateRanked(
    const std::vector<std::pair<std::string, int32_t>>& vocab, std::span<const IdMerge> merges,
    BpeOptions options) {
  KVS_ASSIGN_OR_RETURN(BpeModel m, WithVocab(vocab, options));
  m.merges_.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const IdMerge& e = merges[i];
    const std::string_view l = m.id_to_token(e.left);
    const std::string_view r = m.id_to_token(e.right);
    const std::string_view merged = m.id_to_token(e.merged);
    if (l.empty() || r.empty() || merged.size() != l.size() + r.size() ||
        merged.substr(0, l.size()) != l || merged.substr(l.size()) != r) {
      return absl::InvalidArgumentError(absl::StrCat("merge #", i, " (ids ", e.left, " ", e.right,
                                                     " -> ", e.merged,
                                                     "): the merged token is not the two sides "
                                                     "joined, or an id is not in the vocabulary"));
    }
    m.AddMerge(e.left, e.right, e.merged, e.rank);
  }
  return m;
}

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
  auto it = vocab_.find(base::AsAbsl(token));
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

std::string_view BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || id >= id_limit()) return {};
  return id_to_token_[id];
}

void BpeModel::PushCandidate(BpeScratch& s, int32_t pos) const {
  const int32_t next = s.symbols[pos].next;
  if (next < 0) return;
  auto it = merges_.find(PairKey(s.symbols[pos].id, s.symbols[next].id));
  if (it == merges_.end()) return;
  s.heap.push_back({it->second.rank, pos, it->second.new_id});
  std::push_heap(s.heap.begin(), s.heap.end(), HeapAfter);
}

void BpeModel::EncodeWord(std::string_view word, BpeScratch& s, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (options_.ignore_merges) {
    if (auto id = token_to_id(word)) {
      out.push_back(*id);
      return;
    }
  }
  s.symbols.clear();
  s.heap.clear();
  auto push_symbol = [&s](int32_t id, uint32_t len, bool unk) {
    const auto idx = static_cast<int32_t>(s.symbols.size());
    s.symbols.push_back({id, idx - 1, -1, len, unk});
    if (idx > 0) s.symbols[idx - 1].next = idx;
  };
  size_t pos = 0;
  while (pos < word.size()) {
    const Utf8Scan scan = ScanUtf8(word, pos);
    const uint32_t len = scan.length;  // the word is valid UTF-8, so this is one character
    const std::string_view ch = word.substr(pos, len);
    pos += len;
    if (auto id = token_to_id(ch)) {
      push_symbol(*id, len, false);
      continue;
    }
    if (options_.byte_fallback && std::all_of(ch.begin(), ch.end(), [this](char c) {
          return byte_ids_[static_cast<uint8_t>(c)] >= 0;
        })) {
      for (char c : ch) push_symbol(byte_ids_[static_cast<uint8_t>(c)], 1, false);
      continue;
    }
    if (!options_.unk_id) continue;  // no unk token: the character is dropped, as HF does
    if (options_.fuse_unk && !s.symbols.empty() && s.symbols.back().unk) {
      s.symbols.back().len += len;
      continue;
    }
    push_symbol(*options_.unk_id, len, true);
  }
  if (s.symbols.empty()) return;
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(s.symbols.size()); ++i) PushCandidate(s, i);
  while (!s.heap.empty()) {
    std::pop_heap(s.heap.begin(), s.heap.end(), HeapAfter);
    const BpeScratch::Candidate top = s.heap.back();
    s.heap.pop_back();
    BpeScratch::Symbol& left = s.symbols[top.pos];
    if (left.len == 0 || left.next < 0) continue;
    const int32_t right_pos = left.next;
    BpeScratch::Symbol& right = s.symbols[right_pos];
    auto it = merges_.find(PairKey(left.id, right.id));
    if (it == merges_.end() || it->second.new_id != top.new_id) continue;  // stale
    left.id = top.new_id;
    left.len += right.len;
    left.unk = false;
    left.next = right.next;
    if (right.next >= 0) s.symbols[right.next].prev = top.pos;
    right.len = 0;
    if (left.prev >= 0) PushCandidate(s, left.prev);
    PushCandidate(s, top.pos);
  }
  for (int32_t i = 0; i >= 0; i = s.symbols[i].next) out.push_back(s.symbols[i].id);
}

}  // namespace kvserve::tokenizer
