// The statistics file: round trip, refusal of corrupt or truncated files (never a crash),
// and CheckCompatible's clear errors against a model config.
#include "compression/triattention_stats.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/match.h"

#include "compression_test_util.h"

namespace kvserve::compression {
namespace {

using testing::InvFreq;
using testing::RandomStats;

TriAttentionStats Sample() {
  std::mt19937 rng(1);
  return RandomStats(3, 4, 2, 8, InvFreq(8), rng);
}

model::ModelConfig MatchingConfig() {
  model::ModelConfig c;
  c.num_layers = 3;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 8;
  return c;
}

std::string TempPath(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("kvs_stats_test_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

TEST(StatsFile, RoundTripsExactly) {
  const TriAttentionStats s = Sample();
  const std::string bytes = SerializeStats(s);
  EXPECT_EQ(bytes.size(), 60 + s.source.size() + 8 * 4 + 24 * 3 * 4 * 4 + 8);
  auto back = ParseStats(bytes, "mem");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->num_layers, 3);
  EXPECT_EQ(back->num_q_heads, 4);
  EXPECT_EQ(back->num_kv_heads, 2);
  EXPECT_EQ(back->head_dim, 8);
  EXPECT_EQ(back->num_tokens, s.num_tokens);
  EXPECT_EQ(back->source, s.source);
  EXPECT_EQ(back->inv_freq, s.inv_freq);
  ASSERT_EQ(back->entries.size(), s.entries.size());
  for (size_t i = 0; i < s.entries.size(); ++i) {
    EXPECT_EQ(back->entries[i].a_re, s.entries[i].a_re);
    EXPECT_EQ(back->entries[i].a_im, s.entries[i].a_im);
    EXPECT_EQ(back->entries[i].m, s.entries[i].m);
  }
}

TEST(StatsFile, SavesAndLoadsThroughTheFilesystem) {
  const std::string path = TempPath("ok.bin");
  ASSERT_TRUE(SaveStats(Sample(), path).ok());
  auto back = LoadStats(path);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->entries.size(), Sample().entries.size());
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  std::filesystem::remove(path);
  auto missing = LoadStats(path);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
}

TEST(StatsFile, RefusesEveryTruncation) {
  const std::string bytes = SerializeStats(Sample());
  for (size_t len = 0; len < bytes.size(); ++len) {
    auto r = ParseStats(std::string_view(bytes).substr(0, len), "cut");
    ASSERT_FALSE(r.ok()) << "accepted a file cut at " << len << " of " << bytes.size();
    EXPECT_TRUE(absl::StrContains(r.status().message(), "cut: ")) << r.status();
  }
  auto longer = ParseStats(bytes + "x", "long");
  EXPECT_FALSE(longer.ok());
  EXPECT_TRUE(absl::StrContains(longer.status().message(), "trailing")) << longer.status();
}

TEST(StatsFile, RefusesEverySingleByteCorruption) {
  const std::string bytes = SerializeStats(Sample());
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string bad = bytes;
    bad[i] = static_cast<char>(bad[i] ^ 0x5a);
    ASSERT_FALSE(ParseStats(bad, "flip").ok()) << "accepted a flipped byte at " << i;
  }
}

TEST(StatsFile, NamesTheProblem) {
  std::string bytes = SerializeStats(Sample());
  EXPECT_TRUE(absl::StrContains(ParseStats("hello world, not stats", "x").status().message(), "bad magic"));
  std::string v2 = bytes;
  v2[8] = 2;
  EXPECT_TRUE(absl::StrContains(ParseStats(v2, "x").status().message(), "unsupported stats version 2"));
  std::string flipped = bytes;
  flipped[bytes.size() - 20] ^= 1;  // payload
  EXPECT_TRUE(absl::StrContains(ParseStats(flipped, "x").status().message(), "checksum"));
  std::string huge = bytes;
  huge[12] = '\xff';
  huge[13] = '\xff';  // 65535 layers
  EXPECT_TRUE(absl::StrContains(ParseStats(huge, "x").status().message(), "implausible shape"));
}

TEST(StatsValidate, RejectsInconsistentStructs) {
  TriAttentionStats s = Sample();
  EXPECT_TRUE(ValidateStats(s).ok());
  s.entries[3].m = -1.0;
  EXPECT_FALSE(ValidateStats(s).ok());
  s = Sample();
  s.entries.pop_back();
  EXPECT_FALSE(ValidateStats(s).ok());
  s = Sample();
  s.num_q_heads = 3;
  EXPECT_FALSE(ValidateStats(s).ok());
  s = Sample();
  s.inv_freq[0] = std::nan("");
  EXPECT_FALSE(ValidateStats(s).ok());
}

TEST(CheckCompatible, AcceptsTheMatchingModel) {
  EXPECT_TRUE(CheckCompatible(Sample(), MatchingConfig(), InvFreq(8)).ok());
}

TEST(CheckCompatible, RefusesMismatchesWithClearErrors) {
  const TriAttentionStats s = Sample();
  const std::vector<float> inv = InvFreq(8);
  model::ModelConfig c = MatchingConfig();
  c.num_layers = 6;
  absl::Status st = CheckCompatible(s, c, inv);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(st.message(), "stats were calibrated for 3 layers, model has 6")) << st;

  c = MatchingConfig();
  c.num_heads = 8;
  EXPECT_TRUE(absl::StrContains(CheckCompatible(s, c, inv).message(), "4 query heads, model has 8"));
  c = MatchingConfig();
  c.num_kv_heads = 4;
  EXPECT_TRUE(absl::StrContains(CheckCompatible(s, c, inv).message(), "2 KV heads, model has 4"));
  c = MatchingConfig();
  c.head_dim = 16;
  EXPECT_TRUE(absl::StrContains(CheckCompatible(s, c, InvFreq(16)).message(), "head_dim 8, model has 16"));

  // A different rope_theta moves every frequency but the first.
  st = CheckCompatible(s, MatchingConfig(), InvFreq(8, 500000.0));
  EXPECT_TRUE(absl::StrContains(st.message(), "inv_freq[1]")) << st;
  // Within 1e-6 relative is fine, beyond it is not.
  std::vector<float> nudged = inv;
  nudged[2] *= 1.0f + 5e-7f;
  EXPECT_TRUE(CheckCompatible(s, MatchingConfig(), nudged).ok());
  nudged[2] = inv[2] * (1.0f + 1e-5f);
  EXPECT_FALSE(CheckCompatible(s, MatchingConfig(), nudged).ok());

  TriAttentionStats scaled = s;
  scaled.attention_scaling = 1.2;
  EXPECT_TRUE(absl::StrContains(CheckCompatible(scaled, MatchingConfig(), inv).message(), "attention scaling"));
}

}  // namespace
}  // namespace kvserve::compression
