#include "server/worker_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>

namespace kvserve::server {
namespace {

// A latch the jobs block on, so that "all N jobs run at once" is observable without sleeps.
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  int arrived = 0;
  bool open = false;

  void ArriveAndWait() {
    std::unique_lock<std::mutex> lock(mu);
    ++arrived;
    cv.notify_all();
    cv.wait(lock, [&] { return open; });
  }
  bool WaitArrived(int n) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, std::chrono::seconds(10), [&] { return arrived >= n; });
  }
  void Open() {
    std::lock_guard<std::mutex> lock(mu);
    open = true;
    cv.notify_all();
  }
};

TEST(WorkerPoolTest, GrowsSoThatBlockingJobsRunConcurrently) {
  WorkerPool pool(300);
  Gate gate;
  constexpr int kJobs = 256;
  for (int i = 0; i < kJobs; ++i) pool.Enqueue([&] { gate.ArriveAndWait(); });
  // Every job is running at the same time: none waits behind another.
  EXPECT_TRUE(gate.WaitArrived(kJobs));
  EXPECT_EQ(pool.threads(), kJobs);
  gate.Open();
  pool.Shutdown();
}

TEST(WorkerPoolTest, NeverExceedsMaxThreadsAndRunsQueuedJobs) {
  WorkerPool pool(2);
  Gate gate;
  std::atomic<int> done{0};
  for (int i = 0; i < 5; ++i) {
    pool.Enqueue([&] {
      gate.ArriveAndWait();
      done.fetch_add(1);
    });
  }
  EXPECT_TRUE(gate.WaitArrived(2));
  EXPECT_EQ(pool.threads(), 2);
  gate.Open();
  pool.Shutdown();  // runs what was queued before joining
  EXPECT_EQ(done.load(), 5);
}

TEST(WorkerPoolTest, ReusesIdleThreads) {
  WorkerPool pool(8);
  std::atomic<int> ran{0};
  for (int round = 0; round < 20; ++round) {
    pool.Enqueue([&] { ran.fetch_add(1); });
    ASSERT_TRUE(pool.WaitUntilIdle(std::chrono::seconds(10)));
  }
  EXPECT_EQ(ran.load(), 20);
  EXPECT_EQ(pool.threads(), 1);
}

}  // namespace
}  // namespace kvserve::server
