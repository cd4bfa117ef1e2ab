// API keys → tenants. Keys are kept only as SHA-256 digests; a presented key is hashed
// and compared against every configured digest in constant time (no early exit, neither
// inside a digest nor across digests), so response timing says nothing about how much
// of a key matched or which tenant it belongs to. Keys never reach a log line.
//
//   configured:  [ digest(k0) -> tenant 0 ][ digest(k1) -> tenant 0 ][ digest(k2) -> tenant 1 ] ...
//   presented:   "Authorization: Bearer <key>"  --sha256-->  compared with all of the above
//
// With no key configured anywhere the server is open: every request is accepted and
// runs as the default tenant (nullptr). The key table can be replaced while serving
// (ReloadKeys, on SIGHUP); readers take a snapshot of it, so a reload never blocks them
// for longer than a shared_ptr copy.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
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
  // Movable before it is shared between threads (the Frontend takes it by value).
  Authenticator(Authenticator&& other) noexcept;
  Authenticator& operator=(Authenticator&&) = delete;

  // True when no API key is configured (open server).
  bool open() const { return Snapshot()->empty(); }

  // `authorization` is the raw Authorization header / metadata value ("" when absent).
  // Returns the tenant (nullptr: default tenant, open server) or Unauthenticated.
  absl::StatusOr<const config::TenantConfig*> Authenticate(std::string_view authorization) const;

  // Replaces every tenant's keys with those of `tenants` (a re-read configuration: SIGHUP).
  // Only keys change: the tenants themselves (names, order, limits) are fixed for the
  // process's life, so pointers Authenticate handed out stay valid. Refused, keeping the old
  // keys, when the tenant names or their order differ, or when the new keys would leave a
  // keyed server open. Safe while other threads authenticate. Messages never hold a key.
  absl::Status ReloadKeys(const std::vector<config::TenantConfig>& tenants);

  const std::vector<config::TenantConfig>& tenants() const { return tenants_; }

 private:
  struct Key {
    KeyDigest digest;
    size_t tenant;
  };
  using KeyTable = std::vector<Key>;
  static std::shared_ptr<const KeyTable> Digests(std::vector<config::TenantConfig>& tenants);
  std::shared_ptr<const KeyTable> Snapshot() const;

  std::vector<config::TenantConfig> tenants_;  // api_keys cleared: only digests are kept
  mutable std::mutex mu_;
  std::shared_ptr<const KeyTable> keys_;       // guarded by mu_; never null
};

}  // namespace kvserve::server
