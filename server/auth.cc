#include "server/auth.h"

#include <openssl/sha.h>

#include <cctype>

namespace kvserve::server {
namespace {

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// The digest of the key in "Bearer <key>", or Unauthenticated naming what is missing.
absl::StatusOr<KeyDigest> PresentedDigest(std::string_view authorization) {
  authorization = Trim(authorization);
  if (authorization.empty()) {
    return absl::UnauthenticatedError("missing API key: send 'Authorization: Bearer <key>'");
  }
  size_t space = authorization.find(' ');
  if (space == std::string_view::npos || !EqualsIgnoreCase(authorization.substr(0, space), "bearer")) {
    return absl::UnauthenticatedError("malformed Authorization header: expected 'Bearer <key>'");
  }
  return Sha256(Trim(authorization.substr(space + 1)));
}

// 1 iff equal; no early exit.
uint32_t DigestEqual(const KeyDigest& a, const KeyDigest& b) {
  uint32_t diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= a[i] ^ b[i];
  return ((diff | (0u - diff)) >> 31) ^ 1u;
}

}  // namespace

absl::Status BearerKey::Check(std::string_view authorization) const {
  absl::StatusOr<KeyDigest> presented = PresentedDigest(authorization);
  if (!presented.ok()) return presented.status();
  if (DigestEqual(*presented, digest_) == 0) return absl::UnauthenticatedError("invalid API key");
  return absl::OkStatus();
}

KeyDigest Sha256(std::string_view data) {
  KeyDigest d;
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(), d.data());
  return d;
}

Authenticator::Authenticator(std::vector<config::TenantConfig> tenants)
    : tenants_(std::move(tenants)) {
  for (size_t t = 0; t < tenants_.size(); ++t) {
    for (const auto& key : tenants_[t].api_keys) {
      keys_.push_back(Key{Sha256(key), t});
    }
    // The digests are all we need; drop the plain keys so they cannot leak from here.
    tenants_[t].api_keys.clear();
  }
}

absl::StatusOr<const config::TenantConfig*> Authenticator::Authenticate(
    std::string_view authorization) const {
  if (open()) return nullptr;
  absl::StatusOr<KeyDigest> digest = PresentedDigest(authorization);
  if (!digest.ok()) return digest.status();
  const KeyDigest& presented = *digest;
  // Constant time over all keys: every digest is compared in full and the match is
  // selected without branching on secret data.
  size_t match = 0;
  uint32_t found = 0;
  for (const Key& key : keys_) {
    const uint32_t equal = DigestEqual(presented, key.digest);
    const size_t mask = 0 - static_cast<size_t>(equal & (found ^ 1u));
    match = (match & ~mask) | (key.tenant & mask);
    found |= equal;
  }
  if (found == 0) return absl::UnauthenticatedError("invalid API key");
  return &tenants_[match];
}

}  // namespace kvserve::server
