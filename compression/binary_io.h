// Little-endian binary encoding shared by the calibration files (triattention_stats.h,
// key_basis.h): fixed-width writers, a bounds-checked reader that never reads past the end,
// and the FNV-1a-64 checksum both formats end with.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kvserve::compression {

inline uint64_t Fnv1a64(std::string_view bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (char c : bytes) {
    h ^= static_cast<uint8_t>(c);
    h *= 0x100000001b3ull;
  }
  return h;
}

inline void PutU32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
inline void PutU64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
inline void PutF64(std::string& out, double v) { PutU64(out, std::bit_cast<uint64_t>(v)); }

// Bounds-checked little-endian reader over a whole file; every read says whether it fit.
class ByteReader {
 public:
  explicit ByteReader(std::string_view bytes) : bytes_(bytes) {}
  size_t pos() const { return pos_; }
  size_t remaining() const { return bytes_.size() - pos_; }
  bool U32(uint32_t& v) {
    if (remaining() < 4) return false;
    v = 0;
    for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<uint8_t>(bytes_[pos_ + i])) << (8 * i);
    pos_ += 4;
    return true;
  }
  bool U64(uint64_t& v) {
    if (remaining() < 8) return false;
    v = 0;
    for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(bytes_[pos_ + i])) << (8 * i);
    pos_ += 8;
    return true;
  }
  bool F64(double& v) {
    uint64_t u = 0;
    if (!U64(u)) return false;
    v = std::bit_cast<double>(u);
    return true;
  }
  // Reads the trailing FNV-1a-64 checksum (the reader must stand right after the body) and
  // says whether it matches everything before it.
  bool ChecksumMatches() {
    const size_t body_end = pos_;
    uint64_t checksum = 0;
    return U64(checksum) && checksum == Fnv1a64(bytes_.substr(0, body_end));
  }
  bool Bytes(size_t n, std::string_view& out) {
    if (remaining() < n) return false;
    out = bytes_.substr(pos_, n);
    pos_ += n;
    return true;
  }

 private:
  std::string_view bytes_;
  size_t pos_ = 0;
};

// Writes `bytes` to `path` atomically (temporary file + rename).
absl::Status WriteFileAtomically(const std::string& bytes, const std::string& path);
// The whole file; NotFound naming `what` when it cannot be opened.
absl::StatusOr<std::string> ReadWholeFile(const std::string& path, std::string_view what);

}  // namespace kvserve::compression
