// Names of split GGUF files, as llama.cpp's gguf-split writes them:
//
//   <stem>-<index>-of-<count>.gguf      e.g. model-Q4_K_M-00002-of-00003.gguf
//
// index runs 1..count in the name (the split.no key inside is 0-based). Both numbers are
// zero-padded to 5 digits when we write; any width is read, and a set's other members are
// looked for with the widths of the name given.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace kvserve::gguf {

struct SplitName {
  std::string stem;  // everything before "-<index>-of-<count>.gguf", directory included
  int index = 0;     // 1-based
  int count = 0;
  int index_width = 5;
  int count_width = 5;
};

// The split name `path` follows, or nullopt when it is not one (an ordinary .gguf file).
std::optional<SplitName> ParseSplitName(std::string_view path);
// The path of member `index` (1-based) of the set `name` belongs to.
std::string SplitMemberPath(const SplitName& name, int index);
// The path of member `index` of `count` with the default 5-digit widths.
std::string SplitFilePath(std::string_view stem, int index, int count);

}  // namespace kvserve::gguf
