#include "tokenizer/token_decoder.h"

#include <optional>

#include "absl/strings/str_cat.h"
#include "tokenizer/byte_level.h"

namespace kvserve::tokenizer {
namespace {

// Non-overlapping, left to right, in one pass into a new string: linear in the output. (An
// in-place replace shifts the tail at every match, quadratic when a pattern matches often:
// the fuzzer found a tokenizer.json whose Replace step took seconds for one token.)
void ReplaceAll(std::string& s, std::string_view from, std::string_view to) {
  if (from.empty()) return;
  size_t pos = s.find(from);
  if (pos == std::string::npos) return;
  std::string out;
  out.reserve(s.size());
  size_t start = 0;
  while (pos != std::string::npos) {
    out.append(s, start, pos - start);
    out.append(to);
    start = pos + from.size();
    pos = s.find(from, start);
  }
  out.append(s, start, std::string::npos);
  s.swap(out);
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// "<0xE2>" -> 0xE2.
std::optional<uint8_t> ByteFallbackToken(std::string_view t) {
  if (t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>') return std::nullopt;
  const int hi = HexDigit(t[3]);
  const int lo = HexDigit(t[4]);
  if (hi < 0 || lo < 0) return std::nullopt;
  return static_cast<uint8_t>(hi * 16 + lo);
}

}  // namespace

absl::StatusOr<TokenDecoder> TokenDecoder::Create(std::span<const std::string_view> tokens,
                                                  std::span<const DecodeStep> steps) {
  TokenDecoder d;
  for (const DecodeStep& step : steps) {
    if (step.kind == DecodeStep::Kind::kStrip) {
      if (step.stop != 0) {
        return absl::UnimplementedError("decoder Strip with stop > 0 is not supported");
      }
      if (step.content.size() != 1 || static_cast<uint8_t>(step.content[0]) >= 0x80) {
        return absl::UnimplementedError(absl::StrCat(
            "decoder Strip content must be one ASCII character, got \"", step.content, "\""));
      }
      if (step.start < 0) return absl::InvalidArgumentError("decoder Strip start is negative");
      d.strip_char_ = step.content[0];
      d.strip_count_ = step.start;
    } else if (step.kind == DecodeStep::Kind::kMetaspace) {
      if (step.pattern.empty()) {
        return absl::InvalidArgumentError("decoder Metaspace replacement is empty");
      }
      if (step.prepend_scheme != PrependScheme::kNever) {
        d.strip_char_ = ' ';
        d.strip_count_ = 1;
      }
    }
  }
  d.offsets_.reserve(tokens.size() + 1);
  d.offsets_.push_back(0);
  std::string t;
  for (std::string_view token : tokens) {
    t.assign(token);
    for (const DecodeStep& step : steps) {
      switch (step.kind) {
        case DecodeStep::Kind::kByteLevel:
          // A token with characters outside the byte alphabet (typically an added token) is
          // taken as plain UTF-8, as HF does.
          if (auto raw = ByteLevelToBytes(t)) t = std::move(*raw);
          break;
        case DecodeStep::Kind::kReplace:
          ReplaceAll(t, step.pattern, step.content);
          break;
        case DecodeStep::Kind::kByteFallback:
          if (auto b = ByteFallbackToken(t)) t.assign(1, static_cast<char>(*b));
          break;
        case DecodeStep::Kind::kMetaspace:
          ReplaceAll(t, step.pattern, " ");
          break;
        case DecodeStep::Kind::kFuse:
        case DecodeStep::Kind::kStrip:
          break;
      }
    }
    d.data_.append(t);
    d.offsets_.push_back(static_cast<uint32_t>(d.data_.size()));
  }
  return d;
}

}  // namespace kvserve::tokenizer
