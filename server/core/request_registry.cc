#include "server/core/request_registry.h"

#include <vector>

namespace kvserve::server {

RequestRegistry::Registration& RequestRegistry::Registration::operator=(
    Registration&& other) noexcept {
  if (this != &other) {
    if (registry_ != nullptr) registry_->Remove(id_);
    registry_ = other.registry_;
    id_ = std::move(other.id_);
    other.registry_ = nullptr;
  }
  return *this;
}

RequestRegistry::Registration::~Registration() {
  if (registry_ != nullptr) registry_->Remove(id_);
}

void RequestRegistry::Registration::set_abort(std::function<void()> abort) {
  if (registry_ != nullptr) registry_->SetAbort(id_, std::move(abort));
}

std::optional<RequestRegistry::Registration> RequestRegistry::Add(std::string id,
                                                                  std::string tenant) {
  std::lock_guard<std::mutex> lock(mu_);
  auto [it, inserted] = entries_.try_emplace(id, Entry{std::move(tenant), nullptr});
  if (!inserted) return std::nullopt;
  return Registration(this, std::move(id));
}

bool RequestRegistry::Abort(std::string_view id, std::string_view tenant) {
  std::function<void()> abort;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = entries_.find(id);
    if (it == entries_.end() || it->second.tenant != tenant) return false;
    abort = it->second.abort;
    // Not submitted to the engine yet: set_abort runs it as soon as it is.
    if (!abort) it->second.abort_requested = true;
  }
  if (abort) abort();
  return true;
}

void RequestRegistry::AbortAll() {
  std::vector<std::function<void()>> aborts;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [id, e] : entries_) {
      if (e.abort) {
        aborts.push_back(e.abort);
      } else {
        e.abort_requested = true;
      }
    }
  }
  for (auto& a : aborts) a();
}

size_t RequestRegistry::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

bool RequestRegistry::WaitEmpty(std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(mu_);
  return empty_cv_.wait_for(lock, timeout, [this] { return entries_.empty(); });
}

void RequestRegistry::Remove(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  entries_.erase(id);
  if (entries_.empty()) empty_cv_.notify_all();
}

void RequestRegistry::SetAbort(const std::string& id, std::function<void()> abort) {
  bool run_now = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = entries_.find(id);
    if (it == entries_.end()) return;
    it->second.abort = abort;
    run_now = it->second.abort_requested;
  }
  if (run_now) abort();
}

}  // namespace kvserve::server
