#include "tokenizer/utf8.h"

namespace kvserve::tokenizer {
namespace {

// Allowed range of the second byte for each lead byte (Unicode Table 3-7); later continuation
// bytes are always 0x80..0xBF.
struct LeadInfo {
  uint8_t length;  // 0: not a lead byte
  uint8_t lo;
  uint8_t hi;
};

constexpr LeadInfo Lead(uint8_t b) {
  if (b < 0x80) return {1, 0, 0};
  if (b < 0xC2) return {0, 0, 0};
  if (b < 0xE0) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};
  if (b < 0xF0) return {3, 0x80, 0xBF};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b < 0xF4) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

}  // namespace

Utf8Scan ScanUtf8(std::string_view s, size_t pos) {
  const auto b0 = static_cast<uint8_t>(s[pos]);
  const LeadInfo lead = Lead(b0);
  if (lead.length == 1) return {Utf8Step::kValid, 1, b0};
  if (lead.length == 0) return {Utf8Step::kInvalid, 1, 0};
  char32_t cp = b0 & (0xFF >> (lead.length + 1));
  for (uint32_t i = 1; i < lead.length; ++i) {
    if (pos + i >= s.size()) return {Utf8Step::kIncomplete, i, 0};
    const auto b = static_cast<uint8_t>(s[pos + i]);
    const uint8_t lo = i == 1 ? lead.lo : 0x80;
    const uint8_t hi = i == 1 ? lead.hi : 0xBF;
    if (b < lo || b > hi) return {Utf8Step::kInvalid, i, 0};
    cp = (cp << 6) | (b & 0x3F);
  }
  return {Utf8Step::kValid, lead.length, cp};
}

bool IsValidUtf8(std::string_view s) {
  size_t pos = 0;
  while (pos < s.size()) {
    // ASCII fast path: most text is mostly ASCII.
    if (static_cast<uint8_t>(s[pos]) < 0x80) {
      ++pos;
      continue;
    }
    const Utf8Scan scan = ScanUtf8(s, pos);
    if (scan.step != Utf8Step::kValid) return false;
    pos += scan.length;
  }
  return true;
}

void AppendUtf8Lossy(std::string_view s, std::string& out) {
  size_t pos = 0;
  size_t run = 0;  // start of the pending run of valid bytes
  while (pos < s.size()) {
    if (static_cast<uint8_t>(s[pos]) < 0x80) {
      ++pos;
      continue;
    }
    const Utf8Scan scan = ScanUtf8(s, pos);
    if (scan.step == Utf8Step::kValid) {
      pos += scan.length;
      continue;
    }
    out.append(s.substr(run, pos - run));
    out.append(kReplacementChar);
    pos += scan.length;
    run = pos;
  }
  out.append(s.substr(run));
}

size_t CompleteUtf8Prefix(std::string_view s) {
  // Only the last 3 bytes can belong to an incomplete sequence; find the last lead byte there.
  const size_t start = s.size() > 3 ? s.size() - 3 : 0;
  for (size_t pos = s.size(); pos > start; --pos) {
    const auto b = static_cast<uint8_t>(s[pos - 1]);
    if ((b & 0xC0) == 0x80) continue;  // continuation byte: keep looking for its lead
    const Utf8Scan scan = ScanUtf8(s, pos - 1);
    return scan.step == Utf8Step::kIncomplete ? pos - 1 : s.size();
  }
  return s.size();
}

void AppendUtf8(char32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace kvserve::tokenizer
