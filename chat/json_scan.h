// Finding where a JSON value ends inside longer text (a tool call followed by more text), without
// parsing it: strings and escapes are honoured, brackets are counted. The full parse happens
// afterwards on the slice this returns.
#pragma once

#include <cstddef>
#include <string_view>

namespace kvserve::chat {

// `text[pos]` must be '{' or '['. Returns the index one past the matching bracket, or npos when
// the text ends first (a truncated value) or brackets do not match.
size_t JsonValueEnd(std::string_view text, size_t pos);

// Index of the first byte at or after `pos` that is not JSON whitespace (or text.size()).
size_t SkipJsonSpace(std::string_view text, size_t pos);

// Length of the longest suffix of `text` that is a proper prefix of `marker`: bytes that may be
// the first part of a marker split across tokens, to hold back while streaming.
size_t PartialMarkerSuffix(std::string_view text, std::string_view marker);

}  // namespace kvserve::chat
