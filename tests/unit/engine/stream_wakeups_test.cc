#include "engine/stream_wakeups.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

namespace kvserve::engine {
namespace {

TokenEvent Ev(int32_t id) {
  TokenEvent e;
  e.token_ids = {id};
  return e;
}

struct Counted {
  std::shared_ptr<TokenStream> stream = std::make_shared<TokenStream>();
  std::shared_ptr<int> wakes = std::make_shared<int>(0);
  Counted() {
    stream->set_listener([w = wakes] { ++*w; });
  }
};

TEST(StreamWakeups, EachStreamWakesOncePerFlushWhateverItReceived) {
  StreamWakeups wakeups;
  Counted a, b, idle;
  EXPECT_TRUE(wakeups.Push(a.stream, Ev(1)));
  EXPECT_TRUE(wakeups.Push(b.stream, Ev(10)));
  EXPECT_TRUE(wakeups.Push(a.stream, Ev(2)));  // a second sample's token, say
  TokenEvent last = Ev(3);
  last.finish = FinishReason::kLength;
  EXPECT_TRUE(wakeups.Push(a.stream, std::move(last)));
  wakeups.Close(a.stream);
  EXPECT_EQ(wakeups.owed(), 2u);  // a and b, once each
  EXPECT_EQ(*a.wakes, 0);         // nobody is woken while the batch is being built
  EXPECT_EQ(*b.wakes, 0);
  wakeups.Flush();
  EXPECT_EQ(*a.wakes, 1);
  EXPECT_EQ(*b.wakes, 1);
  EXPECT_EQ(*idle.wakes, 0);
  EXPECT_EQ(wakeups.owed(), 0u);
  wakeups.Flush();  // nothing owed: nothing happens
  EXPECT_EQ(*a.wakes, 1);

  // The consumer sees every event, in order, then the end.
  std::vector<TokenEvent> got;
  ASSERT_EQ(a.stream->pop_all(got), 3u);
  EXPECT_EQ(got[0].token_ids[0], 1);
  EXPECT_EQ(got[1].token_ids[0], 2);
  EXPECT_EQ(got[2].token_ids[0], 3);
  EXPECT_TRUE(a.stream->done());
  EXPECT_FALSE(b.stream->done());
}

TEST(StreamWakeups, ClosedStreamsDropEventsAndOweNothing) {
  StreamWakeups wakeups;
  Counted a;
  a.stream->close();  // closed directly (woken once there)
  EXPECT_EQ(*a.wakes, 1);
  EXPECT_FALSE(wakeups.Push(a.stream, Ev(1)));
  wakeups.Close(a.stream);
  EXPECT_EQ(wakeups.owed(), 0u);
  wakeups.Flush();
  EXPECT_EQ(*a.wakes, 1);
}

TEST(StreamWakeups, KeepsAStreamTheEngineForgotUntilItsWakeUp) {
  StreamWakeups wakeups;
  auto wakes = std::make_shared<int>(0);
  std::weak_ptr<TokenStream> weak;
  {
    auto stream = std::make_shared<TokenStream>();
    stream->set_listener([wakes] { ++*wakes; });
    weak = stream;
    wakeups.Push(stream, Ev(1));
    wakeups.Close(stream);
  }  // the engine dropped its reference (the request was forgotten)
  ASSERT_FALSE(weak.expired());
  wakeups.Flush();
  EXPECT_EQ(*wakes, 1);
  EXPECT_TRUE(weak.expired());  // released by the flush
}

TEST(StreamWakeups, ABatchPerStepAcrossManySteps) {
  StreamWakeups wakeups;
  std::vector<Counted> streams(8);
  for (int step = 0; step < 50; ++step) {
    for (auto& s : streams) wakeups.Push(s.stream, Ev(step));
    wakeups.Flush();
  }
  for (auto& s : streams) {
    EXPECT_EQ(*s.wakes, 50);
    std::vector<TokenEvent> got;
    EXPECT_EQ(s.stream->pop_all(got), 50u);
  }
}

}  // namespace
}  // namespace kvserve::engine
