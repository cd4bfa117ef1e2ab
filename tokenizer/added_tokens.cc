#include "tokenizer/added_tokens.h"

#include <algorithm>

namespace kvserve::tokenizer {
namespace {

bool IsAsciiSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

bool IsWordByte(char c) {
  const auto b = static_cast<uint8_t>(c);
  return b >= 0x80 || (b >= '0' && b <= '9') || (b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z') ||
         b == '_';
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(const std::vector<AddedToken>& tokens) {
  for (const AddedToken& t : tokens) {
    if (t.content.empty()) continue;
    tokens_.push_back({t.content, t.id, t.lstrip, t.rstrip, t.single_word});
  }
  for (uint32_t i = 0; i < tokens_.size(); ++i) {
    by_first_byte_[static_cast<uint8_t>(tokens_[i].content[0])].push_back(i);
  }
  for (auto& bucket : by_first_byte_) {
    std::stable_sort(bucket.begin(), bucket.end(), [this](uint32_t a, uint32_t b) {
      return tokens_[a].content.size() > tokens_[b].content.size();
    });
  }
}

void AddedTokenMatcher::Split(std::string_view text, std::vector<TextSegment>& out) const {
  out.clear();
  const auto n = static_cast<uint32_t>(text.size());
  uint32_t emitted = 0;  // text before this offset is already in `out`
  uint32_t pos = 0;
  while (pos < n && !tokens_.empty()) {
    const Entry* hit = nullptr;
    for (uint32_t idx : by_first_byte_[static_cast<uint8_t>(text[pos])]) {
      const Entry& e = tokens_[idx];
      if (text.compare(pos, e.content.size(), e.content) != 0) continue;
      if (e.single_word) {
        const size_t end = pos + e.content.size();
        const bool glued_left = pos > 0 && IsWordByte(text[pos - 1]);
        const bool glued_right = end < n && IsWordByte(text[end]);
        if (glued_left || glued_right) continue;
      }
      hit = &e;
      break;
    }
    if (hit == nullptr) {
      ++pos;
      continue;
    }
    uint32_t begin = pos;
    uint32_t end = pos + static_cast<uint32_t>(hit->content.size());
    if (hit->lstrip) {
      while (begin > emitted && IsAsciiSpace(text[begin - 1])) --begin;
    }
    if (hit->rstrip) {
      while (end < n && IsAsciiSpace(text[end])) ++end;
    }
    if (begin > emitted) out.push_back({emitted, begin, -1});
    out.push_back({begin, end, hit->id});
    emitted = end;
    pos = end;
  }
  if (emitted < n) out.push_back({emitted, n, -1});
}

}  // namespace kvserve::tokenizer
