#include "gguf/split_name.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "base/absl_compat.h"

namespace kvserve::gguf {
namespace {

// Reads the run of digits that ends just before `end` in s; returns its start, or npos.
size_t DigitsBefore(std::string_view s, size_t end) {
  size_t i = end;
  while (i > 0 && s[i - 1] >= '0' && s[i - 1] <= '9') --i;
  return i == end ? std::string_view::npos : i;
}

std::optional<int> SmallNumber(std::string_view digits) {
  if (digits.empty() || digits.size() > 9) return std::nullopt;
  int n = 0;
  for (char c : digits) n = n * 10 + (c - '0');
  return n;
}

std::string Padded(int n, int width) {
  std::string s = std::to_string(n);
  if (static_cast<int>(s.size()) < width) s.insert(0, static_cast<size_t>(width) - s.size(), '0');
  return s;
}

}  // namespace

std::optional<SplitName> ParseSplitName(std::string_view path) {
  constexpr std::string_view kExt = ".gguf";
  constexpr std::string_view kOf = "-of-";
  if (path.size() <= kExt.size() || path.substr(path.size() - kExt.size()) != kExt)
    return std::nullopt;
  const size_t count_end = path.size() - kExt.size();
  const size_t count_begin = DigitsBefore(path, count_end);
  if (count_begin == std::string_view::npos || count_begin < kOf.size() ||
      path.substr(count_begin - kOf.size(), kOf.size()) != kOf) {
    return std::nullopt;
  }
  const size_t index_end = count_begin - kOf.size();
  const size_t index_begin = DigitsBefore(path, index_end);
  if (index_begin == std::string_view::npos || index_begin < 1 || path[index_begin - 1] != '-') {
    return std::nullopt;
  }
  const size_t stem_end = index_begin - 1;
  if (stem_end == 0 || path[stem_end - 1] == '/') return std::nullopt;  // no stem
  const auto index = SmallNumber(path.substr(index_begin, index_end - index_begin));
  const auto count = SmallNumber(path.substr(count_begin, count_end - count_begin));
  if (!index || !count) return std::nullopt;
  SplitName name;
  name.stem = std::string(path.substr(0, stem_end));
  name.index = *index;
  name.count = *count;
  name.index_width = static_cast<int>(index_end - index_begin);
  name.count_width = static_cast<int>(count_end - count_begin);
  return name;
}

std::string SplitMemberPath(const SplitName& name, int index) {
  return absl::StrCat(name.stem, "-", Padded(index, name.index_width), "-of-",
                      Padded(name.count, name.count_width), ".gguf");
}

std::string SplitFilePath(std::string_view stem, int index, int count) {
  return absl::StrCat(base::AsAbsl(stem), "-", Padded(index, 5), "-of-", Padded(count, 5), ".gguf");
}

}  // namespace kvserve::gguf
