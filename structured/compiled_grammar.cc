#include "structured/compiled_grammar.h"

#include <limits>

#include "base/check.h"
#include "base/token_mask.h"

namespace kvserve::structured {

CompiledGrammar::CompiledGrammar(ByteDfa dfa, std::shared_ptr<const TokenTrie> trie)
    : dfa_(std::move(dfa)),
      trie_(std::move(trie)),
      owned_(dfa_.num_states()),
      published_(new std::atomic<const TokenMask*>[static_cast<size_t>(dfa_.num_states())]) {
  for (int s = 0; s < dfa_.num_states(); ++s) published_[s].store(nullptr, std::memory_order_relaxed);
}

TokenMask CompiledGrammar::ComputeMask(int32_t state) const {
  KVS_CHECK(state >= 0 && state < dfa_.num_states(), "grammar state ", state);
  const TokenTrie& t = *trie_;
  TokenMask mask((static_cast<size_t>(t.vocab_size()) + 63) / 64, 0);
  bool any = false;
  struct Frame {
    int32_t node;
    int32_t state;
  };
  std::vector<Frame> stack = {{0, state}};
  const auto& nodes = t.nodes();
  const auto& edges = t.edges();
  const auto& tokens = t.tokens();
  while (!stack.empty()) {
    const Frame f = stack.back();
    stack.pop_back();
    const TokenTrie::Node& n = nodes[f.node];
    for (uint32_t e = n.first_edge; e < n.first_edge + n.num_edges; ++e) {
      const int32_t next = dfa_.Next(f.state, edges[e].byte);
      if (next == ByteDfa::kDead) continue;
      const TokenTrie::Node& child = nodes[edges[e].child];
      for (uint32_t k = child.first_token; k < child.first_token + child.num_tokens; ++k) {
        mask[tokens[k] >> 6] |= uint64_t{1} << (tokens[k] & 63);
        any = true;
      }
      if (child.num_edges > 0) stack.push_back({edges[e].child, next});
    }
  }
  const int32_t eos = t.eos();
  if (eos >= 0 && eos < t.vocab_size() && (dfa_.accepting(state) || !any)) {
    mask[eos >> 6] |= uint64_t{1} << (eos & 63);
  }
  return mask;
}

const TokenMask& CompiledGrammar::MaskFor(int32_t state) const {
  KVS_CHECK(state >= 0 && state < dfa_.num_states(), "grammar state ", state);
  if (const TokenMask* m = published_[state].load(std::memory_order_acquire)) return *m;
  std::lock_guard<std::mutex> lock(mu_);
  auto& slot = owned_[state];
  if (slot == nullptr) {
    slot = std::make_unique<const TokenMask>(ComputeMask(state));
    published_[state].store(slot.get(), std::memory_order_release);
  }
  return *slot;
}

int32_t CompiledGrammar::Advance(int32_t state, int32_t token) const {
  if (state == ByteDfa::kDead) return ByteDfa::kDead;
  if (token == trie_->eos()) return state;
  if (token < 0 || token >= trie_->vocab_size() || trie_->excluded(token)) return ByteDfa::kDead;
  return dfa_.Walk(state, trie_->token_bytes(token));
}

void CompiledGrammar::ApplyMask(const TokenMask& mask, std::span<float> logits) { base::MaskLogits(mask, logits); }

}  // namespace kvserve::structured
