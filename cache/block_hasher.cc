#include "cache/block_hasher.h"

#include <cstring>

namespace kvserve::cache {
namespace {

__extension__ typedef unsigned __int128 U128;

// Odd 64-bit constants with bits set in both 32-bit halves: token ids (< 2^31) packed two
// per word can never cancel one of them to zero.
constexpr uint64_t kP0 = 0xa0761d6478bd642full;
constexpr uint64_t kP1 = 0xe7037ed1a0b428dbull;
constexpr uint64_t kP2 = 0x8ebc6af09c88c6e3ull;
constexpr uint64_t kP3 = 0x589965cc75374cc3ull;
constexpr uint64_t kP4 = 0x1d8e4e27c47d124full;

// 64x64 -> 128-bit multiply folded to 64 bits: every input bit reaches every output bit.
inline uint64_t Mum(uint64_t a, uint64_t b) {
  const U128 r = static_cast<U128>(a) * b;
  return static_cast<uint64_t>(r) ^ static_cast<uint64_t>(r >> 64);
}

// One absorption step. The feed-forward of `h` keeps the state even if a product is zero.
inline uint64_t Absorb(uint64_t h, uint64_t a, uint64_t b) { return Mum(a ^ kP1, b ^ h ^ kP2) ^ h; }

inline uint64_t Pack(int32_t lo, int32_t hi) {
  return static_cast<uint64_t>(static_cast<uint32_t>(lo)) |
         (static_cast<uint64_t>(static_cast<uint32_t>(hi)) << 32);
}

inline uint64_t Finish(uint64_t h, uint64_t len) {
  const uint64_t r = Mum(h ^ kP3, len ^ kP4);
  return r == 0 ? 1 : r;  // 0 is kNoHash
}

}  // namespace

BlockHash BlockHasher::chain(BlockHash parent, std::span<const int32_t> tokens) const {
  uint64_t h = parent.value() ^ seed_ ^ kP0;
  const size_t n = tokens.size();
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    h = Absorb(h, Pack(tokens[i], tokens[i + 1]), Pack(tokens[i + 2], tokens[i + 3]));
  }
  if (i < n) {
    int32_t t[4] = {0, 0, 0, 0};
    for (size_t j = 0; i + j < n; ++j) t[j] = tokens[i + j];
    h = Absorb(h, Pack(t[0], t[1]), Pack(t[2], t[3]));
  }
  return BlockHash{Finish(h, n)};
}

BlockHash BlockHasher::root(const PrefixKey& key) const {
  uint64_t h = seed_ ^ kP3;
  h = Absorb(h, key.model, key.tenant);
  h = Absorb(h, key.cache_salt, 0x726f6f74ull /* "root" */);
  return BlockHash{Finish(h, 3)};
}

uint64_t BlockHasher::HashString(std::string_view s, uint64_t seed) {
  uint64_t h = seed ^ kP0;
  size_t i = 0;
  for (; i + 16 <= s.size(); i += 16) {
    uint64_t a, b;
    std::memcpy(&a, s.data() + i, 8);
    std::memcpy(&b, s.data() + i + 8, 8);
    h = Absorb(h, a, b);
  }
  if (i < s.size()) {
    char tail[16] = {};
    std::memcpy(tail, s.data() + i, s.size() - i);
    uint64_t a, b;
    std::memcpy(&a, tail, 8);
    std::memcpy(&b, tail + 8, 8);
    h = Absorb(h, a, b);
  }
  return Finish(h, s.size());
}

PrefixKey MakePrefixKey(std::string_view model, std::string_view tenant_group,
                        std::string_view cache_salt) {
  PrefixKey k;
  k.model = BlockHasher::HashString(model);
  // Distinct seeds per field: ("a", "b") and ("b", "a") must not produce the same key.
  k.tenant = BlockHasher::HashString(tenant_group, BlockHasher::kDefaultSeed ^ kP1);
  k.cache_salt = cache_salt.empty() ? 0 : BlockHasher::HashString(cache_salt, BlockHasher::kDefaultSeed ^ kP2);
  return k;
}

uint64_t TenantSalt(const PrefixKey& key) {
  const uint64_t r = Mum(key.tenant ^ kP0, key.cache_salt ^ kP3);
  return r == 0 ? 1 : r;
}

}  // namespace kvserve::cache
