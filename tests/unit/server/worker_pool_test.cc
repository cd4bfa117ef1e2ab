#include "server/http/worker_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
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

TEST(WorkerPoolTest, SaturatedOnlyWhenAtMaxThreadsAndJobsWait) {
  WorkerPool pool(2);
  EXPECT_FALSE(pool.saturated());
  Gate gate;
  std::atomic<int> done{0};
  auto job = [&] {
    gate.ArriveAndWait();
    done.fetch_add(1);
  };
  pool.Enqueue(job);
  pool.Enqueue(job);
  ASSERT_TRUE(gate.WaitArrived(2));
  // Both threads are busy but nothing waits: not saturated.
  EXPECT_FALSE(pool.saturated());
  pool.Enqueue(job);  // no thread for it, and the pool cannot grow
  EXPECT_TRUE(pool.saturated());
  gate.Open();
  pool.Shutdown();
  EXPECT_FALSE(pool.saturated());
  EXPECT_EQ(done.load(), 3);
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

// After a burst the pool shrinks back to keep_threads: idle threads beyond it exit (and are
// joined), and the pool grows again for the next burst.
TEST(WorkerPoolTest, ShrinksBackAfterABurst) {
  WorkerPool pool(64, /*keep_threads=*/2, std::chrono::milliseconds(50));
  for (int burst = 0; burst < 2; ++burst) {
    Gate gate;
    constexpr int kJobs = 12;
    for (int i = 0; i < kJobs; ++i) pool.Enqueue([&] { gate.ArriveAndWait(); });
    ASSERT_TRUE(gate.WaitArrived(kJobs));
    EXPECT_EQ(pool.threads(), kJobs);
    gate.Open();
    ASSERT_TRUE(pool.WaitUntilIdle(std::chrono::seconds(10)));
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (pool.threads() > 2 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_EQ(pool.threads(), 2) << "burst " << burst;
  }
  std::atomic<int> ran{0};
  pool.Enqueue([&] { ran.fetch_add(1); });  // also joins the exited threads
  ASSERT_TRUE(pool.WaitUntilIdle(std::chrono::seconds(10)));
  EXPECT_EQ(ran.load(), 1);
  pool.Shutdown();
  EXPECT_EQ(pool.threads(), 0);
}

}  // namespace
}  // namespace kvserve::server
