#include "lora/active_adapters.h"

#include <algorithm>

#include "base/check.h"

namespace kvserve::lora {

int32_t ActiveAdapters::Add(AdapterHandle handle) {
  KVS_CHECK(static_cast<bool>(handle), "ActiveAdapters::Add needs a pinned adapter");
  const Adapter* a = handle.get();
  ++version_;
  if (auto it = ids_.find(a); it != ids_.end()) {
    // Already pinned by an earlier request: this request's own pin is dropped here, the
    // table's one stays until the last request of the id leaves.
    ++entries_[static_cast<size_t>(it->second)].waiting;
    return it->second;
  }
  int32_t id;
  if (!free_ids_.empty()) {
    id = free_ids_.back();
    free_ids_.pop_back();
  } else {
    id = static_cast<int32_t>(entries_.size());
    entries_.emplace_back();
  }
  Entry& e = entries_[static_cast<size_t>(id)];
  e.adapter = a;
  e.name = handle.name();
  e.pin = std::move(handle);
  e.waiting = 1;
  e.running = 0;
  ids_[a] = id;
  return id;
}

void ActiveAdapters::MarkRunning(int32_t id) {
  Entry& e = entries_[static_cast<size_t>(id)];
  KVS_CHECK(e.waiting > 0, "adapter id ", id, " has no waiting request");
  ++version_;
  --e.waiting;
  ++e.running;
}

void ActiveAdapters::Release(int32_t id, bool running) {
  Entry& e = entries_[static_cast<size_t>(id)];
  int& count = running ? e.running : e.waiting;
  KVS_CHECK(count > 0, "adapter id ", id, " released more often than added");
  --count;
  ++version_;
  if (e.running + e.waiting > 0) return;
  ids_.erase(e.adapter);
  e.adapter = nullptr;
  e.name.clear();
  e.pin.Release();
  free_ids_.push_back(id);
}

std::vector<std::string> ActiveAdapters::RunningNames() const {
  std::vector<std::string> out;
  for (const Entry& e : entries_) {
    if (e.adapter != nullptr && e.running > 0) out.push_back(e.name);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<std::string> ActiveAdapters::WaitingNames() const {
  std::vector<std::string> out;
  for (const Entry& e : entries_) {
    if (e.adapter != nullptr && e.waiting > 0) out.push_back(e.name);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace kvserve::lora
