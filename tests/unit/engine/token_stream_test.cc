#include "engine/token_stream.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

namespace kvserve::engine {
namespace {

TokenEvent Ev(int32_t id) {
  TokenEvent e;
  e.token_ids = {id};
  return e;
}

TEST(TokenStream, DeliversInOrderThenCloses) {
  TokenStream s;
  EXPECT_TRUE(s.push(Ev(1)));
  EXPECT_TRUE(s.push(Ev(2)));
  s.close();
  EXPECT_FALSE(s.push(Ev(3)));  // closed streams drop events
  EXPECT_FALSE(s.done());       // still has events
  EXPECT_EQ(s.try_pop()->token_ids[0], 1);
  EXPECT_EQ(s.pop_wait(std::chrono::milliseconds(1))->token_ids[0], 2);
  EXPECT_TRUE(s.done());
  EXPECT_FALSE(s.pop_wait(std::chrono::milliseconds(1)).has_value());
}

TEST(TokenStream, PopWaitTimesOutWithoutEvents) {
  TokenStream s;
  EXPECT_FALSE(s.pop_wait(std::chrono::milliseconds(5)).has_value());
  EXPECT_FALSE(s.done());
}

TEST(TokenStream, ProducerNeverBlocksAndConsumerSeesAll) {
  TokenStream s;
  std::atomic<int> notified{0};
  s.set_listener([&] { notified.fetch_add(1); });
  constexpr int kN = 20000;
  std::thread producer([&] {
    for (int i = 0; i < kN; ++i) s.push(Ev(i));
    s.close();
  });
  int expected = 0;
  while (!s.done()) {
    if (auto e = s.pop_wait(std::chrono::milliseconds(50))) {
      ASSERT_EQ(e->token_ids[0], expected);
      ++expected;
    }
  }
  producer.join();
  EXPECT_EQ(expected, kN);
  EXPECT_EQ(notified.load(), kN + 1);  // every push and the close
}

}  // namespace
}  // namespace kvserve::engine
