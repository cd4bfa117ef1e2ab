// The adapters the engine's requests use right now, by a small integer id that sequences
// carry through the scheduler to the runner (SequenceState / ScheduledSeq::lora_id):
//
//   request arrives  ── AdapterHandle (pinned by the front end's Acquire) ──► Add ──► id
//   runner, per step ── Get(id) ──► const Adapter*  (LoraStep::SlotFor)
//   request ends     ── Release(id): the last holder drops the pin (the adapter may then be
//                       evicted or, once unloaded, freed)
//
// One id per distinct Adapter object (not per name): requests on the same adapter share an
// id, so the scheduler counts distinct adapters by distinct ids, and a name reloaded with new
// weights gets a new id while requests on the old weights finish on them.
//
// Per id the table also counts requests waiting and running (the engine moves them), for
// vLLM's lora_requests_info gauge. Engine thread only: no locks.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "lora/adapter_registry.h"

namespace kvserve::lora {

class ActiveAdapters {
 public:
  // Takes the request's pin; returns the adapter's id (a new waiting request).
  int32_t Add(AdapterHandle handle);
  // The request left (finished, aborted); `running`: it had been admitted.
  void Release(int32_t id, bool running);
  // A waiting request of `id` was admitted.
  void MarkRunning(int32_t id);

  const Adapter* Get(int32_t id) const { return entries_[static_cast<size_t>(id)].adapter; }
  const std::string& name(int32_t id) const { return entries_[static_cast<size_t>(id)].name; }
  // Names of the adapters with running (resp. waiting) requests, sorted.
  std::vector<std::string> RunningNames() const;
  std::vector<std::string> WaitingNames() const;
  // Bumped by every Add / MarkRunning / Release: the names are recomputed only after a change.
  uint64_t version() const { return version_; }

 private:
  struct Entry {
    const Adapter* adapter = nullptr;  // null: free id
    std::string name;
    AdapterHandle pin;
    int waiting = 0;
    int running = 0;
  };
  std::vector<Entry> entries_;
  std::vector<int32_t> free_ids_;
  absl::flat_hash_map<const Adapter*, int32_t> ids_;
  uint64_t version_ = 0;
};

}  // namespace kvserve::lora
