// A deterministic automaton over bytes, compiled once per grammar from a RegexNode: Thompson NFA,
// then subset construction over byte classes (bytes no edge tells apart share a column), built
// eagerly so that the compiled automaton is immutable and shared freely between threads.
//
//   state ids 0..num_states()-1, start 0; kDead (-1) is the absorbing reject state.
//   Next(s, b) is a table lookup: transitions_[s * num_classes + class_of_[b]].
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "structured/regex_ast.h"

namespace kvserve::structured {

class ByteDfa {
 public:
  static constexpr int32_t kDead = -1;

  // InvalidArgument (naming the limit) when the automaton would exceed `max_states`.
  static absl::StatusOr<ByteDfa> Compile(const RegexNode& regex, int max_states = 20000);

  int32_t start() const { return 0; }
  int32_t Next(int32_t state, uint8_t byte) const {
    return transitions_[static_cast<size_t>(state) * num_classes_ + class_of_[byte]];
  }
  // Follows `bytes` from `state`; kDead as soon as one is rejected.
  int32_t Walk(int32_t state, std::string_view bytes) const;
  bool accepting(int32_t state) const { return accepting_[state] != 0; }
  // True when no byte leads anywhere from `state` (only the end of the text is allowed).
  bool final_only(int32_t state) const { return final_only_[state] != 0; }
  bool Matches(std::string_view text) const;
  int num_states() const { return static_cast<int>(accepting_.size()); }
  int num_classes() const { return num_classes_; }

 private:
  std::array<uint8_t, 256> class_of_{};
  int num_classes_ = 0;
  std::vector<int32_t> transitions_;  // num_states x num_classes
  std::vector<uint8_t> accepting_;
  std::vector<uint8_t> final_only_;
};

}  // namespace kvserve::structured
