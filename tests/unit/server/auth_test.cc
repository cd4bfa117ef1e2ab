#include "server/auth/auth.h"

#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>

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

TEST(AuthenticatorTest, ReloadKeysReplacesEveryTenantsKeys) {
  Authenticator auth(Tenants());
  auto before = auth.Authenticate("Bearer key-b");
  ASSERT_TRUE(before.ok());
  std::vector<config::TenantConfig> rotated = Tenants();
  rotated[0].api_keys = {"key-a3"};
  ASSERT_TRUE(auth.ReloadKeys(rotated).ok());
  for (const char* old_key : {"Bearer key-a1", "Bearer key-a2"}) {
    EXPECT_EQ(auth.Authenticate(old_key).status().code(), absl::StatusCode::kUnauthenticated) << old_key;
  }
  auto a3 = auth.Authenticate("Bearer key-a3");
  ASSERT_TRUE(a3.ok());
  EXPECT_EQ((*a3)->name, "alpha");
  auto b = auth.Authenticate("Bearer key-b");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*b, *before) << "tenants are fixed: pointers handed out before a reload stay valid";
  for (const auto& t : auth.tenants()) EXPECT_TRUE(t.api_keys.empty());
}

TEST(AuthenticatorTest, ReloadKeysRefusesOtherTenantsOrNoKeyAtAll) {
  Authenticator auth(Tenants());
  std::vector<config::TenantConfig> renamed = Tenants();
  renamed[1].name = "gamma";
  absl::Status st = auth.ReloadKeys(renamed);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(std::string(st.message()).find("needs a restart"), std::string::npos) << st;
  std::vector<config::TenantConfig> fewer = Tenants();
  fewer.pop_back();
  EXPECT_EQ(auth.ReloadKeys(fewer).code(), absl::StatusCode::kFailedPrecondition);
  std::vector<config::TenantConfig> keyless = Tenants();
  for (auto& t : keyless) t.api_keys.clear();
  st = auth.ReloadKeys(keyless);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(std::string(st.message()).find("open"), std::string::npos) << st;
  // Every refusal kept the old keys.
  EXPECT_FALSE(auth.open());
  EXPECT_TRUE(auth.Authenticate("Bearer key-a1").ok());
  EXPECT_TRUE(auth.Authenticate("Bearer key-b").ok());
}

// Readers see either the old or the new table, never a torn one (run under TSan too).
TEST(AuthenticatorTest, ReloadWhileAuthenticating) {
  Authenticator auth(Tenants());
  std::atomic<bool> stop{false};
  std::atomic<int> bad{0};
  std::thread reader([&] {
    while (!stop.load()) {
      auto t = auth.Authenticate("Bearer key-b");
      if (!t.ok() || *t == nullptr || (*t)->name != "beta") ++bad;
    }
  });
  std::vector<config::TenantConfig> tenants = Tenants();
  for (int i = 0; i < 200; ++i) {
    tenants[0].api_keys = {"key-a" + std::to_string(i)};
    ASSERT_TRUE(auth.ReloadKeys(tenants).ok());
  }
  stop = true;
  reader.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_TRUE(auth.Authenticate("Bearer key-a199").ok());
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
