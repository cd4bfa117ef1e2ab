#include "engine/request_speculation.h"

#include <gtest/gtest.h>

namespace kvserve::engine {
namespace {

TEST(RequestSpeculation, RequestFieldsOverrideTheServerDefault) {
  config::SpeculativeConfig server;
  server.method = config::SpeculativeMethod::kNgram;
  server.num_tokens = 4;
  server.ngram_min = 2;
  server.ngram_max = 4;
  SpeculativeRequest none;
  speculative::SpecParams p = ResolveSpeculative(server, none);
  EXPECT_TRUE(p.enabled());
  EXPECT_EQ(p.num_tokens, 4);
  SpeculativeRequest off;
  off.method = config::SpeculativeMethod::kNone;
  EXPECT_FALSE(ResolveSpeculative(server, off).enabled());
  // One n-gram bound past the server's other: the given one wins, the other follows.
  SpeculativeRequest wide;
  wide.ngram_min = 6;
  p = ResolveSpeculative(server, wide);
  EXPECT_EQ(p.ngram_min, 6);
  EXPECT_EQ(p.ngram_max, 6);
  SpeculativeRequest narrow;
  narrow.ngram_max = 1;
  p = ResolveSpeculative(server, narrow);
  EXPECT_EQ(p.ngram_min, 1);
  EXPECT_EQ(p.ngram_max, 1);
}

TEST(RequestSpeculation, MethodDraftNeedsALoadedDraftModel) {
  SpeculativeRequest r;
  r.method = config::SpeculativeMethod::kDraft;
  const absl::Status refused = ValidateSpeculative(r, /*draft_model_loaded=*/false);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("speculative.method"), std::string::npos) << refused;
  EXPECT_NE(refused.message().find("none loaded"), std::string::npos) << refused;
  EXPECT_TRUE(ValidateSpeculative(r, /*draft_model_loaded=*/true).ok());
  r.method = config::SpeculativeMethod::kNgram;
  EXPECT_TRUE(ValidateSpeculative(r, /*draft_model_loaded=*/false).ok());
}

TEST(RequestSpeculation, OutOfRangeValuesNameTheField) {
  SpeculativeRequest r;
  r.num_tokens = kMaxDraftTokens + 1;
  EXPECT_NE(ValidateSpeculative(r).message().find("speculative.num_tokens"), std::string::npos);
  r = {};
  r.ngram_min = 3;
  r.ngram_max = 2;
  EXPECT_NE(ValidateSpeculative(r).message().find("speculative.ngram_min"), std::string::npos);
  r = {};
  r.ngram_max = 0;
  EXPECT_FALSE(ValidateSpeculative(r).ok());
  r = {};
  r.method = config::SpeculativeMethod::kNgram;
  r.num_tokens = 8;
  EXPECT_TRUE(ValidateSpeculative(r).ok());
}

}  // namespace
}  // namespace kvserve::engine
