// Byte encoding shared by the messages ranks exchange (step_message.h, rank_handshake.h):
// fixed-width little-endian integers whatever the host, arrays and strings prefixed with
// their u32 element count, and a 64-bit checksum (WireChecksum) over everything before it.
//
//   u8/u16/u32/u64/i32/i64   little-endian, two's complement
//   array<T>                 u32 count, then count x T
//   string                   u32 byte count, then the bytes (no terminator)
//
// WireReader checks every read against the bytes left and names the field it was reading,
// so a truncated or corrupt message is refused with "<message> truncated in field 'x' ...",
// never read past its end. An array's count is checked against the bytes left before
// anything is allocated, so a corrupt count cannot ask for gigabytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace kvserve::parallel {

// FNV-1a, 64-bit, byte by byte (the published function: configuration hashes).
uint64_t Fnv1a64(std::span<const std::byte> bytes);

// The message checksum: FNV-1a's step h -> (h ^ x) * prime (64-bit offset basis and prime)
// applied to each little-endian 64-bit word of `bytes`, then to each of the 0-7 trailing bytes.
// Eight times fewer dependent multiplies than byte-wise FNV-1a, with the same guarantee: a
// step is a bijection of h, and a changed byte changes its word, so any one changed byte (or
// word) changes the checksum.
uint64_t WireChecksum(std::span<const std::byte> bytes);

class WireWriter {
 public:
  // Appends to `out` (cleared first; its capacity is reused).
  explicit WireWriter(std::vector<std::byte>& out) : out_(out) { out_.clear(); }

  void U8(uint8_t v) { out_.push_back(static_cast<std::byte>(v)); }
  void U16(uint16_t v) { Le(v, 2); }
  void U32(uint32_t v) { Le(v, 4); }
  void U64(uint64_t v) { Le(v, 8); }
  void I32(int32_t v) { Le(static_cast<uint32_t>(v), 4); }
  void I64(int64_t v) { Le(static_cast<uint64_t>(v), 8); }
  void String(absl::string_view s);
  void I32Array(std::span<const int32_t> values);
  void I64Array(std::span<const int64_t> values);
  // The checksum of every byte written so far, as a u64.
  void Checksum() { U64(WireChecksum(out_)); }

  size_t size() const { return out_.size(); }

 private:
  void Le(uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) out_.push_back(static_cast<std::byte>((v >> (8 * i)) & 0xff));
  }
  std::vector<std::byte>& out_;
};

class WireReader {
 public:
  // `message` names what is read in errors ("step message").
  WireReader(std::span<const std::byte> data, absl::string_view message)
      : data_(data), message_(message) {}

  absl::Status U8(absl::string_view field, uint8_t& out);
  absl::Status U16(absl::string_view field, uint16_t& out);
  absl::Status U32(absl::string_view field, uint32_t& out);
  absl::Status U64(absl::string_view field, uint64_t& out);
  absl::Status I32(absl::string_view field, int32_t& out);
  absl::Status I64(absl::string_view field, int64_t& out);
  absl::Status String(absl::string_view field, std::string& out);
  absl::Status I32Array(absl::string_view field, std::vector<int32_t>& out);
  absl::Status I64Array(absl::string_view field, std::vector<int64_t>& out);
  // Reads the u64 checksum and compares it with that of every byte before it; then requires
  // the message to end there.
  absl::Status Checksum();

  // Truncation error for `field` unless `bytes` more bytes are left (reads nothing).
  absl::Status Require(absl::string_view field, size_t bytes) const { return Need(field, bytes); }

  size_t offset() const { return offset_; }
  size_t remaining() const { return data_.size() - offset_; }
  // "<message> corrupt: <what>" (DataLoss), for checks callers make on decoded values.
  absl::Status Corrupt(absl::string_view what) const;

 private:
  absl::Status Need(absl::string_view field, size_t bytes) const;
  uint64_t Le(int bytes);  // after Need()

  std::span<const std::byte> data_;
  std::string message_;
  size_t offset_ = 0;
};

}  // namespace kvserve::parallel
