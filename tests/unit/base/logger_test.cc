#include "base/logger.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace kvserve::base {
namespace {

using ::testing::HasSubstr;

TEST(Logger, TextLinesCarryLevelComponentAndRequest) {
  auto sinks = LogSinks::Memory(LogLevel::kInfo, LogFormat::kText);
  Logger log(sinks, "engine");
  log.info("started %d threads", 4);
  log.req_warn("req-7", "slow step %s", "x");
  log.debug("hidden");
  std::string out = sinks->memory_contents();
  EXPECT_THAT(out, HasSubstr("INFO  engine    started 4 threads"));
  EXPECT_THAT(out, HasSubstr("WARN  engine    req=req-7 slow step x"));
  EXPECT_THAT(out, ::testing::Not(HasSubstr("hidden")));
}

TEST(Logger, JsonLinesAreEscaped) {
  auto sinks = LogSinks::Memory(LogLevel::kDebug, LogFormat::kJson);
  Logger log(sinks, "server");
  log.req_info("r1", "quote \" and\nnewline");
  std::string out = sinks->memory_contents();
  EXPECT_THAT(out, HasSubstr(R"("level":"info","component":"server","req":"r1","msg":"quote \" and\nnewline")"));
}

TEST(Logger, NullLoggerDiscards) {
  Logger log;
  EXPECT_FALSE(log.enabled(LogLevel::kError));
  log.error("nothing %d", 1);  // must not crash
}

}  // namespace
}  // namespace kvserve::base
