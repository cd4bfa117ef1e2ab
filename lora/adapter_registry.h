// The served adapters by name, and which of them are held in host memory.
//
//   names:     name -> directory                       Add / Remove (admin, start-up)
//   resident:  at most max_cpu_loras loaded adapters   an LRU; a miss loads from disk
//   pinned:    resident adapters some request holds    AdapterHandle (RAII), never evicted
//
//   Acquire(name): resident -> pin, touch        loading -> wait for that load
//                  else: take a seat (evicting the least recently used unpinned adapter;
//                  none: ResourceExhausted), load OUTSIDE the lock, pin
//
// Threading: every method may be called from any thread (front ends resolve a request's
// adapter on their own thread; the engine thread only reads Adapter objects through the
// handles its requests hold). The mutex guards the tables and is never held while a file is
// read, so loading one adapter never stalls a step or a request that does not need it.
//
// Remove (unload) forgets the name at once: new Acquires see an unknown adapter; requests
// that hold a handle keep the weights alive until they finish. A name added again (a
// reload) is a new entry with its own digest, so nothing keyed on the old digest is reused.
// The registry must outlive every handle.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "lora/adapter.h"
#include "lora/lora_targets.h"
#include "model/model_config.h"

namespace kvserve::lora {

struct RegistryOptions {
  int max_loras = 1;       // distinct adapters in one step (the scheduler's bound)
  int max_lora_rank = 16;  // largest rank of any module
  int max_cpu_loras = 1;   // adapters held in host memory; >= max_loras
};

class AdapterRegistry;

// A pin on a resident adapter: while it lives the adapter is never evicted. Move-only.
class AdapterHandle {
 public:
  AdapterHandle() = default;
  AdapterHandle(AdapterHandle&& o) noexcept { *this = std::move(o); }
  AdapterHandle& operator=(AdapterHandle&& o) noexcept;
  AdapterHandle(const AdapterHandle&) = delete;
  AdapterHandle& operator=(const AdapterHandle&) = delete;
  ~AdapterHandle() { Release(); }

  explicit operator bool() const { return adapter_ != nullptr; }
  const Adapter* get() const { return adapter_.get(); }
  const Adapter* operator->() const { return adapter_.get(); }
  const std::string& name() const;
  void Release();

 private:
  friend class AdapterRegistry;
  struct Entry;
  AdapterRegistry* registry_ = nullptr;
  std::shared_ptr<Entry> entry_;
  std::shared_ptr<const Adapter> adapter_;
};

struct AdapterInfo {
  std::string name;
  std::string dir;
  bool resident = false;
  int pins = 0;
  std::string digest_hex;  // empty unless resident
};

class AdapterRegistry {
 public:
  static absl::StatusOr<std::unique_ptr<AdapterRegistry>> Create(const model::ModelConfig& config,
                                                                 const RegistryOptions& options);
  ~AdapterRegistry();
  AdapterRegistry(const AdapterRegistry&) = delete;
  AdapterRegistry& operator=(const AdapterRegistry&) = delete;

  // Names an adapter. load_now: read and check it at once (start-up, admin load: errors
  // surface to the caller); otherwise on first Acquire. AlreadyExists if the name is taken.
  absl::Status Add(const std::string& name, const std::string& dir, bool load_now = true);
  // Forgets the name (NotFound if unknown); pinned weights live until their handles go.
  absl::Status Remove(const std::string& name);
  // Pins the named adapter, loading it if needed. NotFound: no such name. ResourceExhausted:
  // max_cpu_loras adapters are resident and all pinned. Load errors as Adapter::Load.
  absl::StatusOr<AdapterHandle> Acquire(const std::string& name);

  std::vector<AdapterInfo> List() const;  // by name
  int resident_count() const;
  const RegistryOptions& options() const { return options_; }
  const TargetTable& targets() const { return targets_; }

 private:
  friend class AdapterHandle;
  using Entry = AdapterHandle::Entry;
  AdapterRegistry(TargetTable targets, const RegistryOptions& options);
  void Unpin(Entry& e);
  // Frees a seat for a load (mu_ held): true if one was free or an unpinned adapter was evicted.
  bool TakeSeat();

  const TargetTable targets_;
  const RegistryOptions options_;
  mutable std::mutex mu_;
  std::condition_variable loaded_;
  absl::flat_hash_map<std::string, std::shared_ptr<Entry>> names_;
  int seats_taken_ = 0;  // resident + loading (+ removed but still pinned)
  uint64_t tick_ = 0;    // LRU clock
};

}  // namespace kvserve::lora
