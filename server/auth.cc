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

}  // namespace

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
  authorization = Trim(authorization);
  if (authorization.empty()) {
    return absl::UnauthenticatedError("missing API key: send 'Authorization: Bearer <key>'");
  }
  size_t space = authorization.find(' ');
  if (space == std::string_view::npos || !EqualsIgnoreCase(authorization.substr(0, space), "bearer")) {
    return absl::UnauthenticatedError("malformed Authorization header: expected 'Bearer <key>'");
  }
  const KeyDigest presented = Sha256(Trim(authorization.substr(space + 1)));
  // Constant time over all keys: every digest is compared in full and the match is
  // selected without branching on secret data.
  size_t match = 0;
  uint32_t found = 0;
  for (const Key& key : keys_) {
    uint32_t diff = 0;
    for (size_t i = 0; i < presented.size(); ++i) diff |= presented[i] ^ key.digest[i];
    const uint32_t equal = ((diff | (0u - diff)) >> 31) ^ 1u;  // 1 iff diff == 0
    const size_t mask = 0 - static_cast<size_t>(equal & (found ^ 1u));
    match = (match & ~mask) | (key.tenant & mask);
    found |= equal;
  }
  if (found == 0) return absl::UnauthenticatedError("invalid API key");
  return &tenants_[match];
}

}  // namespace kvserve::server
