#include "tokenizer/pre_tokenizer.h"

#include <algorithm>
#include <utility>

#include "base/check.h"
#include "tokenizer/byte_level.h"

namespace kvserve::tokenizer {
namespace {

struct Segment {
  uint32_t begin;
  uint32_t end;
  bool is_match;
};

// Cuts `piece` into alternating gap/match segments covering it entirely.
void Segments(std::string_view piece, const Regex& regex, bool invert,
              std::vector<ByteSpan>& matches, std::vector<Segment>& out) {
  matches.clear();
  out.clear();
  regex.FindAll(piece, matches);
  uint32_t prev = 0;
  for (const ByteSpan& m : matches) {
    if (m.begin > prev) out.push_back({prev, m.begin, invert});
    out.push_back({m.begin, m.end, !invert});
    prev = m.end;
  }
  if (prev < piece.size()) out.push_back({prev, static_cast<uint32_t>(piece.size()), invert});
}

// Applies a split behaviour to the segments, mirroring Hugging Face's definitions: a delimiter
// merges into its neighbour only when that neighbour is not itself a delimiter.
void Merge(std::vector<Segment>& segs, SplitBehavior behavior, std::vector<Segment>& out) {
  out.clear();
  switch (behavior) {
    case SplitBehavior::kRemoved:
      for (const Segment& s : segs) {
        if (!s.is_match) out.push_back(s);
      }
      return;
    case SplitBehavior::kIsolated:
      out = segs;
      return;
    case SplitBehavior::kMergedWithPrevious: {
      bool previous_match = false;
      for (const Segment& s : segs) {
        if (s.is_match && !previous_match && !out.empty()) {
          out.back().end = s.end;
        } else {
          out.push_back(s);
        }
        previous_match = s.is_match;
      }
      return;
    }
    case SplitBehavior::kMergedWithNext: {
      bool next_match = false;  // walking right to left
      for (size_t i = segs.size(); i-- > 0;) {
        const Segment& s = segs[i];
        if (s.is_match && !next_match && !out.empty()) {
          out.back().begin = s.begin;
        } else {
          out.push_back(s);
        }
        next_match = s.is_match;
      }
      std::reverse(out.begin(), out.end());
      return;
    }
    case SplitBehavior::kContiguous: {
      bool previous_match = false;
      for (size_t i = 0; i < segs.size(); ++i) {
        const Segment& s = segs[i];
        if (i > 0 && s.is_match == previous_match) {
          out.back().end = s.end;
        } else {
          out.push_back(s);
        }
        previous_match = s.is_match;
      }
      return;
    }
  }
}

class SplitStep final : public PreTokenizerStep {
 public:
  SplitStep(std::unique_ptr<Regex> regex, SplitBehavior behavior, bool invert)
      : regex_(std::move(regex)), behavior_(behavior), invert_(invert) {}

  void Apply(const PieceList& in, PieceList& out) const override {
    std::vector<ByteSpan> matches;
    std::vector<Segment> segs;
    std::vector<Segment> merged;
    out.first_at_text_start = in.first_at_text_start;
    for (size_t i = 0; i < in.size(); ++i) {
      const std::string_view piece = in[i];
      Segments(piece, *regex_, invert_, matches, segs);
      Merge(segs, behavior_, merged);
      for (const Segment& s : merged) out.add(piece.substr(s.begin, s.end - s.begin));
    }
  }

 private:
  std::unique_ptr<Regex> regex_;
  SplitBehavior behavior_;
  bool invert_;
};

class ByteLevelStep final : public PreTokenizerStep {
 public:
  ByteLevelStep(bool add_prefix_space, std::unique_ptr<Regex> regex)
      : add_prefix_space_(add_prefix_space), regex_(std::move(regex)) {}

  void Apply(const PieceList& in, PieceList& out) const override {
    std::vector<ByteSpan> matches;
    std::string prefixed;
    out.first_at_text_start = in.first_at_text_start;
    for (size_t i = 0; i < in.size(); ++i) {
      std::string_view piece = in[i];
      if (add_prefix_space_ && piece.front() != ' ') {
        prefixed.assign(" ");
        prefixed.append(piece);
        piece = prefixed;
      }
      if (regex_ == nullptr) {
        AddMapped(piece, out);
        continue;
      }
      // use_regex: the GPT-2 split, Isolated (gaps between matches are words too).
      matches.clear();
      regex_->FindAll(piece, matches);
      uint32_t prev = 0;
      for (const ByteSpan& m : matches) {
        if (m.begin > prev) AddMapped(piece.substr(prev, m.begin - prev), out);
        AddMapped(piece.substr(m.begin, m.end - m.begin), out);
        prev = m.end;
      }
      if (prev < piece.size()) AddMapped(piece.substr(prev), out);
    }
  }

 private:
  static void AddMapped(std::string_view word, PieceList& out) {
    std::string& buf = out.open_piece();
    const size_t begin = buf.size();
    AppendByteLevel(word, buf);
    out.close_piece(begin);
  }

  bool add_prefix_space_;
  std::unique_ptr<Regex> regex_;
};

class MetaspaceStep final : public PreTokenizerStep {
 public:
  MetaspaceStep(std::string replacement, PrependScheme scheme, bool split)
      : replacement_(std::move(replacement)), scheme_(scheme), split_(split) {
    KVS_CHECK(!replacement_.empty(), "Metaspace replacement must not be empty");
  }

  void Apply(const PieceList& in, PieceList& out) const override {
    std::string text;
    out.first_at_text_start = in.first_at_text_start;
    for (size_t i = 0; i < in.size(); ++i) {
      const std::string_view piece = in[i];
      text.clear();
      for (char c : piece) {
        if (c == ' ') {
          text.append(replacement_);
        } else {
          text.push_back(c);
        }
      }
      const bool starts_with_rep =
          std::string_view(text).substr(0, replacement_.size()) == replacement_;
      const bool prepend = !starts_with_rep &&
                           (scheme_ == PrependScheme::kAlways ||
                            (scheme_ == PrependScheme::kFirst && i == 0 && in.first_at_text_start));
      if (prepend) text.insert(0, replacement_);
      if (!split_) {
        out.add(text);
        continue;
      }
      // MergedWithNext on the replacement: each word starts with its "▁".
      size_t begin = 0;
      size_t pos = text.find(replacement_, 1);
      while (pos != std::string::npos) {
        out.add(std::string_view(text).substr(begin, pos - begin));
        begin = pos;
        pos = text.find(replacement_, pos + replacement_.size());
      }
      out.add(std::string_view(text).substr(begin));
    }
  }

 private:
  std::string replacement_;
  PrependScheme scheme_;
  bool split_;
};

}  // namespace

std::unique_ptr<PreTokenizerStep> PreTokenizer::Split(std::unique_ptr<Regex> pattern,
                                                      SplitBehavior behavior, bool invert) {
  KVS_CHECK(pattern != nullptr);
  return std::make_unique<SplitStep>(std::move(pattern), behavior, invert);
}

std::unique_ptr<PreTokenizerStep> PreTokenizer::ByteLevel(bool add_prefix_space,
                                                          std::unique_ptr<Regex> gpt2_regex) {
  return std::make_unique<ByteLevelStep>(add_prefix_space, std::move(gpt2_regex));
}

std::unique_ptr<PreTokenizerStep> PreTokenizer::Metaspace(std::string replacement,
                                                          PrependScheme scheme, bool split) {
  return std::make_unique<MetaspaceStep>(std::move(replacement), scheme, split);
}

std::unique_ptr<PreTokenizerStep> PreTokenizer::Digits(std::unique_ptr<Regex> digit_regex,
                                                       bool individual_digits) {
  return Split(std::move(digit_regex),
               individual_digits ? SplitBehavior::kIsolated : SplitBehavior::kContiguous,
               /*invert=*/false);
}

void PreTokenizer::Apply(PieceList& pieces, PieceList& scratch) const {
  for (const auto& step : steps_) {
    scratch.clear();
    step->Apply(pieces, scratch);
    std::swap(pieces, scratch);
  }
}

}  // namespace kvserve::tokenizer
