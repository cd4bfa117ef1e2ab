#include "kernels/cpu/compute_pool.h"

#include <cblas.h>

#include <chrono>
#include <memory>
#include <mutex>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define KVS_CPU_RELAX() _mm_pause()
#else
#define KVS_CPU_RELAX() std::atomic_signal_fence(std::memory_order_seq_cst)
#endif

namespace kvserve::kernels::cpu {
namespace {

// How long an idle worker spins (beyond 64 pause instructions) before it sleeps. Measured on
// the 2-vCPU dev VM (docs/benchmarks.md): spinning 100 us made `--threads 2` 0.6x of one
// thread on a quiet machine (a spinning vCPU slows its sibling), sleeping at once 0.75-1.4x.
constexpr auto kSpinFor = std::chrono::microseconds(0);
// How long the caller spins on running chunks before it starts yielding its core (a worker
// that holds a chunk may be descheduled; yielding lets it run on a busy 2-core box).
constexpr int kCallerSpins = 2000;

// SplitFor's thresholds (multiply-adds): below kIfAwakeMacs a fork costs more than the job;
// below kWakeMacs (~40 us of one core) a sleeping worker would arrive after the caller is done.
constexpr int64_t kIfAwakeMacs = int64_t{1} << 18;
constexpr int64_t kWakeMacs = int64_t{1} << 21;

}  // namespace

Split SplitFor(int64_t macs) {
  return macs >= kWakeMacs ? Split::kWake : macs >= kIfAwakeMacs ? Split::kIfAwake : Split::kSerial;
}

ComputePool::ComputePool(int threads) {
  const int workers = threads > 1 ? threads - 1 : 0;
  workers_.reserve(static_cast<size_t>(workers));
  for (int i = 0; i < workers; ++i) workers_.emplace_back([this, i] { WorkerLoop(i + 1); });
}

ComputePool::~ComputePool() {
  stop_.store(true, std::memory_order_seq_cst);
  epoch_.fetch_add(1, std::memory_order_seq_cst);
  WakeSleepers();
  for (auto& w : workers_) w.join();
}

void ComputePool::WakeSleepers() {
  // Taking the mutex orders this wake after any sleeper's epoch check (no lost wake-up).
  { std::lock_guard<std::mutex> lock(sleep_mu_); }
  wake_.notify_all();
}

void ComputePool::Drain(int slot) {
  for (;;) {
    uint64_t v = work_.load(std::memory_order_acquire);
    for (;;) {
      const uint64_t next = v & 0xffffffffu;
      if (next >= (v >> 32)) return;
      if (work_.compare_exchange_weak(v, v + 1, std::memory_order_acq_rel, std::memory_order_acquire)) break;
    }
    // The claimed chunk keeps this job alive, so fn_/ctx_ are the job's own.
    fn_(ctx_, static_cast<int64_t>(v & 0xffffffffu), slot);
    done_.fetch_add(1, std::memory_order_release);
  }
}

void ComputePool::WorkerLoop(int slot) {
  // The epoch at construction, not at thread start: a worker that starts late must still
  // see the jobs (and the stop) published before it ran.
  uint32_t seen = 0;
  for (;;) {
    uint32_t e = epoch_.load(std::memory_order_acquire);
    if (e == seen) {
      const auto until = std::chrono::steady_clock::now() + kSpinFor;
      for (int i = 0; e == seen; ++i) {
        KVS_CPU_RELAX();
        e = epoch_.load(std::memory_order_acquire);
        if ((i & 63) == 63 && e == seen && std::chrono::steady_clock::now() > until) {
          // seq_cst pairs with RunImpl: either it sees the sleeper and notifies, or the wait
          // below sees the new epoch.
          std::unique_lock<std::mutex> lock(sleep_mu_);
          sleepers_.fetch_add(1, std::memory_order_seq_cst);
          while ((e = epoch_.load(std::memory_order_seq_cst)) == seen) wake_.wait(lock);
          sleepers_.fetch_sub(1, std::memory_order_seq_cst);
        }
      }
    }
    seen = e;
    if (stop_.load(std::memory_order_acquire)) return;
    Drain(slot);
  }
}

void ComputePool::RunImpl(int64_t chunks, ChunkFn fn, void* ctx, bool wake) {
  if (chunks <= 0) return;
  const bool none_awake =
      !wake && sleepers_.load(std::memory_order_seq_cst) == static_cast<int>(workers_.size());
  if (running_ || workers_.empty() || chunks == 1 || chunks > 0xffffffffLL || none_awake) {
    // A serial job is a job too: a Run from inside its chunks must also run serially (the
    // one-chunk case once let a nested Run hand chunks to workers with slots != 0).
    const bool outermost = !running_;
    if (outermost) running_ = true;
    for (int64_t c = 0; c < chunks; ++c) fn(ctx, c, 0);
    if (outermost) running_ = false;
    return;
  }
  running_ = true;
  fn_ = fn;
  ctx_ = ctx;
  done_.store(0, std::memory_order_relaxed);
  work_.store(static_cast<uint64_t>(chunks) << 32, std::memory_order_release);
  epoch_.fetch_add(1, std::memory_order_seq_cst);
  if (wake && sleepers_.load(std::memory_order_seq_cst) > 0) WakeSleepers();
  Drain(0);
  for (int i = 0; done_.load(std::memory_order_acquire) < chunks; ++i) {
    if (i < kCallerSpins) {
      KVS_CPU_RELAX();
    } else {
      std::this_thread::yield();
    }
  }
  running_ = false;
}

namespace {

struct ThreadTeam {
  int threads = 1;
  std::unique_ptr<ComputePool> pool;
};

ThreadTeam& Team() {
  // The calling thread's team, as OpenMP keeps one per thread: kernels are called deep inside
  // the forward pass, and threading a pool argument through every kernel signature would buy
  // nothing (a team is only ever driven by the thread that owns it).
  thread_local ThreadTeam team;
  return team;
}

}  // namespace

int SetComputeThreads(int threads) {
  const int n = threads > 0 ? threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  openblas_set_num_threads(1);
  ThreadTeam& team = Team();
  if (team.threads != n) {
    team.pool.reset();
    team.threads = n;
  }
  return n;
}

int ComputeThreads() { return Team().threads; }

namespace internal {

ComputePool* CurrentPool() {
  ThreadTeam& team = Team();
  if (team.threads <= 1) return nullptr;
  if (team.pool == nullptr) team.pool = std::make_unique<ComputePool>(team.threads);
  return team.pool.get();
}

}  // namespace internal
}  // namespace kvserve::kernels::cpu
