// The self-describing byte format of one KV block outside the process (the remote tier,
// issue 20): a fixed little-endian header followed by the block's bytes as laid out by
// KvLayout (all layers, data then scales). A reader on another replica accepts a record
// only if every identity field matches its own and the CRC-32 (zlib) over the header and
// payload is right; anything else is a rejection with a reason (counted, never used).
//
//   offset size field
//        0    4 magic "KVSB"
//        4    2 format_version (kKvBlockFormatVersion)
//        6    2 header_bytes (kKvBlockHeaderBytes)
//        8    1 dtype (config::KvDtype; K's)  9 1 V's dtype + 1, 0 when K's
//       10    1 bit_width(int4 V group), 0 unless V is int4      11 reserved, zero
//       12    4 block_size       16 4 num_layers    20 4 num_kv_heads    24 4 head_dim
//       28    4 payload_bytes (= KvLayout::bytes_per_block())
//       32    8 model_fingerprint (model id)      40 8 config_hash (what shapes KV values)
//       48    8 tenant_salt_hash (prefix-cache group + cache_salt)
//       56    8 block_hash (the chained prefix hash the block is stored under)
//       64    4 crc32 of bytes [0,64) and the payload        68..71 reserved, zero
//       72      payload
//
// Pure value code: no I/O, no allocation beyond the encoded string.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "cache/kv_layout.h"

namespace kvserve::cache {

inline constexpr uint16_t kKvBlockFormatVersion = 1;
inline constexpr size_t kKvBlockHeaderBytes = 72;

// What every replica sharing records must agree on.
struct KvTierIdentity {
  uint64_t model_fingerprint = 0;  // hash of the model's id (e.g. its config.json bytes)
  uint64_t config_hash = 0;        // hash of the settings that change KV values
  KvLayout layout;                 // dtype, block size, layers, heads, head_dim
};

// Where one record belongs: the tenant salt (tenants share only within a group) and the
// chained block hash of the prefix.
struct KvBlockAddress {
  uint64_t tenant_salt_hash = 0;
  uint64_t block_hash = 0;
};

enum class KvRecordReject {
  kTruncated,      // shorter than the header or than header + payload_bytes
  kBadMagic,
  kFormatVersion,
  kModel,
  kConfig,
  kDtype,
  kBlockSize,
  kLayers,
  kShape,          // num_kv_heads or head_dim
  kTenant,
  kBlockHash,
  kPayloadSize,    // payload_bytes disagrees with the layout, or trailing bytes
  kChecksum,
};
// Stable snake_case names, used as metric labels ("checksum", "model", ...).
std::string_view Name(KvRecordReject r);

struct KvRecordCheck {
  std::optional<KvRecordReject> reject;  // set: the record must not be used
  std::span<const std::byte> payload;    // the block's bytes (view into the record) when accepted
  bool ok() const { return !reject.has_value(); }
};

// Encodes one block. `payload` must be exactly id.layout.bytes_per_block() bytes (checked).
std::string EncodeKvBlockRecord(const KvTierIdentity& id, KvBlockAddress at,
                                std::span<const std::byte> payload);

// Checks `record` against what this replica expects at `at`; never throws, never reads
// past the record.
KvRecordCheck CheckKvBlockRecord(std::span<const std::byte> record, const KvTierIdentity& id,
                                 KvBlockAddress at);

// The Redis key of a block: "kvserve:kv:v1:<model>:<config>:<salt>:<hash>" (hex). Records of
// other models, configurations or tenants live under other keys; the header check still
// guards against collisions and stale writers.
std::string KvBlockKey(const KvTierIdentity& id, KvBlockAddress at);

}  // namespace kvserve::cache
