// Resolution of a request's KV compression settings (request > tenant > server) and the
// per-request accounting behind usage.kv_compression.
#include "engine/request_compression.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace kvserve::engine {
namespace {

using config::CompressionPolicyKind;
using ::testing::HasSubstr;

class ResolveCompressionTest : public ::testing::Test {
 protected:
  ResolveCompressionTest() {
    stats_marker_ = reinterpret_cast<const compression::TriAttentionStats*>(&stats_storage_);
    context_.triattention_stats = stats_marker_;  // only its presence is checked here
  }
  RequestSpec Spec(int prompt, int max_tokens) const {
    RequestSpec s;
    s.request_id = "r";
    s.prompt_tokens.assign(static_cast<size_t>(prompt), 7);
    s.max_tokens = max_tokens;
    return s;
  }
  config::Config cfg_;
  compression::PolicyContext context_;
  int stats_storage_ = 0;
  const compression::TriAttentionStats* stats_marker_ = nullptr;
};

// A request may name the pool's precision (per side or both); anything else is a 400 naming
// the field, and a tenant's allowed_kv_dtypes limits what it may name.
TEST_F(ResolveCompressionTest, KvPrecisionMustBeThePoolsAndTheTenantsAllowed) {
  cfg_.cache.kv_dtype = config::KvDtype::kBf16;
  cfg_.cache.v_dtype = config::KvDtype::kInt4;
  RequestSpec s = Spec(10, 100);
  s.compression.k_dtype = config::KvDtype::kBf16;
  s.compression.v_dtype = config::KvDtype::kInt4;
  EXPECT_TRUE(ResolveCompression(s, cfg_, nullptr, &context_).ok());
  s.compression.v_dtype.reset();  // one side only
  EXPECT_TRUE(ResolveCompression(s, cfg_, nullptr, &context_).ok());

  s.compression.k_dtype = config::KvDtype::kInt8;
  auto r = ResolveCompression(s, cfg_, nullptr, &context_);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("kv_compression.k_dtype=int8: this server's KV pool stores keys as bf16 (cache.k_dtype)"));
  s.compression.k_dtype.reset();
  s.compression.v_dtype = config::KvDtype::kBf16;
  r = ResolveCompression(s, cfg_, nullptr, &context_);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("kv_compression.v_dtype=bf16"));

  config::TenantConfig t;
  t.name = "t";
  t.allowed_kv_dtypes = {config::KvDtype::kBf16};
  s.compression.v_dtype = config::KvDtype::kInt4;
  r = ResolveCompression(s, cfg_, &t, &context_);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("kv_compression.v_dtype: tenant 't' may not use KV precision 'int4'"));
  s.compression.v_dtype.reset();
  EXPECT_TRUE(ResolveCompression(s, cfg_, &t, &context_).ok()) << "asking for nothing is always allowed";
}

// kv_compression.demote maps each dtype to the server's tier of that dtype; a tier the server
// lacks, a repeat, a negative count, a policy that does not rank and a tenant's precision
// limit are refused naming the field.
TEST_F(ResolveCompressionTest, DemoteMapsToTheServersTiers) {
  cfg_.cache.demote_kv_bytes = 1 << 20;
  cfg_.cache.demote_dtypes = {config::KvDtype::kInt8, config::KvDtype::kInt4};
  RequestSpec s = Spec(10, 100);
  s.compression.policy = CompressionPolicyKind::kTriAttention;
  s.compression.budget = 64;
  s.compression.demote = {{config::KvDtype::kInt4, 256}, {config::KvDtype::kInt8, 128}};
  auto r = ResolveCompression(s, cfg_, nullptr, &context_);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->params.demote_tokens[0], 128);
  EXPECT_EQ(r->params.demote_tokens[1], 256);
  EXPECT_TRUE(r->params.demotes());
  // Asking for nothing leaves every tier unused.
  RequestSpec plain = s;
  plain.compression.demote.clear();
  r = ResolveCompression(plain, cfg_, nullptr, &context_);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->params.demotes());

  auto error = [&](const RequestSpec& spec, const config::TenantConfig* t = nullptr) {
    auto e = ResolveCompression(spec, cfg_, t, &context_);
    return e.ok() ? std::string("ok") : std::string(e.status().message());
  };
  RequestSpec bad = s;
  bad.compression.demote = {{config::KvDtype::kFp8E4M3, 64}};
  EXPECT_THAT(error(bad), HasSubstr("kv_compression.demote.fp8_e4m3: this server has no fp8_e4m3 demotion tier"));
  bad.compression.demote = {{config::KvDtype::kInt8, 64}, {config::KvDtype::kInt8, 32}};
  EXPECT_THAT(error(bad), HasSubstr("kv_compression.demote.int8: given twice"));
  bad.compression.demote = {{config::KvDtype::kInt4, -5}};
  EXPECT_THAT(error(bad), HasSubstr("kv_compression.demote.int4: must be >= 0"));
  bad = s;
  bad.compression.policy = CompressionPolicyKind::kStreamingLlm;
  EXPECT_THAT(error(bad), HasSubstr("kv_compression.demote: needs policy triattention"));
  bad.compression.policy = CompressionPolicyKind::kFull;
  EXPECT_THAT(error(bad), HasSubstr("kv_compression.demote: needs a compressing policy"));
  config::TenantConfig t;
  t.name = "t";
  t.allowed_kv_dtypes = {config::KvDtype::kFp32, config::KvDtype::kInt8};
  EXPECT_THAT(error(s, &t), HasSubstr("kv_compression.demote.int4: tenant 't' may not use KV precision 'int4'"));
  EXPECT_EQ(ResolveCompression(s, cfg_, &t, &context_).status().code(), absl::StatusCode::kPermissionDenied);
  // A server without tiers refuses any schedule.
  cfg_.cache.demote_kv_bytes = 0;
  EXPECT_THAT(error(s), HasSubstr("cache.demote_kv_bytes=0: demotion is off"));
}

// kv_compression.demote.lowrank maps to the low-rank key tier, the last one (after the dtype
// tiers); a server without it, a negative count and a tenant without the tier's dtypes are
// refused naming the field.
TEST_F(ResolveCompressionTest, DemoteLowRankMapsToTheLastTier) {
  cfg_.cache.demote_kv_bytes = 1 << 20;
  cfg_.cache.demote_dtypes = {config::KvDtype::kInt8};
  cfg_.cache.lowrank_key_rank = 16;
  cfg_.cache.lowrank_k_dtype = config::KvDtype::kBf16;
  cfg_.cache.lowrank_v_dtype = config::KvDtype::kInt4;
  RequestSpec s = Spec(10, 100);
  s.compression.policy = CompressionPolicyKind::kTriAttention;
  s.compression.budget = 64;
  s.compression.demote = {{config::KvDtype::kInt8, 32}};
  s.compression.demote_lowrank = 512;
  auto r = ResolveCompression(s, cfg_, nullptr, &context_);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->params.demote_tokens[0], 32);
  EXPECT_EQ(r->params.demote_tokens[1], 512);
  EXPECT_EQ(r->params.demote_tokens[2], 0);

  auto error = [&](const RequestSpec& spec, const config::TenantConfig* t = nullptr) {
    auto e = ResolveCompression(spec, cfg_, t, &context_);
    return e.ok() ? std::string("ok") : std::string(e.status().message());
  };
  RequestSpec bad = s;
  bad.compression.demote_lowrank = -1;
  EXPECT_THAT(error(bad), HasSubstr("kv_compression.demote.lowrank: must be >= 0"));
  bad = s;
  bad.compression.policy = CompressionPolicyKind::kFull;
  bad.compression.demote.clear();
  EXPECT_THAT(error(bad), HasSubstr("kv_compression.demote: needs a compressing policy"));
  config::TenantConfig t;
  t.name = "t";
  t.allowed_kv_dtypes = {config::KvDtype::kFp32, config::KvDtype::kInt8, config::KvDtype::kBf16};
  EXPECT_THAT(error(s, &t), HasSubstr("kv_compression.demote.lowrank: tenant 't' may not use KV precision 'int4'"));
  t.allowed_kv_dtypes.push_back(config::KvDtype::kInt4);
  EXPECT_EQ(error(s, &t), "ok");
  cfg_.cache.lowrank_key_rank = 0;
  EXPECT_THAT(error(s), HasSubstr("kv_compression.demote.lowrank: this server has no low-rank key tier"));
}

TEST_F(ResolveCompressionTest, RequestThenTenantThenServer) {
  cfg_.compression.default_policy = CompressionPolicyKind::kStreamingLlm;
  auto r = ResolveCompression(Spec(10, 100), cfg_, nullptr, &context_);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->params.kind, CompressionPolicyKind::kStreamingLlm);

  config::TenantConfig t;
  t.name = "t";
  // A tenant that names no default_policy inherits the server's.
  r = ResolveCompression(Spec(10, 100), cfg_, &t, &context_);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->params.kind, CompressionPolicyKind::kStreamingLlm);

  t.default_policy = CompressionPolicyKind::kH2O;
  t.has_default_policy = true;
  r = ResolveCompression(Spec(10, 100), cfg_, &t, &context_);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->params.kind, CompressionPolicyKind::kH2O);

  RequestSpec s = Spec(10, 100);
  s.compression.policy = CompressionPolicyKind::kFull;
  r = ResolveCompression(s, cfg_, &t, &context_);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->compressing());
  EXPECT_EQ(r->footprint(10, 100), 110);
  EXPECT_EQ(r->reported_budget(), 0);
}

// Budget, window and K/V precision each resolve request > tenant > server.
TEST_F(ResolveCompressionTest, TenantDefaultsForBudgetWindowAndPrecision) {
  cfg_.compression.default_policy = CompressionPolicyKind::kStreamingLlm;
  cfg_.compression.budget = 300;
  cfg_.compression.window = 40;
  config::TenantConfig t;
  t.name = "t";
  // Server level: a tenant that sets nothing, and no tenant at all.
  const config::TenantConfig* const levels[] = {nullptr, &t};
  for (const config::TenantConfig* tenant : levels) {
    auto r = ResolveCompression(Spec(10, 100), cfg_, tenant, &context_);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->params.budget, 300);
    EXPECT_EQ(r->params.window, 40);
    EXPECT_EQ(r->k_dtype, config::KvDtype::kFp32);
    EXPECT_EQ(r->v_dtype, config::KvDtype::kFp32);
  }
  // Tenant level.
  t.budget = 200;
  t.window = 20;
  auto r = ResolveCompression(Spec(10, 100), cfg_, &t, &context_);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->params.budget, 200);
  EXPECT_EQ(r->params.window, 20);
  EXPECT_EQ(r->reported_budget(), 200);
  // Request level.
  RequestSpec s = Spec(10, 100);
  s.compression.budget = 100;
  s.compression.window = 10;
  r = ResolveCompression(s, cfg_, &t, &context_);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->params.budget, 100);
  EXPECT_EQ(r->params.window, 10);

  // Precision: the pool holds one (int8 here), so which level decided shows in whose setting
  // is checked. A tenant default the pool lacks fails naming the tenant's setting...
  cfg_.cache.kv_dtype = config::KvDtype::kInt8;
  t.k_dtype = config::KvDtype::kFp16;
  r = ResolveCompression(Spec(10, 100), cfg_, &t, &context_);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("tenant 't' default k_dtype=fp16"));
  // ...a request that names the pool's precision overrides it...
  s = Spec(10, 100);
  s.compression.k_dtype = config::KvDtype::kInt8;
  r = ResolveCompression(s, cfg_, &t, &context_);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->k_dtype, config::KvDtype::kInt8);
  // ...and a tenant default that is the pool's resolves to it.
  t.k_dtype = config::KvDtype::kInt8;
  t.v_dtype = config::KvDtype::kInt8;
  r = ResolveCompression(Spec(10, 100), cfg_, &t, &context_);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->k_dtype, config::KvDtype::kInt8);
  EXPECT_EQ(r->v_dtype, config::KvDtype::kInt8);
}

TEST_F(ResolveCompressionTest, OverridesRatioAndFootprint) {
  RequestSpec s = Spec(20, 380);
  s.compression.policy = CompressionPolicyKind::kTriAttention;
  s.compression.ratio = 0.25;  // of 400 tokens
  s.compression.divide_length = 16;
  cfg_.compression.max_prefill_chunk = 64;
  auto r = ResolveCompression(s, cfg_, nullptr, &context_);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->params.budget, 100);
  EXPECT_EQ(r->params.divide_length, 16);
  EXPECT_EQ(r->params.prompt_len, 20);
  EXPECT_EQ(r->max_chunk, 64);
  EXPECT_EQ(r->footprint(20, 380), 100 + 16 + 64);
  EXPECT_EQ(r->reported_budget(), 100);
  // snapkv holds its prompt before the first round.
  s.compression.policy = CompressionPolicyKind::kSnapKv;
  s.compression.protect_prompt = false;
  s.prompt_tokens.assign(300, 7);
  r = ResolveCompression(s, cfg_, nullptr, &context_);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->footprint(300, 380), 300 + 64);
}

TEST_F(ResolveCompressionTest, ErrorsNameTheField) {
  RequestSpec s = Spec(100, 10);
  s.compression.policy = CompressionPolicyKind::kTriAttention;
  s.compression.budget = 50;
  auto r = ResolveCompression(s, cfg_, nullptr, &context_);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("kv_compression.budget"));

  s.compression.ratio = 0.5;
  r = ResolveCompression(s, cfg_, nullptr, &context_);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("either budget or ratio"));

  s.compression.ratio.reset();
  s.compression.budget = 200;
  s.compression.protect_prompt = false;
  s.n = 3;
  r = ResolveCompression(s, cfg_, nullptr, &context_);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("kv_compression.protect_prompt"));

  s.n = 1;
  config::TenantConfig t;
  t.name = "locked";
  t.allowed_policies = {CompressionPolicyKind::kFull, CompressionPolicyKind::kStreamingLlm};
  r = ResolveCompression(s, cfg_, &t, &context_);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("tenant 'locked' may not use policy 'triattention'"));

  r = ResolveCompression(s, cfg_, nullptr, nullptr);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  compression::PolicyContext no_stats;
  r = ResolveCompression(s, cfg_, nullptr, &no_stats);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("kvserve calibrate"));
  s.compression.policy = CompressionPolicyKind::kH2O;  // needs no statistics
  EXPECT_TRUE(ResolveCompression(s, cfg_, nullptr, &no_stats).ok());
}

TEST_F(ResolveCompressionTest, AutoRunsTriAttentionOrFallsBackToFull) {
  RequestSpec s = Spec(10, 100);
  s.compression.policy = CompressionPolicyKind::kAuto;
  s.compression.budget = 64;
  auto r = ResolveCompression(s, cfg_, nullptr, &context_);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->auto_mode);
  EXPECT_EQ(r->params.kind, CompressionPolicyKind::kTriAttention);
  EXPECT_EQ(r->requested, CompressionPolicyKind::kAuto);
  EXPECT_EQ(r->footprint(10, 100), 110) << "auto may run uncompressed: admission counts it whole";
  // A protected prompt longer than the budget cannot be compressed: run as full.
  s.prompt_tokens.assign(80, 7);
  r = ResolveCompression(s, cfg_, nullptr, &context_);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->compressing());
  EXPECT_FALSE(r->auto_mode);
  EXPECT_EQ(r->requested, CompressionPolicyKind::kAuto);
}

TEST(HashTokenIds, IsFnv1a64OverLittleEndianIds) {
  EXPECT_EQ(HashTokenIds({}), 0xcbf29ce484222325ULL);
  // FNV-1a 64 of the bytes 01 00 00 00 02 00 00 00, computed by hand from the definition.
  uint64_t h = 0xcbf29ce484222325ULL;
  for (uint8_t b : {1, 0, 0, 0, 2, 0, 0, 0}) {
    h ^= b;
    h *= 0x100000001b3ULL;
  }
  const std::vector<int32_t> ids{1, 2};
  EXPECT_EQ(HashTokenIds(ids), h);
  const std::vector<int32_t> swapped{2, 1};
  EXPECT_NE(HashTokenIds(swapped), h);
}

TEST(CompressionAccount, SummarisesRoundsPeakAndAudit) {
  ResolvedCompression rc;
  rc.requested = CompressionPolicyKind::kTriAttention;
  rc.params.kind = CompressionPolicyKind::kTriAttention;
  rc.params.budget = 4;
  rc.audit = true;
  CompressionAccount acc(rc);
  const std::vector<int32_t> tokens{10, 11, 12, 13, 14, 15, 16, 17};
  acc.OnScheduled(6, 6);
  scheduler::Compaction c;
  c.next_position = 6;
  c.evicted_positions = {1, 3};
  c.evicted_prompt_tokens = 1;
  acc.OnRound(c, tokens);
  acc.OnScheduled(5, 7);
  const CompressionSummary s = acc.Summary();
  EXPECT_EQ(s.policy, "triattention");
  EXPECT_EQ(s.budget, 4);
  EXPECT_EQ(s.rounds, 1);
  EXPECT_EQ(s.evicted_tokens, 2);
  EXPECT_EQ(s.evicted_prompt_tokens, 1);
  EXPECT_EQ(s.peak_kv_tokens, 6);
  EXPECT_DOUBLE_EQ(s.compression_ratio, 7.0 / 6.0);
  ASSERT_EQ(s.audit.size(), 1u);
  EXPECT_EQ(s.audit[0].at_token, 6);
  EXPECT_EQ(s.audit[0].token_ids_hash, HashTokenIds(std::vector<int32_t>{11, 13}));
}

}  // namespace
}  // namespace kvserve::engine
