// base/fatal.h: an exception that escapes a thread (out of memory mid-serving) ends the
// process with one clear line and exit code 3, not SIGABRT and libstdc++'s message.
#include "base/fatal.h"

#include <new>
#include <stdexcept>
#include <thread>

#include <gtest/gtest.h>

namespace kvserve::base {
namespace {

TEST(FatalDeathTest, BadAllocEscapingAThreadExitsWithAClearMessage) {
  EXPECT_EXIT(
      {
        InstallFatalHandlers();
        std::thread([] { throw std::bad_alloc(); }).join();
      },
      ::testing::ExitedWithCode(kExitFatal), "kvserve: fatal: out of memory");
}

TEST(FatalDeathTest, OtherExceptionsNameTheirMessage) {
  EXPECT_EXIT(
      {
        InstallFatalHandlers();
        std::thread([] { throw std::runtime_error("weights went missing"); }).join();
      },
      ::testing::ExitedWithCode(kExitFatal), "kvserve: fatal: uncaught exception: weights went missing");
}

}  // namespace
}  // namespace kvserve::base
