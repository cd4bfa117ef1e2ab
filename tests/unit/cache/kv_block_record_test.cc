#include "cache/kv_block_record.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace kvserve::cache {
namespace {

KvTierIdentity Identity() {
  KvTierIdentity id;
  id.model_fingerprint = 0x1111222233334444ull;
  id.config_hash = 0x5555666677778888ull;
  id.layout.num_layers = 3;
  id.layout.num_kv_heads = 2;
  id.layout.head_dim = 8;
  id.layout.block_size = 16;
  id.layout.dtype = config::KvDtype::kInt8;  // with scales: payload = data + scales
  return id;
}

std::vector<std::byte> Payload(const KvTierIdentity& id, uint8_t seed) {
  std::vector<std::byte> p(id.layout.bytes_per_block());
  for (size_t i = 0; i < p.size(); ++i) p[i] = static_cast<std::byte>((i * 31 + seed) & 0xff);
  return p;
}

std::span<const std::byte> Bytes(const std::string& s) {
  return std::as_bytes(std::span<const char>(s.data(), s.size()));
}

constexpr KvBlockAddress kAt{.tenant_salt_hash = 0xabcdef, .block_hash = 0x123456789};

TEST(KvBlockRecord, RoundTripsThePayloadExactly) {
  const auto id = Identity();
  const auto payload = Payload(id, 7);
  const std::string rec = EncodeKvBlockRecord(id, kAt, payload);
  EXPECT_EQ(rec.size(), kKvBlockHeaderBytes + id.layout.bytes_per_block());
  const KvRecordCheck c = CheckKvBlockRecord(Bytes(rec), id, kAt);
  ASSERT_TRUE(c.ok()) << Name(*c.reject);
  ASSERT_EQ(c.payload.size(), payload.size());
  EXPECT_EQ(std::memcmp(c.payload.data(), payload.data(), payload.size()), 0);
}

TEST(KvBlockRecord, EveryIdentityMismatchIsRejectedWithItsReason) {
  const auto id = Identity();
  const std::string rec = EncodeKvBlockRecord(id, kAt, Payload(id, 1));
  auto rejected = [&](const KvTierIdentity& other, KvBlockAddress at) {
    const KvRecordCheck c = CheckKvBlockRecord(Bytes(rec), other, at);
    EXPECT_TRUE(c.payload.empty());
    return c.reject;
  };
  auto changed = [&](auto edit) {
    KvTierIdentity o = id;
    edit(o);
    return o;
  };
  EXPECT_EQ(rejected(changed([](auto& o) { o.model_fingerprint ^= 1; }), kAt), KvRecordReject::kModel);
  EXPECT_EQ(rejected(changed([](auto& o) { o.config_hash ^= 1; }), kAt), KvRecordReject::kConfig);
  EXPECT_EQ(rejected(changed([](auto& o) { o.layout.dtype = config::KvDtype::kFp8E4M3; }), kAt),
            KvRecordReject::kDtype);
  EXPECT_EQ(rejected(changed([](auto& o) { o.layout.block_size = 32; }), kAt), KvRecordReject::kBlockSize);
  EXPECT_EQ(rejected(changed([](auto& o) { o.layout.num_layers = 4; }), kAt), KvRecordReject::kLayers);
  EXPECT_EQ(rejected(changed([](auto& o) { o.layout.head_dim = 16; }), kAt), KvRecordReject::kShape);
  EXPECT_EQ(rejected(changed([](auto& o) { o.layout.num_kv_heads = 1; }), kAt), KvRecordReject::kShape);
  // Another tenant group never gets this tenant's block, even under the same prefix hash.
  EXPECT_EQ(rejected(id, {.tenant_salt_hash = 0xabcdee, .block_hash = kAt.block_hash}), KvRecordReject::kTenant);
  EXPECT_EQ(rejected(id, {.tenant_salt_hash = kAt.tenant_salt_hash, .block_hash = 7}), KvRecordReject::kBlockHash);
}

TEST(KvBlockRecord, TruncatedOrExtendedRecordsAreRejected) {
  const auto id = Identity();
  const std::string rec = EncodeKvBlockRecord(id, kAt, Payload(id, 2));
  for (size_t n : {size_t{0}, size_t{3}, size_t{7}, kKvBlockHeaderBytes - 1, kKvBlockHeaderBytes,
                   rec.size() - 1}) {
    const KvRecordCheck c = CheckKvBlockRecord(Bytes(rec).first(n), id, kAt);
    EXPECT_EQ(c.reject, KvRecordReject::kTruncated) << n;
  }
  const std::string longer = rec + "x";
  EXPECT_EQ(CheckKvBlockRecord(Bytes(longer), id, kAt).reject, KvRecordReject::kPayloadSize);
}

TEST(KvBlockRecord, AnyFlippedBitIsCaught) {
  const auto id = Identity();
  const std::string rec = EncodeKvBlockRecord(id, kAt, Payload(id, 3));
  // Every byte of the checked header and a spread of payload bytes: a flipped bit is either
  // an identity mismatch or a checksum failure, never an accepted record.
  for (size_t i = 0; i < rec.size(); i += (i < kKvBlockHeaderBytes ? 1 : 97)) {
    if (i >= 68 && i < kKvBlockHeaderBytes) continue;  // reserved, not covered
    std::string bad = rec;
    bad[i] = static_cast<char>(bad[i] ^ 0x10);
    const KvRecordCheck c = CheckKvBlockRecord(Bytes(bad), id, kAt);
    EXPECT_FALSE(c.ok()) << "byte " << i;
  }
  std::string bad = rec;
  bad[kKvBlockHeaderBytes + 5] = static_cast<char>(bad[kKvBlockHeaderBytes + 5] ^ 1);
  EXPECT_EQ(CheckKvBlockRecord(Bytes(bad), id, kAt).reject, KvRecordReject::kChecksum);
  bad = rec;
  bad[0] = 'X';
  EXPECT_EQ(CheckKvBlockRecord(Bytes(bad), id, kAt).reject, KvRecordReject::kBadMagic);
  bad = rec;
  bad[4] = 2;  // a future format version
  EXPECT_EQ(CheckKvBlockRecord(Bytes(bad), id, kAt).reject, KvRecordReject::kFormatVersion);
}

TEST(KvBlockRecord, KeysSeparateModelsConfigsAndTenants) {
  const auto id = Identity();
  const std::string k = KvBlockKey(id, kAt);
  EXPECT_EQ(k, "kvserve:kv:v1:1111222233334444:5555666677778888:0000000000abcdef:0000000123456789");
  KvTierIdentity other = id;
  other.config_hash = 1;
  EXPECT_NE(KvBlockKey(other, kAt), k);
  EXPECT_NE(KvBlockKey(id, {.tenant_salt_hash = 1, .block_hash = kAt.block_hash}), k);
  EXPECT_EQ(Name(KvRecordReject::kChecksum), "checksum");
}

}  // namespace
}  // namespace kvserve::cache
