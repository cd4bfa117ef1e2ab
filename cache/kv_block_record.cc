#include "cache/kv_block_record.h"

#include <zlib.h>

#include <bit>
#include <cstring>

#include "absl/strings/str_format.h"
#include "base/check.h"

namespace kvserve::cache {
namespace {

constexpr char kMagic[4] = {'K', 'V', 'S', 'B'};
constexpr size_t kCrcOffset = 64;

template <typename T>
void Put(std::string& out, size_t at, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) out[at + i] = static_cast<char>((static_cast<uint64_t>(v) >> (8 * i)) & 0xff);
}

template <typename T>
T Get(std::span<const std::byte> in, size_t at) {
  uint64_t v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) v |= static_cast<uint64_t>(std::to_integer<uint8_t>(in[at + i])) << (8 * i);
  return static_cast<T>(v);
}

uint32_t Crc(std::span<const std::byte> header, std::span<const std::byte> payload) {
  uLong crc = crc32(0L, Z_NULL, 0);
  crc = crc32(crc, reinterpret_cast<const Bytef*>(header.data()), static_cast<uInt>(header.size()));
  // zlib takes uInt lengths: feed large payloads in pieces.
  for (size_t off = 0; off < payload.size();) {
    size_t n = std::min<size_t>(payload.size() - off, 1u << 30);
    crc = crc32(crc, reinterpret_cast<const Bytef*>(payload.data() + off), static_cast<uInt>(n));
    off += n;
  }
  return static_cast<uint32_t>(crc);
}

}  // namespace

std::string_view Name(KvRecordReject r) {
  switch (r) {
    case KvRecordReject::kTruncated: return "truncated";
    case KvRecordReject::kBadMagic: return "bad_magic";
    case KvRecordReject::kFormatVersion: return "format_version";
    case KvRecordReject::kModel: return "model";
    case KvRecordReject::kConfig: return "config";
    case KvRecordReject::kDtype: return "dtype";
    case KvRecordReject::kBlockSize: return "block_size";
    case KvRecordReject::kLayers: return "layers";
    case KvRecordReject::kShape: return "shape";
    case KvRecordReject::kTenant: return "tenant";
    case KvRecordReject::kBlockHash: return "block_hash";
    case KvRecordReject::kPayloadSize: return "payload_size";
    case KvRecordReject::kChecksum: return "checksum";
  }
  return "unknown";
}

namespace {
// Byte 9: 0 when V shares K's dtype (every record written before split dtypes), else V's
// dtype + 1. Byte 10: log2 of the int4 value group when V is int4, else 0.
uint8_t VDtypeByte(const KvLayout& l) {
  return l.v_dtype() == l.k_dtype() ? 0 : static_cast<uint8_t>(static_cast<int>(l.v_dtype()) + 1);
}
uint8_t Int4GroupByte(const KvLayout& l) {
  return l.v_dtype() == config::KvDtype::kInt4 ? static_cast<uint8_t>(std::bit_width(static_cast<unsigned>(l.int4_group)))
                                               : 0;
}
}  // namespace

std::string EncodeKvBlockRecord(const KvTierIdentity& id, KvBlockAddress at,
                                std::span<const std::byte> payload) {
  const KvLayout& l = id.layout;
  KVS_CHECK(payload.size() == l.bytes_per_block());
  std::string out(kKvBlockHeaderBytes + payload.size(), '\0');
  std::memcpy(out.data(), kMagic, sizeof(kMagic));
  Put<uint16_t>(out, 4, kKvBlockFormatVersion);
  Put<uint16_t>(out, 6, static_cast<uint16_t>(kKvBlockHeaderBytes));
  Put<uint8_t>(out, 8, static_cast<uint8_t>(l.dtype));
  Put<uint8_t>(out, 9, VDtypeByte(l));
  Put<uint8_t>(out, 10, Int4GroupByte(l));
  Put<uint32_t>(out, 12, static_cast<uint32_t>(l.block_size));
  Put<uint32_t>(out, 16, static_cast<uint32_t>(l.num_layers));
  Put<uint32_t>(out, 20, static_cast<uint32_t>(l.num_kv_heads));
  Put<uint32_t>(out, 24, static_cast<uint32_t>(l.head_dim));
  Put<uint32_t>(out, 28, static_cast<uint32_t>(payload.size()));
  Put<uint64_t>(out, 32, id.model_fingerprint);
  Put<uint64_t>(out, 40, id.config_hash);
  Put<uint64_t>(out, 48, at.tenant_salt_hash);
  Put<uint64_t>(out, 56, at.block_hash);
  if (!payload.empty()) std::memcpy(out.data() + kKvBlockHeaderBytes, payload.data(), payload.size());
  auto bytes = std::as_bytes(std::span<const char>(out.data(), out.size()));
  Put<uint32_t>(out, kCrcOffset, Crc(bytes.first(kCrcOffset), bytes.subspan(kKvBlockHeaderBytes)));
  return out;
}

KvRecordCheck CheckKvBlockRecord(std::span<const std::byte> record, const KvTierIdentity& id,
                                 KvBlockAddress at) {
  auto reject = [](KvRecordReject r) { return KvRecordCheck{r, {}}; };
  if (record.size() < 8) return reject(KvRecordReject::kTruncated);
  if (std::memcmp(record.data(), kMagic, sizeof(kMagic)) != 0) return reject(KvRecordReject::kBadMagic);
  if (Get<uint16_t>(record, 4) != kKvBlockFormatVersion ||
      Get<uint16_t>(record, 6) != kKvBlockHeaderBytes) {
    return reject(KvRecordReject::kFormatVersion);
  }
  if (record.size() < kKvBlockHeaderBytes) return reject(KvRecordReject::kTruncated);
  const KvLayout& l = id.layout;
  if (Get<uint64_t>(record, 32) != id.model_fingerprint) return reject(KvRecordReject::kModel);
  if (Get<uint64_t>(record, 40) != id.config_hash) return reject(KvRecordReject::kConfig);
  if (Get<uint8_t>(record, 8) != static_cast<uint8_t>(l.dtype) || Get<uint8_t>(record, 9) != VDtypeByte(l) ||
      Get<uint8_t>(record, 10) != Int4GroupByte(l)) {
    return reject(KvRecordReject::kDtype);
  }
  if (Get<uint32_t>(record, 12) != static_cast<uint32_t>(l.block_size)) return reject(KvRecordReject::kBlockSize);
  if (Get<uint32_t>(record, 16) != static_cast<uint32_t>(l.num_layers)) return reject(KvRecordReject::kLayers);
  if (Get<uint32_t>(record, 20) != static_cast<uint32_t>(l.num_kv_heads) ||
      Get<uint32_t>(record, 24) != static_cast<uint32_t>(l.head_dim)) {
    return reject(KvRecordReject::kShape);
  }
  if (Get<uint64_t>(record, 48) != at.tenant_salt_hash) return reject(KvRecordReject::kTenant);
  if (Get<uint64_t>(record, 56) != at.block_hash) return reject(KvRecordReject::kBlockHash);
  const size_t payload_bytes = Get<uint32_t>(record, 28);
  if (payload_bytes != l.bytes_per_block()) return reject(KvRecordReject::kPayloadSize);
  if (record.size() < kKvBlockHeaderBytes + payload_bytes) return reject(KvRecordReject::kTruncated);
  if (record.size() > kKvBlockHeaderBytes + payload_bytes) return reject(KvRecordReject::kPayloadSize);
  auto payload = record.subspan(kKvBlockHeaderBytes, payload_bytes);
  if (Get<uint32_t>(record, kCrcOffset) != Crc(record.first(kCrcOffset), payload)) {
    return reject(KvRecordReject::kChecksum);
  }
  return KvRecordCheck{std::nullopt, payload};
}

std::string KvBlockKey(const KvTierIdentity& id, KvBlockAddress at) {
  return absl::StrFormat("kvserve:kv:v%d:%016x:%016x:%016x:%016x", kKvBlockFormatVersion, id.model_fingerprint,
                         id.config_hash, at.tenant_salt_hash, at.block_hash);
}

}  // namespace kvserve::cache
