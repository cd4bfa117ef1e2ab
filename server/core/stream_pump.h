// StreamPump: a thread that runs push-style consumers (the gRPC reactors) when their
// generation has news. The engine thread only wakes the pump (a short critical section);
// detokenizing, stop strings, protobuf serialisation and the Abort a stop string triggers
// all happen here or on gRPC's threads, never on the engine thread.
//
//   engine push ─► Generation wake-up ─► Schedule(weak target) ─► queue_ ─► pump thread: target->Pump()
//
// Targets are held weakly: one that finished in the meantime is skipped.
#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>

namespace kvserve::server {

class Pumpable {
 public:
  virtual ~Pumpable() = default;
  // Moves whatever output is ready towards the client. Must not block.
  virtual void Pump() = 0;
};

class StreamPump {
 public:
  StreamPump();
  ~StreamPump();
  StreamPump(const StreamPump&) = delete;
  StreamPump& operator=(const StreamPump&) = delete;

  // Thread-safe, non-blocking apart from a short lock.
  void Schedule(std::weak_ptr<Pumpable> target);
  // Joins the thread; later Schedule calls are dropped. Idempotent.
  void Stop();

 private:
  void Run();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::weak_ptr<Pumpable>> queue_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace kvserve::server
