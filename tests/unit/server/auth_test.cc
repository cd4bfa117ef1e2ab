#include "server/auth.h"

#include <gtest/gtest.h>

namespace kvserve::server {
namespace {

std::vector<config::TenantConfig> Tenants() {
  config::TenantConfig a;
  a.name = "alpha";
  a.api_keys = {"key-a1", "key-a2"};
  config::TenantConfig b;
  b.name = "beta";
  b.api_keys = {"key-b"};
  return {a, b};
}

TEST(AuthenticatorTest, OpenWhenNoKeysConfigured) {
  Authenticator auth({});
  EXPECT_TRUE(auth.open());
  auto t = auth.Authenticate("");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(*t, nullptr);
  EXPECT_TRUE(auth.Authenticate("Bearer anything").ok());
}

TEST(AuthenticatorTest, MapsEveryKeyToItsTenant) {
  Authenticator auth(Tenants());
  EXPECT_FALSE(auth.open());
  const std::vector<std::pair<const char*, const char*>> cases = {
      {"Bearer key-a1", "alpha"}, {"Bearer key-a2", "alpha"}, {"Bearer key-b", "beta"},
      {"bearer key-b", "beta"},   {"BEARER   key-a1  ", "alpha"}};
  for (auto [header, tenant] : cases) {
    auto t = auth.Authenticate(header);
    ASSERT_TRUE(t.ok()) << header;
    ASSERT_NE(*t, nullptr);
    EXPECT_EQ((*t)->name, tenant) << header;
  }
}

TEST(AuthenticatorTest, RejectsMissingMalformedAndWrongKeys) {
  Authenticator auth(Tenants());
  for (const char* header : {"", "key-a1", "Basic key-a1", "Bearer", "Bearer key-a", "Bearer key-a1x",
                             "Bearer KEY-A1"}) {
    auto t = auth.Authenticate(header);
    EXPECT_EQ(t.status().code(), absl::StatusCode::kUnauthenticated) << header;
    // The presented key never appears in the error.
    if (std::string_view(header).size() > 7) {
      EXPECT_EQ(std::string(t.status().message()).find("key-a"), std::string::npos) << header;
    }
  }
}

TEST(AuthenticatorTest, DropsPlainKeysAfterHashing) {
  Authenticator auth(Tenants());
  for (const auto& t : auth.tenants()) EXPECT_TRUE(t.api_keys.empty());
}

TEST(AuthenticatorTest, Sha256MatchesKnownVector) {
  // SHA-256("abc"), FIPS 180-2 appendix B.1.
  const KeyDigest d = Sha256("abc");
  EXPECT_EQ(d[0], 0xba);
  EXPECT_EQ(d[1], 0x78);
  EXPECT_EQ(d[31], 0xad);
}

}  // namespace
}  // namespace kvserve::server
