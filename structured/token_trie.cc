#include "structured/token_trie.h"

#include <algorithm>
#include <map>

namespace kvserve::structured {

TokenTrie::TokenTrie(const std::vector<std::string>& token_bytes, const std::vector<int32_t>& excluded,
                     int32_t eos)
    : bytes_(token_bytes), excluded_(token_bytes.size(), 0), eos_(eos) {
  for (int32_t id : excluded) {
    if (id >= 0 && id < vocab_size()) excluded_[id] = 1;
  }
  if (eos >= 0 && eos < vocab_size()) excluded_[eos] = 1;  // handled apart from its text
  // Build with maps, then flatten breadth-first into sorted edge ranges.
  struct Build {
    std::map<uint8_t, int32_t> kids;
    std::vector<int32_t> tokens;
  };
  std::vector<Build> tmp(1);
  for (int32_t id = 0; id < vocab_size(); ++id) {
    if (excluded_[id] || bytes_[id].empty()) continue;
    int32_t node = 0;
    for (unsigned char b : bytes_[id]) {
      auto it = tmp[node].kids.find(b);
      if (it == tmp[node].kids.end()) {
        tmp.emplace_back();
        it = tmp[node].kids.emplace(b, static_cast<int32_t>(tmp.size()) - 1).first;
      }
      node = it->second;
    }
    tmp[node].tokens.push_back(id);
  }
  nodes_.resize(tmp.size());
  for (size_t n = 0; n < tmp.size(); ++n) {
    nodes_[n].first_edge = static_cast<uint32_t>(edges_.size());
    nodes_[n].num_edges = static_cast<uint32_t>(tmp[n].kids.size());
    for (const auto& [b, child] : tmp[n].kids) edges_.push_back({b, child});
    nodes_[n].first_token = static_cast<uint32_t>(tokens_.size());
    nodes_[n].num_tokens = static_cast<uint32_t>(tmp[n].tokens.size());
    tokens_.insert(tokens_.end(), tmp[n].tokens.begin(), tmp[n].tokens.end());
  }
}

}  // namespace kvserve::structured
