// API keys → tenants. Keys are kept only as SHA-256 digests; a presented key is hashed
// and compared against every configured digest in constant time (no early exit, neither
// inside a digest nor across digests), so response timing says nothing about how much
// of a key matched or which tenant it belongs to. Keys never reach a log line.
//
//   configured:  [ digest(k0) -> tenant 0 ][ digest(k1) -> tenant 0 ][ digest(k2) -> tenant 1 ] ...
//   presented:   "Authorization: Bearer <key>"  --sha256-->  compared with all of the above
//
// With no key configured anywhere the server is open: every request is accepted and
// runs as the default tenant (nullptr).
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "config/config.h"

namespace kvserve::server {

using KeyDigest = std::array<uint8_t, 32>;

KeyDigest Sha256(std::string_view data);

// A single Bearer key kept as its digest (the /metrics key): Check() accepts exactly that
// key, compared in constant time, with Unauthenticated naming what was wrong (never the key).
class BearerKey {
 public:
  explicit BearerKey(std::string_view key) : digest_(Sha256(key)) {}
  absl::Status Check(std::string_view authorization) const;

 private:
  KeyDigest digest_;
};

class Authenticator {
 public:
  explicit Authenticator(std::vector<config::TenantConfig> tenants);

  // True when no API key is configured (open server).
  bool open() const { return keys_.empty(); }

  // `authorization` is the raw Authorization header / metadata value ("" when absent).
  // Returns the tenant (nullptr: default tenant, open server) or Unauthenticated.
  absl::StatusOr<const config::TenantConfig*> Authenticate(std::string_view authorization) const;

  const std::vector<config::TenantConfig>& tenants() const { return tenants_; }

 private:
  struct Key {
    KeyDigest digest;
    size_t tenant;
  };
  std::vector<config::TenantConfig> tenants_;
  std::vector<Key> keys_;
};

}  // namespace kvserve::server
