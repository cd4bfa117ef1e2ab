// ParseGgufLayout: the validation of a whole GGUF file held in memory (see gguf_file.h for
// the layout). Nothing is allocated on a count's word alone: every count is first checked
// against the bytes left in the file (each element takes at least a known number of bytes),
// so a corrupt or hostile header costs at most what the file itself holds. Sizes are
// computed in 128 bits and bounded by the file size, so no product can wrap.
#include <algorithm>
#include <cstring>
#include <limits>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/absl_compat.h"
#include "base/check.h"
#include "gguf/ggml_type_names.h"
#include "gguf/gguf_file.h"

namespace kvserve::gguf {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr uint64_t kDefaultAlignment = 32;
__extension__ typedef unsigned __int128 U128;  // a GCC/Clang extension
constexpr uint32_t kMaxDims = 4;               // GGML_MAX_DIMS
constexpr uint64_t kMaxNameBytes = 63;         // GGML_MAX_NAME (64) less the NUL ggml stores
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;    // key length, value type, 1-byte value
constexpr uint64_t kMinTensorBytes = 8 + 4 + 8 + 4 + 8;  // name length, n_dims, ne[0], type, offset

absl::Status FileError(const std::string& path, std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", base::AsAbsl(what)));
}

bool IsKnownValueType(uint32_t t) { return t <= static_cast<uint32_t>(ValueType::kF64); }

// Bytes an element of type `t` takes at least (strings: their length field; arrays: element
// type and count).
uint64_t MinValueBytes(ValueType t) {
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
    case ValueType::kU64:
    case ValueType::kI64:
    case ValueType::kF64:
      return 8;
    case ValueType::kString:
      return 8;
    case ValueType::kArray:
      return 12;
  }
  return 1;
}

std::string Quoted(std::string_view s) {
  // Names come from the file: keep errors printable and bounded.
  std::string out = "\"";
  for (char c : s.substr(0, 96)) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {
      absl::StrAppend(&out, "\\x", absl::Hex(unsigned{u}, absl::kZeroPad2));
    } else {
      out.push_back(c);
    }
  }
  if (s.size() > 96) out += "...";
  out += "\"";
  return out;
}

// A bounds-checked little-endian reader over the file. Reads return false (and consume
// nothing) when the bytes are not there; the caller names what it was reading.
class Reader {
 public:
  Reader(const std::string& path, std::span<const std::byte> file) : path_(path), file_(file) {}

  uint64_t pos() const { return pos_; }
  uint64_t left() const { return file_.size() - pos_; }

  template <typename T>
  bool Read(T* out) {
    if (left() < sizeof(T)) return false;
    std::memcpy(out, file_.data() + pos_, sizeof(T));  // the host is little-endian (x86, arm64)
    pos_ += sizeof(T);
    return true;
  }
  bool ReadString(std::string* out) {
    uint64_t n = 0;
    if (left() < 8) return false;
    std::memcpy(&n, file_.data() + pos_, 8);
    if (n > left() - 8) return false;
    out->assign(reinterpret_cast<const char*>(file_.data() + pos_ + 8), static_cast<size_t>(n));
    pos_ += 8 + n;
    return true;
  }
  absl::Status Truncated(std::string_view what) const {
    return FileError(path_, absl::StrCat("truncated or corrupt: ", base::AsAbsl(what),
                                         " does not fit in the ", left(), " bytes left at offset ",
                                         pos_, " (the file is ", file_.size(), " bytes)"));
  }

 private:
  const std::string& path_;
  std::span<const std::byte> file_;
  uint64_t pos_ = 0;
};

template <typename T, typename Vec>
bool ReadInto(Reader& r, Vec* vec, uint64_t n) {
  vec->reserve(static_cast<size_t>(n));  // n is bounded by the bytes left (checked by the caller)
  for (uint64_t i = 0; i < n; ++i) {
    T x;
    if (!r.Read(&x)) return false;
    vec->push_back(x);
  }
  return true;
}

// One scalar of type `t` into `value`.
bool ReadScalar(Reader& r, ValueType t, Value* value, bool* bad_bool) {
  switch (t) {
    case ValueType::kU8: {
      uint8_t x;
      if (!r.Read(&x)) return false;
      value->v = uint64_t{x};
      return true;
    }
    case ValueType::kI8: {
      int8_t x;
      if (!r.Read(&x)) return false;
      value->v = int64_t{x};
      return true;
    }
    case ValueType::kU16: {
      uint16_t x;
      if (!r.Read(&x)) return false;
      value->v = uint64_t{x};
      return true;
    }
    case ValueType::kI16: {
      int16_t x;
      if (!r.Read(&x)) return false;
      value->v = int64_t{x};
      return true;
    }
    case ValueType::kU32: {
      uint32_t x;
      if (!r.Read(&x)) return false;
      value->v = uint64_t{x};
      return true;
    }
    case ValueType::kI32: {
      int32_t x;
      if (!r.Read(&x)) return false;
      value->v = int64_t{x};
      return true;
    }
    case ValueType::kU64: {
      uint64_t x;
      if (!r.Read(&x)) return false;
      value->v = x;
      return true;
    }
    case ValueType::kI64: {
      int64_t x;
      if (!r.Read(&x)) return false;
      value->v = x;
      return true;
    }
    case ValueType::kF32: {
      float x;
      if (!r.Read(&x)) return false;
      value->v = double{x};
      return true;
    }
    case ValueType::kF64: {
      double x;
      if (!r.Read(&x)) return false;
      value->v = x;
      return true;
    }
    case ValueType::kBool: {
      uint8_t x;
      if (!r.Read(&x)) return false;
      if (x > 1) *bad_bool = true;
      value->v = x != 0;
      return true;
    }
    case ValueType::kString: {
      std::string s;
      if (!r.ReadString(&s)) return false;
      value->v = std::move(s);
      return true;
    }
    case ValueType::kArray:
      return false;  // handled by ReadArray
  }
  return false;
}

absl::Status ReadArray(const std::string& path, Reader& r, const std::string& key, Value* value) {
  uint32_t etype = 0;
  uint64_t n = 0;
  if (!r.Read(&etype)) return r.Truncated(absl::StrCat("the element type of array ", Quoted(key)));
  if (!IsKnownValueType(etype)) {
    return FileError(path,
                     absl::StrCat("key ", Quoted(key), ": array of unknown value type ", etype));
  }
  const auto t = static_cast<ValueType>(etype);
  if (t == ValueType::kArray) {
    return FileError(path, absl::StrCat("key ", Quoted(key), ": nested arrays are not supported"));
  }
  if (!r.Read(&n)) return r.Truncated(absl::StrCat("the length of array ", Quoted(key)));
  if (n > r.left() / MinValueBytes(t)) {
    return FileError(
        path, absl::StrCat("key ", Quoted(key), ": array of ", n, " ",
                           base::AsAbsl(ValueTypeName(t)), " elements cannot fit in the ", r.left(),
                           " bytes left (corrupt count or truncated file)"));
  }
  value->type = ValueType::kArray;
  value->array_type = t;
  const std::string what = absl::StrCat("array ", Quoted(key));
  bool ok = true;
  switch (t) {
    case ValueType::kU8: {
      std::vector<uint64_t> v;
      ok = ReadInto<uint8_t>(r, &v, n);
      value->v = std::move(v);
      break;
    }
    case ValueType::kU16: {
      std::vector<uint64_t> v;
      ok = ReadInto<uint16_t>(r, &v, n);
      value->v = std::move(v);
      break;
    }
    case ValueType::kU32: {
      std::vector<uint64_t> v;
      ok = ReadInto<uint32_t>(r, &v, n);
      value->v = std::move(v);
      break;
    }
    case ValueType::kU64: {
      std::vector<uint64_t> v;
      ok = ReadInto<uint64_t>(r, &v, n);
      value->v = std::move(v);
      break;
    }
    case ValueType::kI8: {
      std::vector<int64_t> v;
      ok = ReadInto<int8_t>(r, &v, n);
      value->v = std::move(v);
      break;
    }
    case ValueType::kI16: {
      std::vector<int64_t> v;
      ok = ReadInto<int16_t>(r, &v, n);
      value->v = std::move(v);
      break;
    }
    case ValueType::kI32: {
      std::vector<int64_t> v;
      ok = ReadInto<int32_t>(r, &v, n);
      value->v = std::move(v);
      break;
    }
    case ValueType::kI64: {
      std::vector<int64_t> v;
      ok = ReadInto<int64_t>(r, &v, n);
      value->v = std::move(v);
      break;
    }
    case ValueType::kF32: {
      std::vector<double> v;
      ok = ReadInto<float>(r, &v, n);
      value->v = std::move(v);
      break;
    }
    case ValueType::kF64: {
      std::vector<double> v;
      ok = ReadInto<double>(r, &v, n);
      value->v = std::move(v);
      break;
    }
    case ValueType::kBool: {
      std::vector<bool> v;
      v.reserve(static_cast<size_t>(n));
      for (uint64_t i = 0; i < n && ok; ++i) {
        uint8_t x = 0;
        ok = r.Read(&x);
        if (ok && x > 1) {
          return FileError(path, absl::StrCat("key ", Quoted(key), ": element ", i,
                                              " is a bool byte of ", x, " (must be 0 or 1)"));
        }
        v.push_back(x != 0);
      }
      value->v = std::move(v);
      break;
    }
    case ValueType::kString: {
      std::vector<std::string> v;
      v.reserve(static_cast<size_t>(n));
      for (uint64_t i = 0; i < n; ++i) {
        std::string s;
        if (!r.ReadString(&s)) return r.Truncated(absl::StrCat("element ", i, " of ", what));
        v.push_back(std::move(s));
      }
      value->v = std::move(v);
      break;
    }
    case ValueType::kArray:
      break;
  }
  if (!ok) return r.Truncated(what);
  return absl::OkStatus();
}

absl::Status ReadValue(const std::string& path, Reader& r, const std::string& key, Value* value) {
  uint32_t type = 0;
  if (!r.Read(&type)) return r.Truncated(absl::StrCat("the value type of key ", Quoted(key)));
  if (!IsKnownValueType(type)) {
    return FileError(path, absl::StrCat("key ", Quoted(key), ": unknown value type ", type));
  }
  value->type = static_cast<ValueType>(type);
  if (value->type == ValueType::kArray) return ReadArray(path, r, key, value);
  bool bad_bool = false;
  if (!ReadScalar(r, value->type, value, &bad_bool)) {
    return r.Truncated(absl::StrCat("the ", base::AsAbsl(ValueTypeName(value->type)),
                                    " value of key ", Quoted(key)));
  }
  if (bad_bool)
    return FileError(path, absl::StrCat("key ", Quoted(key), ": bool byte is not 0 or 1"));
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> Alignment(const std::string& path, const GgufLayout& layout) {
  auto it = layout.metadata.find("general.alignment");
  if (it == layout.metadata.end()) return kDefaultAlignment;
  if (it->second.type != ValueType::kU32) {
    return FileError(path, absl::StrCat("key \"general.alignment\" has type ",
                                        DescribeValueType(it->second), "; it must be u32"));
  }
  const uint64_t a = std::get<uint64_t>(it->second.v);
  if (a == 0 || (a & (a - 1)) != 0) {
    return FileError(path,
                     absl::StrCat("key \"general.alignment\" is ", a, ", not a power of two"));
  }
  return a;
}

std::string SupportedTypes() {
  std::vector<std::string> names;
  for (const auto& t : quant::AllBlockTypes()) {
    if (static_cast<uint32_t>(t.type) < quant::kFirstOwnBlockId) names.emplace_back(t.name);
  }
  return absl::StrJoin(names, ", ");
}

absl::StatusOr<TensorInfo> ReadTensorInfo(const std::string& path, Reader& r, uint64_t index,
                                          uint64_t file_size) {
  TensorInfo t;
  if (!r.ReadString(&t.name)) return r.Truncated(absl::StrCat("the name of tensor #", index));
  auto error = [&](std::string_view what) {
    return FileError(path, absl::StrCat("tensor ", Quoted(t.name), ": ", base::AsAbsl(what)));
  };
  if (t.name.empty()) return FileError(path, absl::StrCat("tensor #", index, " has an empty name"));
  if (t.name.size() > kMaxNameBytes) {
    return error(
        absl::StrCat("name is ", t.name.size(), " bytes; ggml allows at most ", kMaxNameBytes));
  }
  uint32_t n_dims = 0;
  if (!r.Read(&n_dims)) return r.Truncated(absl::StrCat("n_dims of tensor ", Quoted(t.name)));
  if (n_dims == 0 || n_dims > kMaxDims) {
    return error(absl::StrCat("n_dims is ", n_dims, "; must be 1 to ", kMaxDims));
  }
  for (uint32_t d = 0; d < n_dims; ++d) {
    int64_t ne = 0;
    if (!r.Read(&ne)) return r.Truncated(absl::StrCat("ne[", d, "] of tensor ", Quoted(t.name)));
    if (ne < 0) return error(absl::StrCat("ne[", d, "] is ", ne, " (negative)"));
    t.ne.push_back(ne);
  }
  uint32_t type_id = 0;
  if (!r.Read(&type_id)) return r.Truncated(absl::StrCat("the type of tensor ", Quoted(t.name)));
  if (!r.Read(&t.offset)) return r.Truncated(absl::StrCat("the offset of tensor ", Quoted(t.name)));
  const std::optional<quant::BlockTraits> traits = quant::FindBlockType(type_id);
  if (!traits) {
    return error(absl::StrCat("type ", DescribeGgmlType(type_id),
                              " is not supported (supported: ", SupportedTypes(), ")"));
  }
  t.type = traits->type;
  // The element count (and so rows() and num_elements()) must fit in int64 even when the
  // byte size is 0 (a zero dimension): ggml refuses such shapes too.
  int64_t elements = 1;
  for (int64_t ne : t.ne) {
    if (__builtin_mul_overflow(elements, std::max<int64_t>(ne, 1), &elements)) {
      return error(absl::StrCat("shape [", absl::StrJoin(t.ne, ", "),
                                "] has more elements than int64 can count"));
    }
  }
  if (t.ne[0] % traits->block_elements != 0) {
    return error(absl::StrCat("ne[0] = ", t.ne[0], " is not a multiple of ",
                              base::AsAbsl(traits->name), "'s block of ", traits->block_elements,
                              " elements"));
  }
  // 128-bit products: each factor is below 2^63, and we stop as soon as the running size
  // exceeds the file, so the product never exceeds 2^126.
  U128 bytes =
      static_cast<U128>(t.ne[0] / traits->block_elements) * static_cast<U128>(traits->block_bytes);
  for (uint32_t d = 1; d < n_dims; ++d) {
    if (bytes > file_size) break;
    bytes *= static_cast<U128>(t.ne[d]);
  }
  if (bytes > file_size) {
    return error(absl::StrCat("shape [", absl::StrJoin(t.ne, ", "), "] of ",
                              base::AsAbsl(traits->name),
                              " needs more bytes than the whole file holds (", file_size, ")"));
  }
  t.bytes = static_cast<uint64_t>(bytes);
  return t;
}

uint64_t AlignUp(uint64_t x, uint64_t a) { return x + (a - x % a) % a; }

// ggml's rule: tensor i starts exactly where tensor i-1's padded data ends, so the tensors
// tile the data region in file order, every offset aligned, nothing overlapping or skipped.
absl::Status CheckOffsets(const std::string& path, const GgufLayout& layout, uint64_t file_size) {
  uint64_t expected = 0;
  const TensorInfo* prev = nullptr;
  for (const TensorInfo& t : layout.tensors) {
    auto error = [&](std::string_view what) {
      return FileError(path, absl::StrCat("tensor ", Quoted(t.name), ": ", base::AsAbsl(what)));
    };
    if (t.offset % layout.alignment != 0) {
      return error(absl::StrCat("offset ", t.offset, " is not a multiple of the alignment ",
                                layout.alignment));
    }
    if (t.offset < expected) {
      return error(absl::StrCat("offset ", t.offset, " overlaps or precedes tensor ",
                                Quoted(prev->name), " (its data ends at ",
                                prev->offset + prev->bytes, "); tensors must be stored in order"));
    }
    if (t.offset > expected) {
      return error(absl::StrCat("offset ", t.offset, " leaves a gap after ",
                                prev ? absl::StrCat("tensor ", Quoted(prev->name)) : "the header",
                                " (expected ", expected, ")"));
    }
    // offset <= expected <= file_size (induction) and bytes <= file_size: no wrap.
    if (t.offset + t.bytes > file_size - layout.data_offset) {
      return error(absl::StrCat("data [", t.offset, ", ", t.offset + t.bytes,
                                ") extends past the end of the file (the data region holds ",
                                file_size - layout.data_offset, " bytes; truncated file?)"));
    }
    expected = AlignUp(t.offset + t.bytes, layout.alignment);
    prev = &t;
  }
  return absl::OkStatus();
}

}  // namespace

std::string_view ValueTypeName(ValueType t) {
  switch (t) {
    case ValueType::kU8:
      return "u8";
    case ValueType::kI8:
      return "i8";
    case ValueType::kU16:
      return "u16";
    case ValueType::kI16:
      return "i16";
    case ValueType::kU32:
      return "u32";
    case ValueType::kI32:
      return "i32";
    case ValueType::kF32:
      return "f32";
    case ValueType::kBool:
      return "bool";
    case ValueType::kString:
      return "string";
    case ValueType::kArray:
      return "array";
    case ValueType::kU64:
      return "u64";
    case ValueType::kI64:
      return "i64";
    case ValueType::kF64:
      return "f64";
  }
  return "unknown";
}

std::string DescribeValueType(const Value& v) {
  if (v.type != ValueType::kArray) return std::string(ValueTypeName(v.type));
  return absl::StrCat("array of ", base::AsAbsl(ValueTypeName(v.array_type)));
}

int64_t TensorInfo::rows() const {
  int64_t n = 1;
  for (size_t d = 1; d < ne.size(); ++d) n *= ne[d];
  return n;
}

int64_t TensorInfo::num_elements() const { return ne.empty() ? 0 : ne[0] * rows(); }

absl::StatusOr<GgufLayout> ParseGgufLayout(const std::string& path,
                                           std::span<const std::byte> file) {
  Reader r(path, file);
  uint32_t magic = 0;
  if (!r.Read(&magic)) {
    return FileError(path,
                     absl::StrCat("file is ", file.size(), " bytes, too short for a GGUF header"));
  }
  if (magic != kMagic) {
    std::string shown;
    for (int i = 0; i < 4; ++i) {
      const auto c = static_cast<unsigned char>(magic >> (8 * i));
      absl::StrAppend(&shown, c >= 0x20 && c < 0x7f
                                  ? std::string(1, static_cast<char>(c))
                                  : absl::StrCat("\\x", absl::Hex(unsigned{c}, absl::kZeroPad2)));
    }
    return FileError(
        path, absl::StrCat("not a GGUF file (starts with \"", shown, "\", expected \"GGUF\")"));
  }
  GgufLayout layout;
  if (!r.Read(&layout.version)) return r.Truncated("the version");
  const uint32_t swapped = __builtin_bswap32(layout.version);
  if ((layout.version & 0xffff) == 0 && swapped >= 1 && swapped <= 3) {
    return FileError(path, absl::StrCat("a big-endian GGUF file (version field reads ", swapped,
                                        " byte-swapped); only little-endian files are supported"));
  }
  if (layout.version != 2 && layout.version != 3) {
    return FileError(path, absl::StrCat("GGUF version ", layout.version,
                                        " is not supported (versions 2 and 3 are)"));
  }
  uint64_t n_tensors = 0;
  uint64_t n_kv = 0;
  if (!r.Read(&n_tensors)) return r.Truncated("the tensor count");
  if (!r.Read(&n_kv)) return r.Truncated("the metadata count");
  if (n_kv > r.left() / kMinKvBytes) {
    return FileError(path, absl::StrCat("metadata count ", n_kv, " cannot fit in the ", r.left(),
                                        " bytes left (corrupt header or truncated file)"));
  }
  if (n_tensors > (r.left() - n_kv * kMinKvBytes) / kMinTensorBytes) {
    return FileError(path, absl::StrCat("tensor count ", n_tensors, " (with ", n_kv,
                                        " metadata entries) cannot fit in the ", r.left(),
                                        " bytes left (corrupt header or truncated file)"));
  }

  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key;
    if (!r.ReadString(&key)) return r.Truncated(absl::StrCat("the key of metadata entry #", i));
    if (key.empty())
      return FileError(path, absl::StrCat("metadata entry #", i, " has an empty key"));
    Value value;
    KVS_RETURN_IF_ERROR(ReadValue(path, r, key, &value));
    if (layout.metadata.contains(key)) {
      return FileError(path, absl::StrCat("duplicate metadata key ", Quoted(key)));
    }
    layout.metadata.emplace(std::move(key), std::move(value));
  }
  KVS_ASSIGN_OR_RETURN(layout.alignment, Alignment(path, layout));

  std::set<std::string_view> names;
  layout.tensors.reserve(static_cast<size_t>(n_tensors));  // bounded above
  for (uint64_t i = 0; i < n_tensors; ++i) {
    KVS_ASSIGN_OR_RETURN(TensorInfo t, ReadTensorInfo(path, r, i, file.size()));
    layout.tensors.push_back(std::move(t));
  }
  for (const TensorInfo& t : layout.tensors) {  // after the vector stops moving
    if (!names.insert(t.name).second)
      return FileError(path, absl::StrCat("duplicate tensor ", Quoted(t.name)));
  }
  layout.data_offset = AlignUp(r.pos(), layout.alignment);
  if (!layout.tensors.empty() && layout.data_offset > file.size()) {
    return FileError(
        path, absl::StrCat("the data region would start at ", layout.data_offset,
                           ", past the end of the ", file.size(), "-byte file (truncated?)"));
  }
  KVS_RETURN_IF_ERROR(CheckOffsets(path, layout, file.size()));
  // Whatever follows the last tensor can only be its padding: more is a corrupt or
  // concatenated file, not something to serve from silently.
  uint64_t end = layout.data_offset;
  if (!layout.tensors.empty()) end += layout.tensors.back().offset + layout.tensors.back().bytes;
  if (file.size() > AlignUp(end, layout.alignment)) {
    return FileError(
        path, absl::StrCat(file.size() - end, " bytes follow the last tensor's data at ", end,
                           " (more than the alignment padding: corrupt file?)"));
  }
  return layout;
}

}  // namespace kvserve::gguf
