#include "server/auth/auth.h"

#include <openssl/sha.h>

#include <cctype>

#include "absl/strings/str_cat.h"

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

std::shared_ptr<const Authenticator::KeyTable> Authenticator::Digests(std::vector<config::TenantConfig>& tenants) {
  auto table = std::make_shared<KeyTable>();
  for (size_t t = 0; t < tenants.size(); ++t) {
    for (const auto& key : tenants[t].api_keys) table->push_back(Key{Sha256(key), t});
    // The digests are all we need; drop the plain keys so they cannot leak from here.
    tenants[t].api_keys.clear();
  }
  return table;
}

Authenticator::Authenticator(std::vector<config::TenantConfig> tenants)
    : tenants_(std::move(tenants)), keys_(Digests(tenants_)) {}

Authenticator::Authenticator(Authenticator&& other) noexcept
    : tenants_(std::move(other.tenants_)), keys_(other.Snapshot()) {}

std::shared_ptr<const Authenticator::KeyTable> Authenticator::Snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  return keys_;
}

absl::Status Authenticator::ReloadKeys(const std::vector<config::TenantConfig>& tenants) {
  if (tenants.size() != tenants_.size()) {
    return absl::FailedPreconditionError(absl::StrCat("the configuration now has ", tenants.size(),
                                                      " tenants instead of ", tenants_.size(),
                                                      ": changing tenants needs a restart"));
  }
  for (size_t t = 0; t < tenants.size(); ++t) {
    if (tenants[t].name != tenants_[t].name) {
      return absl::FailedPreconditionError(absl::StrCat("tenants[", t, "] is now \"", tenants[t].name,
                                                        "\" instead of \"", tenants_[t].name,
                                                        "\": changing tenants needs a restart"));
    }
  }
  std::vector<config::TenantConfig> copy = tenants;
  std::shared_ptr<const KeyTable> table = Digests(copy);
  std::lock_guard<std::mutex> lock(mu_);
  if (table->empty() && !keys_->empty()) {
    return absl::FailedPreconditionError("the new configuration has no API key at all (the server would be open)");
  }
  keys_ = std::move(table);
  return absl::OkStatus();
}

absl::StatusOr<const config::TenantConfig*> Authenticator::Authenticate(
    std::string_view authorization) const {
  const std::shared_ptr<const KeyTable> keys = Snapshot();
  if (keys->empty()) return nullptr;
  absl::StatusOr<KeyDigest> digest = PresentedDigest(authorization);
  if (!digest.ok()) return digest.status();
  const KeyDigest& presented = *digest;
  // Constant time over all keys: every digest is compared in full and the match is
  // selected without branching on secret data.
  size_t match = 0;
  uint32_t found = 0;
  for (const Key& key : *keys) {
    const uint32_t equal = DigestEqual(presented, key.digest);
    const size_t mask = 0 - static_cast<size_t>(equal & (found ^ 1u));
    match = (match & ~mask) | (key.tenant & mask);
    found |= equal;
  }
  if (found == 0) return absl::UnauthenticatedError("invalid API key");
  return &tenants_[match];
}

}  // namespace kvserve::server
