#include "chat/json_scan.h"

#include <algorithm>
#include <vector>

namespace kvserve::chat {

size_t JsonValueEnd(std::string_view text, size_t pos) {
  if (pos >= text.size() || (text[pos] != '{' && text[pos] != '[')) return std::string_view::npos;
  std::vector<char> open;  // expected closers
  bool in_string = false;
  for (size_t i = pos; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped character cannot end the string
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '{') {
      open.push_back('}');
    } else if (c == '[') {
      open.push_back(']');
    } else if (c == '}' || c == ']') {
      if (open.empty() || open.back() != c) return std::string_view::npos;
      open.pop_back();
      if (open.empty()) return i + 1;
    }
  }
  return std::string_view::npos;
}

size_t SkipJsonSpace(std::string_view text, size_t pos) {
  while (pos < text.size() &&
         (text[pos] == ' ' || text[pos] == '\n' || text[pos] == '\r' || text[pos] == '\t')) {
    ++pos;
  }
  return pos;
}

size_t PartialMarkerSuffix(std::string_view text, std::string_view marker) {
  const size_t longest = std::min(text.size(), marker.empty() ? 0 : marker.size() - 1);
  for (size_t len = longest; len > 0; --len) {
    if (text.substr(text.size() - len) == marker.substr(0, len)) return len;
  }
  return 0;
}

}  // namespace kvserve::chat
