// A grammar compiled for one vocabulary: the byte automaton plus the allowed-token mask of each
// automaton state, computed the first time a sequence reaches that state (a trie walk) and kept
// for every later step and request (the grammar cache shares compiled grammars). Masks are
// functions of the state only, so constrained sampling is batch-invariant and deterministic.
//
//   state ──MaskFor──► bit per token: its bytes keep the automaton alive (EOS: state accepting)
//   state ──Advance(token)──► next state (kDead if the token was not allowed)
//
// Thread-safe: the automaton is immutable; a mask is computed under a mutex and published
// through an atomic pointer, so a step that finds its state's mask cached takes no lock; a
// mask, once published, never changes.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "structured/byte_dfa.h"
#include "structured/token_trie.h"

namespace kvserve::structured {

// One bit per token id.
using TokenMask = std::vector<uint64_t>;

inline bool Allowed(const TokenMask& mask, int32_t id) { return (mask[id >> 6] >> (id & 63)) & 1; }

class CompiledGrammar {
 public:
  CompiledGrammar(ByteDfa dfa, std::shared_ptr<const TokenTrie> trie);

  const ByteDfa& dfa() const { return dfa_; }
  const TokenTrie& trie() const { return *trie_; }
  int32_t start() const { return dfa_.start(); }

  // The mask for `state` (a live state). When no token can continue and the state is not
  // accepting (a vocabulary that cannot spell what the grammar needs), EOS is allowed so that the
  // sequence ends instead of sampling from nothing.
  const TokenMask& MaskFor(int32_t state) const;
  // The state after `token`; EOS keeps the state.
  int32_t Advance(int32_t state, int32_t token) const;
  // Sets every disallowed token's logit to -infinity (base::MaskLogits: branch-free per token).
  static void ApplyMask(const TokenMask& mask, std::span<float> logits);
  // Computes a mask without caching it (the benchmark's cold cost).
  TokenMask ComputeMask(int32_t state) const;

 private:
  ByteDfa dfa_;
  std::shared_ptr<const TokenTrie> trie_;
  mutable std::mutex mu_;                                        // guards owned_ and publishing
  mutable std::vector<std::unique_ptr<const TokenMask>> owned_;  // per state, null until computed
  std::unique_ptr<std::atomic<const TokenMask*>[]> published_;   // per state: owned_[s].get() once set
};

}  // namespace kvserve::structured
