#include "structured/grammar_cache.h"

namespace kvserve::structured {

GrammarCache::GrammarCache(std::shared_ptr<const TokenTrie> trie, size_t capacity)
    : trie_(std::move(trie)), capacity_(capacity == 0 ? 1 : capacity) {}

absl::StatusOr<std::shared_ptr<const CompiledGrammar>> GrammarCache::Get(const GrammarSpec& spec) {
  const std::string key = spec.Key();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = entries_.find(key); it != entries_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second.pos);
      ++hits_;
      return it->second.grammar;
    }
  }
  // Compile outside the lock; two threads racing on the same key both compile, one wins.
  absl::StatusOr<RegexNode> regex = ToRegex(spec);
  if (!regex.ok()) return regex.status();
  absl::StatusOr<ByteDfa> dfa = ByteDfa::Compile(*regex);
  if (!dfa.ok()) return absl::InvalidArgumentError(spec.field + ": " + std::string(dfa.status().message()));
  auto grammar = std::make_shared<const CompiledGrammar>(*std::move(dfa), trie_);
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = entries_.find(key); it != entries_.end()) return it->second.grammar;
  lru_.push_front(key);
  entries_.emplace(key, Entry{grammar, lru_.begin()});
  while (entries_.size() > capacity_) {
    entries_.erase(lru_.back());
    lru_.pop_back();
  }
  return grammar;
}

size_t GrammarCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

int64_t GrammarCache::hits() const {
  std::lock_guard<std::mutex> lock(mu_);
  return hits_;
}

}  // namespace kvserve::structured
