#include "structured/byte_dfa.h"

#include <algorithm>
#include <map>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"

namespace kvserve::structured {
namespace {

// Thompson NFA: a state has one byte-set edge or epsilon edges.
struct Nfa {
  struct State {
    int set = -1;  // index into sets, or -1
    int next = -1;
    std::vector<int> eps;
  };
  std::vector<State> states;
  std::vector<ByteSet> sets;

  int Add() {
    states.emplace_back();
    return static_cast<int>(states.size()) - 1;
  }
  // Builds `node` between fresh states; returns {start, end}.
  std::pair<int, int> Build(const RegexNode& node) {
    using K = RegexNode::Kind;
    const int s = Add();
    switch (node.kind) {
      case K::kEmpty:
        return {s, s};
      case K::kBytes: {
        const int e = Add();
        sets.push_back(node.bytes);
        states[s].set = static_cast<int>(sets.size()) - 1;
        states[s].next = e;
        return {s, e};
      }
      case K::kSeq: {
        int cur = s;
        for (const RegexNode& k : node.kids) {
          auto [ks, ke] = Build(k);
          states[cur].eps.push_back(ks);
          cur = ke;
        }
        return {s, cur};
      }
      case K::kAlt: {
        const int e = Add();
        for (const RegexNode& k : node.kids) {
          auto [ks, ke] = Build(k);
          states[s].eps.push_back(ks);
          states[ke].eps.push_back(e);
        }
        return {s, e};
      }
      case K::kRepeat: {
        const RegexNode& kid = node.kids[0];
        if (node.kids.size() == 2) {  // separated, unbounded, min 0 or 1: one item copy
          const int e = Add();
          auto [is, ie] = Build(kid);
          auto [ss, se] = Build(node.kids[1]);
          states[s].eps.push_back(is);
          if (node.min == 0) states[s].eps.push_back(e);
          states[ie].eps.push_back(e);
          states[ie].eps.push_back(ss);
          states[se].eps.push_back(is);
          return {s, e};
        }
        int cur = s;
        for (int i = 0; i < node.min; ++i) {
          auto [ks, ke] = Build(kid);
          states[cur].eps.push_back(ks);
          cur = ke;
        }
        if (node.max < 0) {  // kid*
          const int loop = Add();
          states[cur].eps.push_back(loop);
          auto [ks, ke] = Build(kid);
          states[loop].eps.push_back(ks);
          states[ke].eps.push_back(loop);
          return {s, loop};
        }
        const int e = Add();
        for (int i = node.min; i < node.max; ++i) {  // optional copies
          states[cur].eps.push_back(e);
          auto [ks, ke] = Build(kid);
          states[cur].eps.push_back(ks);
          cur = ke;
        }
        states[cur].eps.push_back(e);
        return {s, e};
      }
    }
    return {s, s};
  }

  void Closure(std::vector<int>& set, std::vector<uint8_t>& mark) const {
    std::vector<int> stack(set.begin(), set.end());
    for (int x : set) mark[x] = 1;
    while (!stack.empty()) {
      const int x = stack.back();
      stack.pop_back();
      for (int y : states[x].eps) {
        if (!mark[y]) {
          mark[y] = 1;
          set.push_back(y);
          stack.push_back(y);
        }
      }
    }
    for (int x : set) mark[x] = 0;
    std::sort(set.begin(), set.end());
  }
};

}  // namespace

absl::StatusOr<ByteDfa> ByteDfa::Compile(const RegexNode& regex, int max_states) {
  Nfa nfa;
  auto [start, accept] = nfa.Build(regex);
  if (nfa.states.size() > 2'000'000) {
    return absl::InvalidArgumentError("the grammar is too large (its automaton exceeds 2M NFA states)");
  }
  ByteDfa dfa;
  // Byte classes: refine the partition by every edge set.
  std::array<int, 256> cls{};
  int num = 1;
  for (const ByteSet& set : nfa.sets) {
    std::map<std::pair<int, bool>, int> renumber;
    int next = 0;
    std::array<int, 256> refined{};
    for (int b = 0; b < 256; ++b) {
      auto [it, fresh] = renumber.try_emplace({cls[b], set.test(b)}, next);
      if (fresh) ++next;
      refined[b] = it->second;
    }
    cls = refined;
    num = next;
  }
  std::vector<int> representative(num, -1);
  for (int b = 0; b < 256; ++b) {
    dfa.class_of_[b] = static_cast<uint8_t>(cls[b]);
    if (representative[cls[b]] < 0) representative[cls[b]] = b;
  }
  dfa.num_classes_ = num;

  std::vector<uint8_t> mark(nfa.states.size(), 0);
  absl::flat_hash_map<std::vector<int>, int32_t> ids;
  std::vector<std::vector<int>> sets;
  std::vector<int> first = {start};
  nfa.Closure(first, mark);
  ids.emplace(first, 0);
  sets.push_back(first);
  for (size_t i = 0; i < sets.size(); ++i) {
    const std::vector<int> cur = sets[i];
    dfa.accepting_.push_back(std::binary_search(cur.begin(), cur.end(), accept) ? 1 : 0);
    bool any = false;
    for (int c = 0; c < num; ++c) {
      const int b = representative[c];
      std::vector<int> next;
      for (int x : cur) {
        const auto& st = nfa.states[x];
        if (st.set >= 0 && nfa.sets[st.set].test(b) && !mark[st.next]) {
          mark[st.next] = 1;
          next.push_back(st.next);
        }
      }
      for (int x : next) mark[x] = 0;
      if (next.empty()) {
        dfa.transitions_.push_back(kDead);
        continue;
      }
      any = true;
      nfa.Closure(next, mark);
      auto [it, fresh] = ids.try_emplace(next, static_cast<int32_t>(sets.size()));
      if (fresh) {
        if (static_cast<int>(sets.size()) >= max_states) {
          return absl::InvalidArgumentError(absl::StrCat(
              "the grammar is too complex: its automaton exceeds ", max_states, " states"));
        }
        sets.push_back(std::move(next));
      }
      dfa.transitions_.push_back(it->second);
    }
    dfa.final_only_.push_back(any ? 0 : 1);
  }
  // Prune dead ends: a state from which no accepting state can be reached (a branch that
  // matches nothing, e.g. a grammar's recursion cut at its depth bound) becomes kDead, so that
  // every live state can still complete a match and masks never lead a sequence into a corner.
  const size_t n = sets.size();
  std::vector<std::vector<int32_t>> reverse(n);
  for (size_t s = 0; s < n; ++s) {
    for (int c = 0; c < num; ++c) {
      const int32_t t = dfa.transitions_[s * num + c];
      if (t >= 0) reverse[t].push_back(static_cast<int32_t>(s));
    }
  }
  std::vector<uint8_t> live(n, 0);
  std::vector<int32_t> queue;
  for (size_t s = 0; s < n; ++s) {
    if (dfa.accepting_[s]) {
      live[s] = 1;
      queue.push_back(static_cast<int32_t>(s));
    }
  }
  while (!queue.empty()) {
    const int32_t t = queue.back();
    queue.pop_back();
    for (int32_t s : reverse[t]) {
      if (!live[s]) {
        live[s] = 1;
        queue.push_back(s);
      }
    }
  }
  if (!live[0]) return absl::InvalidArgumentError("the grammar matches no output at all");
  for (size_t s = 0; s < n; ++s) {
    bool any = false;
    for (int c = 0; c < num; ++c) {
      int32_t& t = dfa.transitions_[s * num + c];
      if (t >= 0 && !live[t]) t = kDead;
      any |= t >= 0;
    }
    dfa.final_only_[s] = any ? 0 : 1;
  }
  return dfa;
}

int32_t ByteDfa::Walk(int32_t state, std::string_view bytes) const {
  for (unsigned char b : bytes) {
    if (state == kDead) return kDead;
    state = Next(state, b);
  }
  return state;
}

bool ByteDfa::Matches(std::string_view text) const {
  const int32_t s = Walk(start(), text);
  return s != kDead && accepting(s);
}

}  // namespace kvserve::structured
