#include "model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/absl_compat.h"
#include "base/check.h"
#include "kernels/cpu/kv_quant.h"
#include "nlohmann/json.hpp"

namespace kvserve::model {
namespace {

using nlohmann::json;

// The format caps the header at 100 MB; anything larger is corrupt, not a big model.
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

size_t DtypeBytes(std::string_view dtype) {
  static constexpr std::pair<std::string_view, size_t> kSizes[] = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E4M3", 1}, {"F8_E5M2", 1}, {"I16", 2},
      {"U16", 2},  {"F16", 2}, {"BF16", 2}, {"I32", 4},    {"U32", 4},     {"F32", 4},
      {"F64", 8},  {"I64", 8}, {"U64", 8}};
  for (const auto& [name, bytes] : kSizes) {
    if (name == dtype) return bytes;
  }
  return 0;
}

absl::Status FileError(const std::string& path, std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", base::AsAbsl(what)));
}
absl::Status TensorError(const std::string& path, std::string_view tensor, std::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat(path, ": tensor \"", base::AsAbsl(tensor), "\": ", base::AsAbsl(what)));
}

absl::StatusOr<SafetensorsEntry> ParseEntry(const std::string& path, const std::string& name,
                                            const json& v) {
  SafetensorsEntry e;
  e.name = name;
  if (!v.is_object()) return TensorError(path, name, "header entry is not an object");
  if (!v.contains("dtype") || !v["dtype"].is_string()) return TensorError(path, name, "missing dtype");
  e.dtype = v["dtype"].get<std::string>();
  e.dtype_bytes = DtypeBytes(e.dtype);
  if (e.dtype_bytes == 0) return TensorError(path, name, absl::StrCat("unknown dtype \"", e.dtype, "\""));
  if (!v.contains("shape") || !v["shape"].is_array()) return TensorError(path, name, "missing shape");
  // Element count with overflow checks: a hostile shape must not wrap around.
  uint64_t elems = 1;
  for (const json& d : v["shape"]) {
    if (!d.is_number_integer() || d.get<int64_t>() < 0) {
      return TensorError(path, name, absl::StrCat("bad shape ", v["shape"].dump()));
    }
    const uint64_t dim = d.get<uint64_t>();
    if (dim != 0 && elems > (uint64_t{1} << 62) / dim) {
      return TensorError(path, name, absl::StrCat("shape ", v["shape"].dump(), " is too large"));
    }
    elems *= dim;
    e.shape.push_back(static_cast<int64_t>(dim));
  }
  // The byte size must not wrap either: [2^62] of F32 would claim 2^64 = 0 bytes.
  if (elems > (uint64_t{1} << 62) / e.dtype_bytes) {
    return TensorError(path, name, absl::StrCat("shape ", v["shape"].dump(), " of ", e.dtype, " is too large"));
  }
  const json& off = v.contains("data_offsets") ? v["data_offsets"] : json();
  if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned()) {
    return TensorError(path, name, "data_offsets must be [begin, end] with non-negative integers");
  }
  e.begin = off[0].get<uint64_t>();
  e.end = off[1].get<uint64_t>();
  if (e.end < e.begin) {
    return TensorError(path, name, absl::StrCat("data_offsets [", e.begin, ", ", e.end, ") are reversed"));
  }
  if (e.end - e.begin != elems * e.dtype_bytes) {
    return TensorError(path, name,
                       absl::StrCat("data_offsets span ", e.end - e.begin, " bytes but shape ",
                                    v["shape"].dump(), " of ", e.dtype, " needs ", elems * e.dtype_bytes));
  }
  return e;
}

// Tensors must tile the data region exactly: sorted by offset, each starts where the
// previous ended, the last ends at the end of the file.
absl::Status CheckCoverage(const std::string& path, std::vector<SafetensorsEntry> entries,
                           uint64_t data_size) {
  for (const auto& e : entries) {
    if (e.end > data_size) {
      return TensorError(path, e.name,
                         absl::StrCat("data_offsets [", e.begin, ", ", e.end,
                                      ") extend past the end of the file (the data region holds ",
                                      data_size, " bytes; truncated file?)"));
    }
  }
  std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t expected = 0;
  const SafetensorsEntry* prev = nullptr;
  for (const auto& e : entries) {
    if (e.begin < expected) {
      return TensorError(path, e.name,
                         absl::StrCat("data_offsets [", e.begin, ", ", e.end, ") overlap tensor \"",
                                      prev->name, "\" [", prev->begin, ", ", prev->end, ")"));
    }
    if (e.begin > expected) {
      return TensorError(path, e.name,
                         absl::StrCat("data_offsets start at ", e.begin, " but the previous tensor ends at ",
                                      expected, " (a hole in the data region)"));
    }
    expected = e.end;
    prev = &e;
  }
  if (expected != data_size) {
    return FileError(path, absl::StrCat("the tensors cover ", expected, " bytes of a ", data_size,
                                        "-byte data region (trailing bytes: corrupt file?)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

bool FileExists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

}  // namespace

int64_t SafetensorsEntry::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::NotFoundError(absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return FileError(path, absl::StrCat("cannot stat: ", std::strerror(err)));
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < 8) {
    ::close(fd);
    return FileError(path, absl::StrCat("file is ", size, " bytes, shorter than the 8-byte header length"));
  }
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);  // the mapping keeps the file alive
  if (map == MAP_FAILED) return FileError(path, absl::StrCat("mmap failed: ", std::strerror(errno)));

  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  f->map_ = static_cast<const std::byte*>(map);
  f->map_size_ = size;
  KVS_ASSIGN_OR_RETURN(SafetensorsLayout layout, ParseSafetensorsLayout(path, {f->map_, f->map_size_}));
  f->data_ = f->map_ + layout.data_offset;
  f->entries_ = std::move(layout.entries);
  return f;
}

absl::StatusOr<SafetensorsLayout> ParseSafetensorsLayout(const std::string& path,
                                                         std::span<const std::byte> file) {
  const uint64_t size = file.size();
  if (size < 8) {
    return FileError(path, absl::StrCat("file is ", size, " bytes, shorter than the 8-byte header length"));
  }
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | static_cast<uint8_t>(file[static_cast<size_t>(i)]);
  if (header_len > size - 8) {
    return FileError(path, absl::StrCat("header length ", header_len, " exceeds the ", size - 8,
                                        " bytes after it (not a safetensors file, or truncated)"));
  }
  if (header_len > kMaxHeaderBytes) {
    return FileError(path, absl::StrCat("header length ", header_len, " exceeds the 100 MB limit"));
  }
  const char* hdr = reinterpret_cast<const char*>(file.data() + 8);
  json header = json::parse(hdr, hdr + header_len, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded()) return FileError(path, "header is not valid JSON");
  if (!header.is_object()) return FileError(path, "header is not a JSON object");
  SafetensorsLayout layout;
  layout.data_offset = 8 + header_len;
  const uint64_t data_size = size - 8 - header_len;

  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    KVS_ASSIGN_OR_RETURN(SafetensorsEntry e, ParseEntry(path, it.key(), it.value()));
    layout.entries.push_back(std::move(e));
  }
  KVS_RETURN_IF_ERROR(CheckCoverage(path, layout.entries, data_size));
  std::sort(layout.entries.begin(), layout.entries.end(),
            [](const auto& a, const auto& b) { return a.name < b.name; });
  return layout;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_ != nullptr) ::munmap(const_cast<std::byte*>(map_), map_size_);
}

const SafetensorsEntry* TensorFile::Find(std::string_view name) const {
  const std::vector<SafetensorsEntry>& all = entries();
  auto it = std::lower_bound(all.begin(), all.end(), name,
                             [](const SafetensorsEntry& e, std::string_view n) { return e.name < n; });
  return it != all.end() && it->name == name ? &*it : nullptr;
}

namespace {
// The page-aligned span covering [begin, end) of the map.
void Advise(const std::byte* map, size_t map_size, const std::byte* begin, const std::byte* end, int advice) {
  if (end <= begin) return;
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto lo = reinterpret_cast<uintptr_t>(begin) / page * page;
  const auto hi = std::min(reinterpret_cast<uintptr_t>(end), reinterpret_cast<uintptr_t>(map) + map_size);
  ::madvise(reinterpret_cast<void*>(lo), hi - lo, advice);  // a hint: failure changes nothing observable
}
}  // namespace

void SafetensorsFile::WillNeed(const SafetensorsEntry& e) const {
  Advise(map_, map_size_, data_ + e.begin, data_ + e.end, MADV_WILLNEED);
}

void SafetensorsFile::Release(const SafetensorsEntry& e) const {
  Advise(map_, map_size_, data_ + e.begin, data_ + e.end, MADV_DONTNEED);
}

std::span<const std::byte> SafetensorsFile::Bytes(const SafetensorsEntry& e) const {
  return {data_ + e.begin, static_cast<size_t>(e.end - e.begin)};
}

absl::Status TensorFile::ReadF32(const SafetensorsEntry& e, std::span<float> out) const {
  const std::string& path_ = path();
  const int64_t n = e.num_elements();
  if (static_cast<int64_t>(out.size()) != n) {
    return TensorError(path_, e.name, absl::StrCat("destination holds ", out.size(), " floats, tensor has ", n));
  }
  // An empty tensor (a 0 in its shape) has nothing to read, and an empty destination's
  // data() may be null, which memcpy must not get even for 0 bytes (found by fuzzing).
  if (n == 0) return absl::OkStatus();
  const std::byte* src = Bytes(e).data();
  // Unaligned-safe element reads: offsets inside the data region need not be aligned.
  if (e.dtype == "F32") {
    std::memcpy(out.data(), src, static_cast<size_t>(n) * 4);
  } else if (e.dtype == "F16" || e.dtype == "BF16") {
    const bool half = e.dtype == "F16";
    for (int64_t i = 0; i < n; ++i) {
      uint16_t bits;
      std::memcpy(&bits, src + 2 * i, 2);
      out[i] = half ? kernels::cpu::HalfToFloat(bits) : kernels::cpu::Bf16ToFloat(bits);
    }
  } else {
    return TensorError(path_, e.name,
                       absl::StrCat("unsupported dtype ", e.dtype, " (supported: F32, F16, BF16)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<SafetensorsCheckpoint> SafetensorsCheckpoint::OpenFile(const std::string& path) {
  SafetensorsCheckpoint c;
  KVS_ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open(path));
  for (const auto& e : file->entries()) c.index_[e.name] = {file.get(), &e};
  c.files_.push_back(std::move(file));
  c.description_ = path;
  return c;
}

absl::StatusOr<SafetensorsCheckpoint> SafetensorsCheckpoint::Open(const std::string& model_dir) {
  const std::string index_path = model_dir + "/model.safetensors.index.json";
  if (!FileExists(index_path)) {
    const std::string single = model_dir + "/model.safetensors";
    if (!FileExists(single)) {
      return absl::NotFoundError(absl::StrCat(model_dir, ": no model.safetensors or model.safetensors.index.json"));
    }
    return OpenFile(single);
  }
  KVS_ASSIGN_OR_RETURN(std::string text, ReadText(index_path));
  json index = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (index.is_discarded() || !index.is_object()) return FileError(index_path, "not a valid JSON object");
  if (!index.contains("weight_map") || !index["weight_map"].is_object()) {
    return FileError(index_path, "missing \"weight_map\" object");
  }
  SafetensorsCheckpoint c;
  std::map<std::string, SafetensorsFile*> by_shard;
  for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it) {
    if (!it.value().is_string()) {
      return FileError(index_path, absl::StrCat("weight_map[\"", it.key(), "\"] is not a file name"));
    }
    const std::string shard = it.value().get<std::string>();
    if (shard.empty() || shard.find('/') != std::string::npos || shard == "." || shard == "..") {
      return FileError(index_path, absl::StrCat("tensor \"", it.key(), "\": bad shard name \"", shard, "\""));
    }
    auto found = by_shard.find(shard);
    if (found == by_shard.end()) {
      KVS_ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open(model_dir + "/" + shard));
      found = by_shard.emplace(shard, file.get()).first;
      c.files_.push_back(std::move(file));
    }
    const SafetensorsEntry* e = found->second->Find(it.key());
    if (e == nullptr) {
      return TensorError(found->second->path(), it.key(),
                         absl::StrCat("listed in ", index_path, " but not present in the shard"));
    }
    c.index_[it.key()] = {found->second, e};
  }
  std::vector<std::string> names;
  for (const auto& f : c.files_) names.push_back(f->path());
  c.description_ = absl::StrCat(index_path, " (", absl::StrJoin(names, ", "), ")");
  return c;
}

absl::StatusOr<SafetensorsCheckpoint> SafetensorsCheckpoint::FromFiles(
    std::vector<std::unique_ptr<TensorFile>> files, std::string description) {
  SafetensorsCheckpoint c;
  for (auto& file : files) {
    for (const auto& e : file->entries()) {
      auto [it, fresh] = c.index_.try_emplace(e.name, file.get(), &e);
      if (!fresh) {
        return TensorError(file->path(), e.name, absl::StrCat("also in ", it->second.first->path()));
      }
    }
    c.files_.push_back(std::move(file));
  }
  c.description_ = std::move(description);
  return c;
}

bool SafetensorsCheckpoint::has_block_tensors() const {
  for (const auto& [name, found] : index_) {
    if (found.second->dtype_bytes == 0) return true;
  }
  return false;
}

bool SafetensorsCheckpoint::Contains(std::string_view name) const { return index_.find(name) != index_.end(); }

absl::StatusOr<std::pair<const TensorFile*, const SafetensorsEntry*>> SafetensorsCheckpoint::Find(
    std::string_view name) const {
  auto it = index_.find(name);
  if (it == index_.end()) {
    return absl::NotFoundError(absl::StrCat(description_, ": tensor \"", base::AsAbsl(name), "\" is missing"));
  }
  return it->second;
}

absl::Status SafetensorsCheckpoint::LoadF32(std::string_view name, std::span<const int64_t> shape,
                                            std::span<float> out) const {
  KVS_ASSIGN_OR_RETURN(auto found, Find(name));
  const auto& [file, entry] = found;
  if (!std::equal(shape.begin(), shape.end(), entry->shape.begin(), entry->shape.end())) {
    return TensorError(file->path(), name,
                       absl::StrCat("shape [", absl::StrJoin(entry->shape, ", "), "], expected [",
                                    absl::StrJoin(shape, ", "), "]"));
  }
  KVS_RETURN_IF_ERROR(file->ReadF32(*entry, out));
  // A NaN or infinity in a weight is a corrupt checkpoint, never a value to serve answers
  // from: every logit downstream of it would be garbage.
  for (size_t i = 0; i < out.size(); ++i) {
    if (!std::isfinite(out[i])) {
      return TensorError(file->path(), name,
                         absl::StrCat("element ", i, " is ", std::isnan(out[i]) ? "NaN" : "infinite",
                                      " (corrupt weights?)"));
    }
  }
  return absl::OkStatus();
}

std::vector<std::string> SafetensorsCheckpoint::TensorNames() const {
  std::vector<std::string> names;
  for (const auto& [name, unused] : index_) names.push_back(name);
  return names;
}

}  // namespace kvserve::model
