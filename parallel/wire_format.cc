#include "parallel/wire_format.h"

#include <bit>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace kvserve::parallel {
namespace {

// Arrays are the bulk of a step message: on a little-endian host their memory already is the
// wire form, so they move with one memcpy; elsewhere byte by byte.
constexpr bool kLittleEndianHost = std::endian::native == std::endian::little;

template <typename T>
void AppendLe(std::vector<std::byte>& out, std::span<const T> values) {
  const size_t at = out.size();
  out.resize(at + values.size_bytes());
  if constexpr (kLittleEndianHost) {
    if (!values.empty()) std::memcpy(out.data() + at, values.data(), values.size_bytes());
  } else {
    for (size_t i = 0; i < values.size(); ++i) {
      const auto v = static_cast<std::make_unsigned_t<T>>(values[i]);
      for (size_t b = 0; b < sizeof(T); ++b)
        out[at + i * sizeof(T) + b] = static_cast<std::byte>((v >> (8 * b)) & 0xff);
    }
  }
}

template <typename T>
void ReadLe(const std::byte* in, std::vector<T>& out) {
  if constexpr (kLittleEndianHost) {
    if (!out.empty()) std::memcpy(out.data(), in, out.size() * sizeof(T));
  } else {
    for (size_t i = 0; i < out.size(); ++i) {
      std::make_unsigned_t<T> v = 0;
      for (size_t b = 0; b < sizeof(T); ++b) {
        v |= static_cast<std::make_unsigned_t<T>>(std::to_integer<uint8_t>(in[i * sizeof(T) + b]))
             << (8 * b);
      }
      out[i] = static_cast<T>(v);
    }
  }
}

}  // namespace

constexpr uint64_t kFnvOffsetBasis = 0xcbf29ce484222325ull;
constexpr uint64_t kFnvPrime = 0x100000001b3ull;

uint64_t Fnv1a64(std::span<const std::byte> bytes) {
  uint64_t h = kFnvOffsetBasis;
  for (std::byte b : bytes) h = (h ^ std::to_integer<uint64_t>(b)) * kFnvPrime;
  return h;
}

uint64_t WireChecksum(std::span<const std::byte> bytes) {
  uint64_t h = kFnvOffsetBasis;
  const size_t words = bytes.size() / 8;
  for (size_t i = 0; i < words; ++i) {
    uint64_t w = 0;
    if constexpr (kLittleEndianHost) {
      std::memcpy(&w, bytes.data() + i * 8, 8);
    } else {
      for (int b = 0; b < 8; ++b) w |= std::to_integer<uint64_t>(bytes[i * 8 + b]) << (8 * b);
    }
    h = (h ^ w) * kFnvPrime;
  }
  for (size_t i = words * 8; i < bytes.size(); ++i)
    h = (h ^ std::to_integer<uint64_t>(bytes[i])) * kFnvPrime;
  return h;
}

void WireWriter::String(absl::string_view s) {
  U32(static_cast<uint32_t>(s.size()));
  for (char c : s) out_.push_back(static_cast<std::byte>(c));
}

void WireWriter::I32Array(std::span<const int32_t> values) {
  U32(static_cast<uint32_t>(values.size()));
  AppendLe(out_, values);
}

void WireWriter::I64Array(std::span<const int64_t> values) {
  U32(static_cast<uint32_t>(values.size()));
  AppendLe(out_, values);
}

absl::Status WireReader::Need(absl::string_view field, size_t bytes) const {
  if (bytes <= remaining()) return absl::OkStatus();
  return absl::DataLossError(absl::StrCat(message_, " truncated in field '", field, "': needs ",
                                          bytes, " bytes at offset ", offset_, ", ", remaining(),
                                          " left"));
}

absl::Status WireReader::Corrupt(absl::string_view what) const {
  return absl::DataLossError(absl::StrCat(message_, " corrupt: ", what));
}

uint64_t WireReader::Le(int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(data_[offset_ + i]) << (8 * i);
  offset_ += static_cast<size_t>(bytes);
  return v;
}

absl::Status WireReader::U8(absl::string_view field, uint8_t& out) {
  if (absl::Status s = Need(field, 1); !s.ok()) return s;
  out = static_cast<uint8_t>(Le(1));
  return absl::OkStatus();
}

absl::Status WireReader::U16(absl::string_view field, uint16_t& out) {
  if (absl::Status s = Need(field, 2); !s.ok()) return s;
  out = static_cast<uint16_t>(Le(2));
  return absl::OkStatus();
}

absl::Status WireReader::U32(absl::string_view field, uint32_t& out) {
  if (absl::Status s = Need(field, 4); !s.ok()) return s;
  out = static_cast<uint32_t>(Le(4));
  return absl::OkStatus();
}

absl::Status WireReader::U64(absl::string_view field, uint64_t& out) {
  if (absl::Status s = Need(field, 8); !s.ok()) return s;
  out = Le(8);
  return absl::OkStatus();
}

absl::Status WireReader::I32(absl::string_view field, int32_t& out) {
  uint32_t v = 0;
  if (absl::Status s = U32(field, v); !s.ok()) return s;
  out = static_cast<int32_t>(v);
  return absl::OkStatus();
}

absl::Status WireReader::I64(absl::string_view field, int64_t& out) {
  uint64_t v = 0;
  if (absl::Status s = U64(field, v); !s.ok()) return s;
  out = static_cast<int64_t>(v);
  return absl::OkStatus();
}

absl::Status WireReader::String(absl::string_view field, std::string& out) {
  uint32_t n = 0;
  if (absl::Status s = U32(field, n); !s.ok()) return s;
  if (absl::Status s = Need(field, n); !s.ok()) return s;
  out.assign(reinterpret_cast<const char*>(data_.data() + offset_), n);
  offset_ += n;
  return absl::OkStatus();
}

absl::Status WireReader::I32Array(absl::string_view field, std::vector<int32_t>& out) {
  uint32_t n = 0;
  if (absl::Status s = U32(field, n); !s.ok()) return s;
  if (absl::Status s = Need(field, size_t{n} * 4); !s.ok()) return s;
  out.resize(n);
  ReadLe(data_.data() + offset_, out);
  offset_ += size_t{n} * 4;
  return absl::OkStatus();
}

absl::Status WireReader::I64Array(absl::string_view field, std::vector<int64_t>& out) {
  uint32_t n = 0;
  if (absl::Status s = U32(field, n); !s.ok()) return s;
  if (absl::Status s = Need(field, size_t{n} * 8); !s.ok()) return s;
  out.resize(n);
  ReadLe(data_.data() + offset_, out);
  offset_ += size_t{n} * 8;
  return absl::OkStatus();
}

absl::Status WireReader::Checksum() {
  const uint64_t want = WireChecksum(data_.first(offset_));
  uint64_t got = 0;
  if (absl::Status s = U64("checksum", got); !s.ok()) return s;
  if (got != want) {
    return Corrupt(absl::StrCat("checksum mismatch (stored ", absl::Hex(got), ", computed ",
                                absl::Hex(want), ")"));
  }
  if (remaining() != 0) return Corrupt(absl::StrCat(remaining(), " bytes after the checksum"));
  return absl::OkStatus();
}

}  // namespace kvserve::parallel
