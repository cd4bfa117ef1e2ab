// The generations currently served by this process, by the id the client sees: lets the
// gRPC Abort RPC find a request (only its own tenant's), and lets the drain at shutdown
// wait for in-flight requests and abort what is left.
//
//   id ──► { tenant, abort() }      abort() only talks to the engine (thread-safe); it
//                                   never touches the consumer's state.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

namespace kvserve::server {

class RequestRegistry {
 public:
  // Removes its entry when destroyed. Move-only.
  class Registration {
   public:
    Registration() = default;
    Registration(Registration&& other) noexcept { *this = std::move(other); }
    Registration& operator=(Registration&& other) noexcept;
    ~Registration();
    // Installs the function that aborts the request (set once the engine accepted it);
    // runs it at once if an abort was asked for in the meantime.
    void set_abort(std::function<void()> abort);

   private:
    friend class RequestRegistry;
    Registration(RequestRegistry* registry, std::string id) : registry_(registry), id_(std::move(id)) {}
    RequestRegistry* registry_ = nullptr;
    std::string id_;
  };

  // std::nullopt if `id` is already in use.
  std::optional<Registration> Add(std::string id, std::string tenant);
  // Aborts `id` if it exists and belongs to `tenant` (right away, or as soon as its abort
  // function is installed). Returns whether it was found.
  bool Abort(std::string_view id, std::string_view tenant);
  void AbortAll();
  size_t size() const;
  // Waits until no request is registered; false on timeout.
  bool WaitEmpty(std::chrono::milliseconds timeout) const;

 private:
  struct Entry {
    std::string tenant;
    std::function<void()> abort;   // null until the engine accepted the request
    bool abort_requested = false;  // an abort that came before `abort` was set
  };
  void Remove(const std::string& id);
  void SetAbort(const std::string& id, std::function<void()> abort);

  mutable std::mutex mu_;
  mutable std::condition_variable empty_cv_;
  std::map<std::string, Entry, std::less<>> entries_;
};

}  // namespace kvserve::server
