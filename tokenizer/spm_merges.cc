#include "tokenizer/spm_merges.h"

#include <algorithm>
#include <cmath>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"

namespace kvserve::tokenizer {

absl::StatusOr<std::vector<BpeModel::IdMerge>> SpmMergesFromScores(
    std::span<const std::string> tokens, std::span<const float> scores,
    const std::vector<bool>& mergeable) {
  if (scores.size() != tokens.size() || mergeable.size() != tokens.size()) {
    return absl::InvalidArgumentError(absl::StrCat(tokens.size(), " tokens but ", scores.size(),
                                                   " scores and ", mergeable.size(), " flags"));
  }
  absl::flat_hash_map<std::string_view, int32_t> ids;
  ids.reserve(tokens.size());
  for (size_t id = 0; id < tokens.size(); ++id) {
    if (!mergeable[id] || tokens[id].empty()) continue;
    if (!std::isfinite(scores[id])) {
      return absl::InvalidArgumentError(
          absl::StrCat("token ", id, " (\"", tokens[id], "\") has a score that is not finite"));
    }
    ids.try_emplace(tokens[id], static_cast<int32_t>(id));  // the first of duplicates wins
  }
  // Rules first with the merged token's score in `rank`, ranked once all scores are known.
  std::vector<BpeModel::IdMerge> merges;
  std::vector<float> merged_scores;
  for (size_t id = 0; id < tokens.size(); ++id) {
    if (!mergeable[id]) continue;
    const std::string_view t = tokens[id];
    bool any = false;
    for (size_t k = 1; k < t.size(); ++k) {
      if ((static_cast<uint8_t>(t[k]) & 0xC0) == 0x80) continue;  // inside a character
      auto l = ids.find(t.substr(0, k));
      if (l == ids.end()) continue;
      auto r = ids.find(t.substr(k));
      if (r == ids.end()) continue;
      merges.push_back({l->second, r->second, static_cast<int32_t>(id), 0});
      any = true;
    }
    if (any) merged_scores.push_back(scores[id]);
  }
  std::sort(merged_scores.begin(), merged_scores.end(), std::greater<float>());
  merged_scores.erase(std::unique(merged_scores.begin(), merged_scores.end()), merged_scores.end());
  for (BpeModel::IdMerge& m : merges) {
    const float s = scores[static_cast<size_t>(m.merged)];
    // Position in the descending list: the number of distinct scores strictly above s.
    m.rank = static_cast<int32_t>(
        std::lower_bound(merged_scores.begin(), merged_scores.end(), s, std::greater<float>()) -
        merged_scores.begin());
  }
  return merges;
}

}  // namespace kvserve::tokenizer
