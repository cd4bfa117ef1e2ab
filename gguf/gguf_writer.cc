// GgufWriter::Write: validates everything first (a writer must never produce a file our own
// reader refuses), then streams each file: header and tensor infos from a buffer, tensor
// data straight from the pending tensors, each padded to the alignment:
//
//   [ "GGUF" | 3 | n_tensors | n_kv ][ kv ... ][ tensor infos ... ][ 0-pad ]
//   [ t0 data | 0-pad ][ t1 data | 0-pad ] ...       offset_i = sum of padded sizes before i
//
// Split output: tensors are assigned in order to files of at most max_file_bytes of padded
// tensor data (a tensor larger than that gets a file of its own). The first file carries all
// metadata, every file carries split.no (u16, 0-based), split.count (u16),
// split.tensors.count (i32), and general.alignment when it is not 32, as gguf-split does.
#include "gguf/gguf_writer.h"

#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/absl_compat.h"
#include "base/check.h"
#include "gguf/split_name.h"

namespace kvserve::gguf {
namespace {

constexpr uint64_t kDefaultAlignment = 32;
// 128-bit integers (a GCC/Clang extension) compare signed and unsigned 64-bit values exactly.
__extension__ typedef __int128 I128;
__extension__ typedef unsigned __int128 U128;

absl::Status KeyError(std::string_view key, std::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("GGUF writer: metadata key \"", base::AsAbsl(key), "\": ", base::AsAbsl(what)));
}

bool IsSigned(ValueType t) {
  return t == ValueType::kI8 || t == ValueType::kI16 || t == ValueType::kI32 ||
         t == ValueType::kI64;
}
bool IsUnsigned(ValueType t) {
  return t == ValueType::kU8 || t == ValueType::kU16 || t == ValueType::kU32 ||
         t == ValueType::kU64;
}
bool IsFloat(ValueType t) { return t == ValueType::kF32 || t == ValueType::kF64; }

// The range of an integer type, as [lo, hi] in 128 bits so both signs compare exactly.
std::pair<I128, I128> Range(ValueType t) {
  switch (t) {
    case ValueType::kU8:
      return {0, 0xff};
    case ValueType::kU16:
      return {0, 0xffff};
    case ValueType::kU32:
      return {0, 0xffffffffu};
    case ValueType::kU64:
      return {0, std::numeric_limits<uint64_t>::max()};
    case ValueType::kI8:
      return {-128, 127};
    case ValueType::kI16:
      return {-32768, 32767};
    case ValueType::kI32:
      return {std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()};
    default:
      return {std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()};
  }
}

int Width(ValueType t) {
  switch (t) {
    case ValueType::kU8:
    case ValueType::kI8:
    case ValueType::kBool:
      return 1;
    case ValueType::kU16:
    case ValueType::kI16:
      return 2;
    case ValueType::kU32:
    case ValueType::kI32:
    case ValueType::kF32:
      return 4;
    default:
      return 8;
  }
}

class Buffer {
 public:
  void Bytes(const void* p, size_t n) {
    const auto* b = static_cast<const char*>(p);
    out_.append(b, n);
  }
  template <typename T>
  void Put(T x) {
    Bytes(&x, sizeof(T));
  }  // the host is little-endian (x86, arm64)
  void String(std::string_view s) {
    Put<uint64_t>(s.size());
    Bytes(s.data(), s.size());
  }
  // An integer of type t's width, two's complement little-endian.
  void Int(ValueType t, I128 v) {
    const auto u = static_cast<uint64_t>(static_cast<U128>(v));
    Bytes(&u, static_cast<size_t>(Width(t)));
  }
  void Float(ValueType t, double v) {
    if (t == ValueType::kF32) {
      Put(static_cast<float>(v));
    } else {
      Put(v);
    }
  }
  std::string& str() { return out_; }

 private:
  std::string out_;
};

// One integer of `v` (either signed or unsigned alternative) as 128 bits.
std::optional<I128> IntOf(const Value& v) {
  if (const auto* s = std::get_if<int64_t>(&v.v)) return *s;
  if (const auto* u = std::get_if<uint64_t>(&v.v)) return *u;
  return std::nullopt;
}

absl::Status PutInt(Buffer& b, std::string_view key, ValueType t, I128 x) {
  const auto [lo, hi] = Range(t);
  if (x < lo || x > hi) {
    return KeyError(key, absl::StrCat("value ", static_cast<int64_t>(x), " is out of the range of ",
                                      base::AsAbsl(ValueTypeName(t))));
  }
  b.Int(t, x);
  return absl::OkStatus();
}

template <typename T>
absl::Status PutIntArray(Buffer& b, std::string_view key, ValueType t, const std::vector<T>& xs) {
  for (T x : xs) KVS_RETURN_IF_ERROR(PutInt(b, key, t, x));
  return absl::OkStatus();
}

// Serializes `value` (its type tag included) or says why it cannot be written.
absl::Status PutValue(Buffer& b, std::string_view key, const Value& value) {
  const ValueType t = value.type;
  const auto mismatch = [&] {
    return KeyError(key, absl::StrCat("declared ", DescribeValueType(value),
                                      " but holds another kind of value"));
  };
  if (static_cast<uint32_t>(t) > static_cast<uint32_t>(ValueType::kF64)) {
    return KeyError(key, absl::StrCat("unknown value type ", static_cast<uint32_t>(t)));
  }
  b.Put(static_cast<uint32_t>(t));
  if (IsSigned(t) || IsUnsigned(t)) {
    const auto x = IntOf(value);
    if (!x) return mismatch();
    return PutInt(b, key, t, *x);
  }
  if (IsFloat(t)) {
    const auto* d = std::get_if<double>(&value.v);
    if (d == nullptr) return mismatch();
    b.Float(t, *d);
    return absl::OkStatus();
  }
  if (t == ValueType::kBool) {
    const auto* x = std::get_if<bool>(&value.v);
    if (x == nullptr) return mismatch();
    b.Put(static_cast<uint8_t>(*x ? 1 : 0));
    return absl::OkStatus();
  }
  if (t == ValueType::kString) {
    const auto* s = std::get_if<std::string>(&value.v);
    if (s == nullptr) return mismatch();
    b.String(*s);
    return absl::OkStatus();
  }
  // An array: element type, count, elements.
  const ValueType e = value.array_type;
  if (e == ValueType::kArray) return KeyError(key, "nested arrays are not supported");
  if (static_cast<uint32_t>(e) > static_cast<uint32_t>(ValueType::kF64)) {
    return KeyError(key, absl::StrCat("unknown array element type ", static_cast<uint32_t>(e)));
  }
  b.Put(static_cast<uint32_t>(e));
  if (IsSigned(e) || IsUnsigned(e)) {
    if (const auto* s = std::get_if<std::vector<int64_t>>(&value.v)) {
      b.Put<uint64_t>(s->size());
      return PutIntArray(b, key, e, *s);
    }
    if (const auto* u = std::get_if<std::vector<uint64_t>>(&value.v)) {
      b.Put<uint64_t>(u->size());
      return PutIntArray(b, key, e, *u);
    }
    return mismatch();
  }
  if (IsFloat(e)) {
    const auto* d = std::get_if<std::vector<double>>(&value.v);
    if (d == nullptr) return mismatch();
    b.Put<uint64_t>(d->size());
    for (double x : *d) b.Float(e, x);
    return absl::OkStatus();
  }
  if (e == ValueType::kBool) {
    const auto* x = std::get_if<std::vector<bool>>(&value.v);
    if (x == nullptr) return mismatch();
    b.Put<uint64_t>(x->size());
    for (bool y : *x) b.Put(static_cast<uint8_t>(y ? 1 : 0));
    return absl::OkStatus();
  }
  const auto* s = std::get_if<std::vector<std::string>>(&value.v);
  if (s == nullptr) return mismatch();
  b.Put<uint64_t>(s->size());
  for (const auto& x : *s) b.String(x);
  return absl::OkStatus();
}

uint64_t AlignUp(uint64_t x, uint64_t a) { return x + (a - x % a) % a; }

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

absl::Status WriteAll(std::FILE* f, const std::string& path, const void* p, size_t n) {
  if (n != 0 && std::fwrite(p, 1, n, f) != n) {
    return absl::UnavailableError(absl::StrCat(path, ": write failed: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

Value U16(uint64_t v) { return Value{ValueType::kU16, ValueType::kU32, v}; }
Value I32(int64_t v) { return Value{ValueType::kI32, ValueType::kU32, v}; }

}  // namespace

void GgufWriter::Set(std::string key, Value value) {
  for (auto& [k, v] : metadata_) {
    if (k == key) {  // replaced in place: the key keeps its first position
      v = std::move(value);
      return;
    }
  }
  metadata_.emplace_back(std::move(key), std::move(value));
}

void GgufWriter::SetString(std::string key, std::string v) {
  Set(std::move(key), Value{ValueType::kString, ValueType::kU32, std::move(v)});
}
void GgufWriter::SetU32(std::string key, uint32_t v) {
  Set(std::move(key), Value{ValueType::kU32, ValueType::kU32, uint64_t{v}});
}
void GgufWriter::SetI32(std::string key, int32_t v) {
  Set(std::move(key), Value{ValueType::kI32, ValueType::kU32, int64_t{v}});
}
void GgufWriter::SetF32(std::string key, float v) {
  Set(std::move(key), Value{ValueType::kF32, ValueType::kU32, double{v}});
}
void GgufWriter::SetBool(std::string key, bool v) {
  Set(std::move(key), Value{ValueType::kBool, ValueType::kU32, v});
}
void GgufWriter::SetStrings(std::string key, std::vector<std::string> v) {
  Set(std::move(key), Value{ValueType::kArray, ValueType::kString, std::move(v)});
}
void GgufWriter::SetF32s(std::string key, std::vector<float> v) {
  Set(std::move(key),
      Value{ValueType::kArray, ValueType::kF32, std::vector<double>(v.begin(), v.end())});
}
void GgufWriter::SetI32s(std::string key, std::vector<int32_t> v) {
  Set(std::move(key),
      Value{ValueType::kArray, ValueType::kI32, std::vector<int64_t>(v.begin(), v.end())});
}

void GgufWriter::AddTensor(std::string name, quant::BlockType type, std::vector<int64_t> ne,
                           std::vector<std::byte> data) {
  tensors_.push_back(Pending{std::move(name), type, std::move(ne), std::move(data)});
}

absl::StatusOr<std::vector<std::string>> GgufWriter::Write(const std::string& path,
                                                           uint64_t max_file_bytes) const {
  // ---- validation: nothing is written unless the whole model is writable
  if (alignment_ == 0 || (alignment_ & (alignment_ - 1)) != 0 || alignment_ > (1u << 31)) {
    return absl::InvalidArgumentError(
        absl::StrCat("GGUF writer: alignment ", alignment_, " is not a power of two up to 2^31"));
  }
  std::vector<std::pair<std::string, Value>> common;  // keys every file carries
  for (const auto& [key, value] : metadata_) {
    if (key.empty()) return absl::InvalidArgumentError("GGUF writer: empty metadata key");
    if (key.rfind("split.", 0) == 0) return KeyError(key, "split.* keys are written by the writer");
    if (key == "general.alignment") {
      const auto x = IntOf(value);
      if (value.type != ValueType::kU32 || !x || static_cast<uint64_t>(*x) != alignment_) {
        return KeyError(key,
                        absl::StrCat("must be the writer's alignment ", alignment_, " as u32"));
      }
    }
    Buffer scratch;
    KVS_RETURN_IF_ERROR(PutValue(scratch, key, value));
  }
  const bool has_alignment_key =
      std::any_of(metadata_.begin(), metadata_.end(),
                  [](const auto& kv) { return kv.first == "general.alignment"; });
  if (alignment_ != kDefaultAlignment) {
    common.emplace_back("general.alignment", Value{ValueType::kU32, ValueType::kU32, alignment_});
  }
  std::set<std::string_view> names;
  std::vector<uint64_t> padded(tensors_.size());
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const Pending& t = tensors_[i];
    const auto error = [&](std::string_view what) {
      return absl::InvalidArgumentError(
          absl::StrCat("GGUF writer: tensor \"", t.name, "\": ", base::AsAbsl(what)));
    };
    if (t.name.empty() || t.name.size() > 63) return error("name must be 1 to 63 bytes");
    if (!names.insert(t.name).second) return error("added twice");
    if (t.ne.empty() || t.ne.size() > 4)
      return error(absl::StrCat(t.ne.size(), " dimensions (1 to 4)"));
    U128 rows = 1;
    for (size_t d = 0; d < t.ne.size(); ++d) {
      if (t.ne[d] < 0) return error(absl::StrCat("ne[", d, "] is negative"));
      if (d > 0) rows *= static_cast<U128>(t.ne[d]);
      if (rows > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return error("more rows than int64 can count");
      }
    }
    auto row_bytes = quant::RowBytes(t.type, t.ne[0]);
    if (!row_bytes.ok()) return error(base::AsStd(row_bytes.status().message()));
    const U128 bytes = rows * static_cast<U128>(*row_bytes);
    if (bytes != t.data.size()) {
      return error(absl::StrCat(
          "holds ", t.data.size(), " bytes; shape [", absl::StrJoin(t.ne, ", "), "] of ",
          base::AsAbsl(quant::Traits(t.type).name), " needs ", static_cast<uint64_t>(bytes)));
    }
    padded[i] = AlignUp(t.data.size(), alignment_);
  }

  // ---- tensors to files: [begin, end) ranges
  std::vector<std::pair<size_t, size_t>> groups;
  size_t begin = 0;
  uint64_t used = 0;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    if (max_file_bytes != 0 && i > begin && used + padded[i] > max_file_bytes) {
      groups.emplace_back(begin, i);
      begin = i;
      used = 0;
    }
    used += padded[i];
  }
  groups.emplace_back(begin, tensors_.size());
  const bool split = groups.size() > 1;
  if (split && groups.size() > 0xffff) {
    return absl::InvalidArgumentError(
        absl::StrCat("GGUF writer: ", groups.size(), " split files (at most 65535)"));
  }
  std::string stem = path;
  if (stem.size() > 5 && stem.substr(stem.size() - 5) == ".gguf") stem.resize(stem.size() - 5);

  // ---- write
  std::vector<std::string> written;
  for (size_t g = 0; g < groups.size(); ++g) {
    const std::string out =
        split ? SplitFilePath(stem, static_cast<int>(g + 1), static_cast<int>(groups.size()))
              : path;
    std::vector<const std::pair<std::string, Value>*> kvs;
    if (g == 0) {
      for (const auto& kv : metadata_) kvs.push_back(&kv);
    }
    for (const auto& kv : common) {
      if (g != 0 || !has_alignment_key) kvs.push_back(&kv);
    }
    const std::pair<std::string, Value> split_keys[] = {
        {"split.no", U16(g)},
        {"split.count", U16(groups.size())},
        {"split.tensors.count", I32(static_cast<int64_t>(tensors_.size()))}};
    if (split) {
      for (const auto& kv : split_keys) kvs.push_back(&kv);
    }
    const auto [first, last] = groups[g];
    Buffer b;
    b.Bytes("GGUF", 4);
    b.Put<uint32_t>(3);
    b.Put<uint64_t>(last - first);
    b.Put<uint64_t>(kvs.size());
    for (const auto* kv : kvs) {
      b.String(kv->first);
      KVS_RETURN_IF_ERROR(PutValue(b, kv->first, kv->second));
    }
    uint64_t offset = 0;
    for (size_t i = first; i < last; ++i) {
      const Pending& t = tensors_[i];
      b.String(t.name);
      b.Put<uint32_t>(static_cast<uint32_t>(t.ne.size()));
      for (int64_t d : t.ne) b.Put<int64_t>(d);
      b.Put<uint32_t>(static_cast<uint32_t>(t.type));
      b.Put<uint64_t>(offset);
      offset += padded[i];
    }
    b.str().resize(AlignUp(b.str().size(), alignment_), '\0');

    std::unique_ptr<std::FILE, FileCloser> f(std::fopen(out.c_str(), "wb"));
    if (!f)
      return absl::UnavailableError(absl::StrCat(out, ": cannot create: ", std::strerror(errno)));
    KVS_RETURN_IF_ERROR(WriteAll(f.get(), out, b.str().data(), b.str().size()));
    static constexpr char kZeros[256] = {};
    for (size_t i = first; i < last; ++i) {
      const Pending& t = tensors_[i];
      KVS_RETURN_IF_ERROR(WriteAll(f.get(), out, t.data.data(), t.data.size()));
      for (uint64_t pad = padded[i] - t.data.size(); pad > 0;) {
        const size_t n = static_cast<size_t>(std::min<uint64_t>(pad, sizeof(kZeros)));
        KVS_RETURN_IF_ERROR(WriteAll(f.get(), out, kZeros, n));
        pad -= n;
      }
    }
    if (std::fclose(f.release()) != 0) {
      return absl::UnavailableError(absl::StrCat(out, ": write failed: ", std::strerror(errno)));
    }
    written.push_back(out);
  }
  return written;
}

}  // namespace kvserve::gguf
