// Chained content hash of full KV blocks, the key of the prefix cache.
//
//   root   = H(seed, model, tenant group, cache_salt)        (PrefixKey: "extra keys")
//   hash_0 = H(root,     tokens[0      .. bs))
//   hash_i = H(hash_i-1, tokens[i*bs   .. (i+1)*bs))
//
// A block's hash covers every token before it and the extra keys, so equal hashes mean
// equal KV content (same model, same tokens at the same positions). The extra keys sit in
// the root, which every later hash inherits: tenants in different prefix-cache groups, or
// requests with different cache_salt values, never share a block. NOTE: this is a security
// property: a shared prefix cache leaks through timing (a hit is faster), so isolation is
// the default and sharing is opt-in per tenant group (config: prefix_cache_group).
//
// 64-bit wyhash-style mixing (128-bit multiply, fold). A false hit needs a 64-bit
// collision between two live blocks: about n^2 / 2^65, ~3e-8 for a million cached blocks.
// The seed comes from the owner (config), never from a global.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "cache/cache_types.h"

namespace kvserve::cache {

// The "extra keys" of a prefix: everything besides the tokens that decides the KV content
// or who may see it. Build it with MakePrefixKey.
struct PrefixKey {
  uint64_t model = 0;       // hash of the served model's identity
  uint64_t tenant = 0;      // hash of the tenant's prefix-cache group (its name if none)
  uint64_t cache_salt = 0;  // hash of the request's optional cache_salt; 0 = none
  bool operator==(const PrefixKey&) const = default;
};

// `tenant_group`: the tenant's prefix_cache_group, or the tenant's name when it has none
// (callers pass the resolved value). An empty cache_salt means "no salt".
PrefixKey MakePrefixKey(std::string_view model, std::string_view tenant_group,
                        std::string_view cache_salt);

// Who may see a block, as one number (the remote tier's address; kv_block_record.h): the
// tenant's prefix-cache group and the request's cache_salt. The model is part of the tier
// identity instead.
uint64_t TenantSalt(const PrefixKey& key);

class BlockHasher {
 public:
  explicit BlockHasher(uint64_t seed = kDefaultSeed) : seed_(seed) {}

  // Hash standing in as the parent of a sequence's first block.
  BlockHash root(const PrefixKey& key) const;
  // Hash of a full block of `tokens` whose predecessor hashed to `parent`. Never kNoHash.
  BlockHash chain(BlockHash parent, std::span<const int32_t> tokens) const;

  // Hash of a byte string (model names, tenant groups, salts).
  static uint64_t HashString(std::string_view s, uint64_t seed = kDefaultSeed);

  static constexpr uint64_t kDefaultSeed = 0x6b7673657276ull;  // "kvserv"

 private:
  uint64_t seed_;
};

}  // namespace kvserve::cache
