// The vocabulary as a byte trie, built once per served model: each token's bytes (as they appear
// in generated text) spell a path; tokens end at nodes. A grammar's allowed-token mask for one
// automaton state is one walk of the trie in lock step with the automaton, pruning every subtree
// whose prefix the automaton already rejects, so a mask costs far less than testing every token.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kvserve::structured {

class TokenTrie {
 public:
  // `token_bytes[i]` is token i's text; `excluded` (special tokens: BOS, chat markers, ...) are
  // never allowed by a grammar. `eos` is allowed exactly where the grammar may end.
  TokenTrie(const std::vector<std::string>& token_bytes, const std::vector<int32_t>& excluded, int32_t eos);

  struct Edge {
    uint8_t byte;
    int32_t child;
  };
  struct Node {
    uint32_t first_edge = 0;  // edges_[first_edge, first_edge + num_edges), sorted by byte
    uint32_t num_edges = 0;
    uint32_t first_token = 0;  // tokens_[first_token, first_token + num_tokens)
    uint32_t num_tokens = 0;
  };

  const std::vector<Node>& nodes() const { return nodes_; }
  const std::vector<Edge>& edges() const { return edges_; }
  const std::vector<int32_t>& tokens() const { return tokens_; }
  const std::string& token_bytes(int32_t id) const { return bytes_[id]; }
  int32_t vocab_size() const { return static_cast<int32_t>(bytes_.size()); }
  int32_t eos() const { return eos_; }
  bool excluded(int32_t id) const { return excluded_[id] != 0; }

 private:
  std::vector<std::string> bytes_;
  std::vector<uint8_t> excluded_;
  int32_t eos_;
  std::vector<Node> nodes_;  // node 0: the root (the empty prefix)
  std::vector<Edge> edges_;
  std::vector<int32_t> tokens_;
};

}  // namespace kvserve::structured
