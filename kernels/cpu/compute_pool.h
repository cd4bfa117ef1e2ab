// The CPU kernels' thread team: a fixed set of workers that claim chunks of a loop from a
// shared counter, with the calling thread taking part. Replaces OpenMP parallel regions.
//
// Why not OpenMP: an OpenMP `parallel for schedule(static)` hands each thread a fixed share
// and ends in a barrier, so on a busy machine the caller waits for a worker the kernel has
// descheduled (docs/benchmarks.md measured 57 ms instead of 0.3 ms per decode step with
// `--threads 2` on a loaded 2-core box). Here nothing is handed out in advance:
//
//   work_ = [chunks | next]      Run(): publish fn, store work_ = [chunks | 0], bump epoch_
//   caller + each awake worker:  CAS next -> next + 1 while next < chunks, run that chunk
//   caller:                      after the counter runs dry, wait until done_ == chunks
//
// A worker that has not woken up yet claims nothing, so the caller only ever waits for
// chunks that are already running (chunks are small). Workers spin only briefly after each
// job (64 pauses; see kSpinFor), then sleep on a condition variable, so an idle model costs
// no CPU and a waiting worker does not slow the caller's core. (Not std::atomic::wait: libstdc++ 12 lost
// wake-ups in our test.)
//
// Invariants: which thread runs a chunk never changes what the chunk computes (callers cut
// work into chunks that do not depend on the team size), so results are identical for any
// thread count. `slot` (0 = the caller, 1..size()-1 = workers) indexes per-thread scratch.
// A pool is driven by one thread at a time; a Run issued from inside a chunk runs serially.
#pragma once

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <cstdint>
#include <thread>
#include <utility>
#include <vector>

namespace kvserve::kernels::cpu {

class ComputePool {
 public:
  // threads >= 1: the caller plus threads - 1 workers.
  explicit ComputePool(int threads);
  ~ComputePool();
  ComputePool(const ComputePool&) = delete;
  ComputePool& operator=(const ComputePool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(chunk, slot) once for every chunk in [0, chunks); returns when all are done.
  // wake = false: sleeping workers are not woken (only workers still spinning after the last
  // job join, and with none the caller runs the job alone), for jobs shorter than a wake-up.
  template <typename Fn>
  void Run(int64_t chunks, Fn&& fn, bool wake = true) {
    RunImpl(chunks, &Trampoline<std::remove_reference_t<Fn>>, &fn, wake);
  }

 private:
  using ChunkFn = void (*)(void* ctx, int64_t chunk, int slot);
  template <typename Fn>
  static void Trampoline(void* ctx, int64_t chunk, int slot) {
    (*static_cast<Fn*>(ctx))(chunk, slot);
  }
  void RunImpl(int64_t chunks, ChunkFn fn, void* ctx, bool wake);
  void Drain(int slot);
  void WorkerLoop(int slot);
  void WakeSleepers();

  // Job fields: written by the caller before work_ is published, read by a thread only after
  // it has claimed a chunk of that job (the job cannot end before the chunk is done).
  ChunkFn fn_ = nullptr;
  void* ctx_ = nullptr;
  alignas(64) std::atomic<uint64_t> work_{0};  // [chunks:32 | next:32]
  alignas(64) std::atomic<int64_t> done_{0};
  alignas(64) std::atomic<uint32_t> epoch_{0};  // bumped per job; sleeping workers wait on it
  std::atomic<int> sleepers_{0};
  std::mutex sleep_mu_;
  std::condition_variable wake_;
  std::atomic<bool> stop_{false};
  bool running_ = false;  // caller-thread only: nested Run goes serial
  std::vector<std::thread> workers_;
};

// The calling thread's team (like OpenMP's per-thread team size): SetComputeThreads sizes it
// (0: all cores; the workers start on first use and are rebuilt when the size changes) and
// returns the size in effect; it also keeps OpenBLAS single-threaded. ComputeThreads() is
// the current size.
int SetComputeThreads(int threads);
int ComputeThreads();

// How a kernel's loop may use the team, from its size. Waking a sleeping worker costs a
// futex wake-up (an inter-processor interrupt on a VM) plus the worker's wake latency, tens of
// microseconds on the 2-vCPU dev VM: a job shorter than that finishes on the caller before the
// worker arrives, and the wake-up only slows the caller (docs/benchmarks.md, threads).
//   kSerial:  the caller alone.
//   kIfAwake: workers that are still awake (spinning after the previous job) join; none is woken.
//   kWake:    sleeping workers are woken.
enum class Split { kSerial, kIfAwake, kWake };

// The split for a job of `macs` multiply-adds of a register-blocked kernel (~50 G/s per core
// here); kernels with slower inner loops scale their counts (attention: x4). The thresholds
// live in compute_pool.cc, measured in docs/benchmarks.md.
Split SplitFor(int64_t macs);

// Runs fn(chunk, slot) for chunk in [0, chunks) on the calling thread's team (serially when
// the team has one thread or `parallel` is false; `parallel` = true means Split::kWake).
template <typename Fn>
void ParallelFor(int64_t chunks, Split split, Fn&& fn);
template <typename Fn>
void ParallelFor(int64_t chunks, bool parallel, Fn&& fn) {
  ParallelFor(chunks, parallel ? Split::kWake : Split::kSerial, std::forward<Fn>(fn));
}

namespace internal {
ComputePool* CurrentPool();  // null when the calling thread's team has one thread
}  // namespace internal

template <typename Fn>
void ParallelFor(int64_t chunks, Split split, Fn&& fn) {
  ComputePool* pool = split != Split::kSerial && chunks > 1 ? internal::CurrentPool() : nullptr;
  if (pool == nullptr) {
    for (int64_t c = 0; c < chunks; ++c) fn(c, 0);
    return;
  }
  pool->Run(chunks, fn, split == Split::kWake);
}

}  // namespace kvserve::kernels::cpu
