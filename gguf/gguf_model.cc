// GgufModel: what `--model X` names when X is GGUF, resolved to the files that hold it:
//
//   X is a file          -> that file; if its name is <stem>-0000K-of-0000N.gguf, the whole
//                           set of N files (any member may be named)
//   X is a directory     -> its only model: one .gguf file or one split set; several
//                           models (or none) are an error listing what was found
//
// A split set is consistent when every member exists, member K (1-based in the name) says
// split.no = K-1 and split.count = N, no tensor appears in two members, and the total
// tensor count equals split.tensors.count. Metadata comes from the first member (gguf-split
// writes the model's keys there only).
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <limits>
#include <map>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/absl_compat.h"
#include "base/check.h"
#include "gguf/gguf_file.h"
#include "gguf/split_name.h"

namespace kvserve::gguf {
namespace {

constexpr std::string_view kSplitNo = "split.no";
constexpr std::string_view kSplitCount = "split.count";
constexpr std::string_view kSplitTensors = "split.tensors.count";

bool IsDirectory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}
bool Exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

// An integer metadata value of any width, or nullopt (absent, or not an integer).
std::optional<int64_t> IntValue(const GgufLayout& layout, std::string_view key) {
  auto it = layout.metadata.find(key);
  if (it == layout.metadata.end()) return std::nullopt;
  if (const auto* s = std::get_if<int64_t>(&it->second.v)) return *s;
  if (const auto* u = std::get_if<uint64_t>(&it->second.v)) {
    if (*u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      return static_cast<int64_t>(*u);
  }
  return std::nullopt;
}

absl::Status SplitError(const std::string& path, std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", base::AsAbsl(what)));
}

// The model a directory holds: a single file, or the first member of its one split set.
absl::StatusOr<std::string> ResolveDirectory(const std::string& dir) {
  std::error_code ec;
  std::filesystem::directory_iterator it(dir, ec);
  if (ec) return absl::NotFoundError(absl::StrCat(dir, ": cannot list: ", ec.message()));
  std::map<std::string, std::string> models;  // what we show -> the path to open
  for (; it != std::filesystem::directory_iterator(); it.increment(ec)) {
    if (ec) return absl::NotFoundError(absl::StrCat(dir, ": cannot list: ", ec.message()));
    const std::string name = it->path().filename().string();
    if (name.size() <= 5 || name.substr(name.size() - 5) != ".gguf" || name[0] == '.') continue;
    if (!it->is_regular_file(ec)) continue;  // follows symlinks (a model store's links)
    if (const auto split = ParseSplitName(name)) {
      SplitName first = *split;
      first.index = 1;
      const std::string shown =
          absl::StrCat(SplitMemberPath(first, 1), " (a set of ", split->count, ")");
      first.stem = absl::StrCat(dir, "/", first.stem);
      models[shown] = SplitMemberPath(first, 1);
    } else {
      models[name] = absl::StrCat(dir, "/", name);
    }
  }
  if (models.empty())
    return absl::NotFoundError(absl::StrCat(dir, ": no .gguf file in the directory"));
  if (models.size() > 1) {
    std::vector<std::string> shown;
    for (const auto& [name, unused] : models) shown.push_back(name);
    return absl::InvalidArgumentError(absl::StrCat(dir, ": holds ", models.size(), " GGUF models (",
                                                   absl::StrJoin(shown, ", "),
                                                   "); name the file to serve"));
  }
  return models.begin()->second;
}

}  // namespace

absl::StatusOr<GgufModel> GgufModel::Open(const std::string& path) {
  if (!Exists(path)) return absl::NotFoundError(absl::StrCat(path, ": no such file or directory"));
  std::string file = path;
  if (IsDirectory(path)) {
    KVS_ASSIGN_OR_RETURN(file, ResolveDirectory(path));
  }
  GgufModel m;
  const std::optional<SplitName> split = ParseSplitName(file);
  if (!split) {
    KVS_ASSIGN_OR_RETURN(auto f, GgufFile::Open(file));
    const std::optional<int64_t> count = IntValue(f->layout(), kSplitCount);
    if (count && *count > 1) {
      return SplitError(
          file, absl::StrCat("split.count is ", *count,
                             ": one part of a split model, but the file name does not "
                             "end -0000K-of-0000N.gguf, so its other parts cannot be found"));
    }
    m.files_.push_back(std::move(f));
    m.description_ = file;
  } else {
    if (split->count < 1 || split->index < 1 || split->index > split->count) {
      return absl::InvalidArgumentError(
          absl::StrCat(file, ": split file name says part ", split->index, " of ", split->count));
    }
    for (int k = 1; k <= split->count; ++k) {
      const std::string member = SplitMemberPath(*split, k);
      if (!Exists(member)) {
        return absl::NotFoundError(absl::StrCat(member, ": part ", k, " of the ", split->count,
                                                "-file split model is missing"));
      }
    }
    for (int k = 1; k <= split->count; ++k) {
      const std::string member = SplitMemberPath(*split, k);
      KVS_ASSIGN_OR_RETURN(auto f, GgufFile::Open(member));
      const std::optional<int64_t> no = IntValue(f->layout(), kSplitNo);
      const std::optional<int64_t> count = IntValue(f->layout(), kSplitCount);
      const bool required = split->count > 1;  // a "-00001-of-00001" file may lack the keys
      if (required && (!no || !count)) {
        return SplitError(member,
                          "a split model's part without integer split.no and split.count keys");
      }
      if (count && *count != split->count) {
        return SplitError(member, absl::StrCat("split.count is ", *count,
                                               " but the file name says ", split->count, " parts"));
      }
      if (no && *no != k - 1) {
        return SplitError(member, absl::StrCat("split.no is ", *no, " but the file name says part ",
                                               k, " (split.no ", k - 1, ")"));
      }
      m.files_.push_back(std::move(f));
    }
    int64_t seen = 0;
    for (const auto& f : m.files_) seen += static_cast<int64_t>(f->layout().tensors.size());
    for (const auto& f : m.files_) {
      const std::optional<int64_t> says = IntValue(f->layout(), kSplitTensors);
      if (says && *says != seen) {
        return SplitError(f->path(), absl::StrCat("split.tensors.count is ", *says, " but the ",
                                                  split->count, " parts hold ", seen, " tensors"));
      }
    }
    m.description_ = absl::StrCat(SplitMemberPath(*split, 1), " (", split->count, " parts)");
  }
  for (const auto& f : m.files_) {
    for (const TensorInfo& t : f->layout().tensors) {
      auto [it, inserted] = m.index_.emplace(t.name, Tensor{f.get(), &t});
      if (!inserted) {
        return absl::InvalidArgumentError(absl::StrCat(f->path(), ": tensor \"", t.name,
                                                       "\" is also in ", it->second.file->path()));
      }
    }
  }
  return m;
}

const std::map<std::string, Value, std::less<>>& GgufModel::metadata() const {
  KVS_CHECK(!files_.empty(), "GgufModel used before Open");
  return files_.front()->layout().metadata;
}

const Value* GgufModel::Find(std::string_view key) const {
  auto it = metadata().find(key);
  return it == metadata().end() ? nullptr : &it->second;
}

bool GgufModel::Contains(std::string_view name) const { return index_.find(name) != index_.end(); }

absl::StatusOr<GgufModel::Tensor> GgufModel::FindTensor(std::string_view name) const {
  auto it = index_.find(name);
  if (it == index_.end()) {
    return absl::NotFoundError(
        absl::StrCat(description_, ": tensor \"", base::AsAbsl(name), "\" is missing"));
  }
  return it->second;
}

std::vector<std::string> GgufModel::TensorNames() const {
  std::vector<std::string> names;
  names.reserve(index_.size());
  for (const auto& [name, unused] : index_) names.push_back(name);
  return names;
}

uint64_t GgufModel::file_bytes() const {
  uint64_t n = 0;
  for (const auto& f : files_) n += f->size();
  return n;
}

}  // namespace kvserve::gguf
