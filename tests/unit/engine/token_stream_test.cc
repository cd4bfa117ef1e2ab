#include "engine/token_stream.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

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

TEST(TokenStream, QuietPushesWakeOnceAtNotify) {
  TokenStream s;
  int notified = 0;
  s.set_listener([&] { ++notified; });
  bool owed = false;
  EXPECT_TRUE(s.push_quiet(Ev(1), &owed));
  EXPECT_TRUE(owed);  // the first change owes a wake-up ...
  EXPECT_TRUE(s.push_quiet(Ev(2), &owed));
  EXPECT_FALSE(owed);  // ... later ones in the same batch do not
  EXPECT_FALSE(s.close_quiet());
  EXPECT_EQ(notified, 0);
  // Quiet events are visible at once; only the wake-up waits.
  std::vector<TokenEvent> got;
  EXPECT_EQ(s.pop_all(got), 2u);
  s.notify();
  EXPECT_EQ(notified, 1);
  s.notify();  // nothing new: no wake-up
  EXPECT_EQ(notified, 1);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].token_ids[0], 1);
  EXPECT_EQ(got[1].token_ids[0], 2);
  EXPECT_TRUE(s.done());
  EXPECT_FALSE(s.push_quiet(Ev(3), &owed));  // closed: dropped, nothing owed
  EXPECT_FALSE(owed);
  EXPECT_FALSE(s.close_quiet());
}

TEST(TokenStream, CloseQuietOwesAWakeUp) {
  TokenStream s;
  int notified = 0;
  s.set_listener([&] { ++notified; });
  EXPECT_TRUE(s.close_quiet());
  EXPECT_EQ(notified, 0);
  s.notify();
  EXPECT_EQ(notified, 1);
  EXPECT_TRUE(s.done());
}

TEST(TokenStream, ImmediatePushSettlesAnOwedWakeUp) {
  TokenStream s;
  int notified = 0;
  s.set_listener([&] { ++notified; });
  bool owed = false;
  s.push_quiet(Ev(1), &owed);
  s.push(Ev(2));  // wakes for both
  EXPECT_EQ(notified, 1);
  s.notify();
  EXPECT_EQ(notified, 1);
}

TEST(TokenStream, PopAllAppendsInOrderAfterSinglePops) {
  TokenStream s;
  for (int i = 0; i < 5; ++i) s.push(Ev(i));
  EXPECT_EQ(s.try_pop()->token_ids[0], 0);
  std::vector<TokenEvent> got;
  got.push_back(Ev(-1));  // appended after what the caller holds
  EXPECT_EQ(s.pop_all(got), 4u);
  ASSERT_EQ(got.size(), 5u);
  const int want[] = {-1, 1, 2, 3, 4};
  for (int i = 0; i < 5; ++i) EXPECT_EQ(got[i].token_ids[0], want[i]) << i;
  EXPECT_EQ(s.pop_all(got), 0u);
  EXPECT_FALSE(s.try_pop().has_value());
  s.push(Ev(7));  // storage reused after a full drain
  EXPECT_EQ(s.try_pop()->token_ids[0], 7);
}

TEST(TokenStream, BatchedProducerAndPopAllConsumerSeeEverythingInOrder) {
  TokenStream s;
  std::atomic<int> notified{0};
  s.set_listener([&] { notified.fetch_add(1); });
  constexpr int kSteps = 2000, kPerStep = 3;
  std::thread producer([&] {
    for (int step = 0; step < kSteps; ++step) {
      bool owed = false;
      for (int k = 0; k < kPerStep; ++k) s.push_quiet(Ev(step * kPerStep + k), &owed);
      s.notify();
    }
    s.close_quiet();
    s.notify();
  });
  int expected = 0;
  std::vector<TokenEvent> got;
  while (!s.done()) {
    if (s.pop_all(got) == 0) {
      if (auto e = s.pop_wait(std::chrono::milliseconds(50))) got.push_back(std::move(*e));
    }
    for (const TokenEvent& e : got) {
      ASSERT_EQ(e.token_ids[0], expected);
      ++expected;
    }
    got.clear();
  }
  producer.join();
  EXPECT_EQ(expected, kSteps * kPerStep);
  EXPECT_EQ(notified.load(), kSteps + 1);  // one per batch and the close, never per event
}

}  // namespace
}  // namespace kvserve::engine
