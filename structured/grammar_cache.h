// Compiled grammars shared between requests: compiling a schema costs milliseconds and its
// token masks are filled lazily as sequences visit states, so requests with the same
// response_format reuse both. Least recently used entries go beyond `capacity`.
// Thread-safe (front-end threads compile; the engine thread only reads compiled grammars).
#pragma once

#include <list>
#include <memory>
#include <mutex>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "structured/compiled_grammar.h"
#include "structured/grammar_spec.h"

namespace kvserve::structured {

class GrammarCache {
 public:
  GrammarCache(std::shared_ptr<const TokenTrie> trie, size_t capacity = 64);

  absl::StatusOr<std::shared_ptr<const CompiledGrammar>> Get(const GrammarSpec& spec);
  size_t size() const;
  int64_t hits() const;

 private:
  std::shared_ptr<const TokenTrie> trie_;
  size_t capacity_;
  mutable std::mutex mu_;
  std::list<std::string> lru_;  // most recent first
  struct Entry {
    std::shared_ptr<const CompiledGrammar> grammar;
    std::list<std::string>::iterator pos;
  };
  absl::flat_hash_map<std::string, Entry> entries_;
  int64_t hits_ = 0;
};

}  // namespace kvserve::structured
