#include "lora/adapter_registry.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/check.h"

namespace kvserve::lora {

// One named adapter. Guarded by the registry's mutex (except `name`/`dir`, fixed at Add).
struct AdapterHandle::Entry {
  std::string name;
  std::string dir;
  std::shared_ptr<const Adapter> adapter;  // set while resident
  int pins = 0;
  uint64_t last_use = 0;
  bool loading = false;
  bool removed = false;
};

AdapterHandle& AdapterHandle::operator=(AdapterHandle&& o) noexcept {
  if (this != &o) {
    Release();
    registry_ = o.registry_;
    entry_ = std::move(o.entry_);
    adapter_ = std::move(o.adapter_);
    o.registry_ = nullptr;
  }
  return *this;
}

const std::string& AdapterHandle::name() const {
  static const std::string kNone;
  return entry_ != nullptr ? entry_->name : kNone;
}

void AdapterHandle::Release() {
  if (registry_ != nullptr && entry_ != nullptr) registry_->Unpin(*entry_);
  registry_ = nullptr;
  entry_.reset();
  adapter_.reset();
}

absl::StatusOr<std::unique_ptr<AdapterRegistry>> AdapterRegistry::Create(
    const model::ModelConfig& config, const RegistryOptions& o) {
  if (o.max_loras < 1)
    return absl::InvalidArgumentError(
        absl::StrCat("lora.max_loras must be >= 1, got ", o.max_loras));
  if (o.max_lora_rank < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("lora.max_lora_rank must be >= 1, got ", o.max_lora_rank));
  }
  if (o.max_cpu_loras < o.max_loras) {
    return absl::InvalidArgumentError(absl::StrCat("lora.max_cpu_loras (", o.max_cpu_loras,
                                                   ") must be >= lora.max_loras (", o.max_loras,
                                                   ")"));
  }
  return std::unique_ptr<AdapterRegistry>(new AdapterRegistry(TargetTable::ForModel(config), o));
}

AdapterRegistry::AdapterRegistry(TargetTable targets, const RegistryOptions& options)
    : targets_(std::move(targets)), options_(options) {}

AdapterRegistry::~AdapterRegistry() = default;

absl::Status AdapterRegistry::Add(const std::string& name, const std::string& dir, bool load_now) {
  if (name.empty()) return absl::InvalidArgumentError("adapter name must not be empty");
  auto e = std::make_shared<Entry>();
  e->name = name;
  e->dir = dir;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (names_.contains(name))
      return absl::AlreadyExistsError(absl::StrCat("adapter ", name, " already exists"));
    names_.emplace(name, e);
  }
  if (!load_now) return absl::OkStatus();
  auto handle = Acquire(name);
  if (!handle.ok()) {
    // A start-up or admin load that fails leaves no name behind (unless it was replaced).
    std::lock_guard<std::mutex> lock(mu_);
    auto it = names_.find(name);
    if (it != names_.end() && it->second == e) names_.erase(it);
    return handle.status();
  }
  return absl::OkStatus();
}

absl::Status AdapterRegistry::Remove(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = names_.find(name);
  if (it == names_.end())
    return absl::NotFoundError(absl::StrCat("adapter ", name, " does not exist"));
  Entry& e = *it->second;
  e.removed = true;
  if (e.adapter != nullptr && e.pins == 0) {
    e.adapter.reset();
    --seats_taken_;
  }
  names_.erase(it);
  return absl::OkStatus();
}

bool AdapterRegistry::TakeSeat() {
  if (seats_taken_ < options_.max_cpu_loras) {
    ++seats_taken_;
    return true;
  }
  Entry* victim = nullptr;
  for (auto& [name, e] : names_) {
    if (e->adapter != nullptr && e->pins == 0 &&
        (victim == nullptr || e->last_use < victim->last_use)) {
      victim = e.get();
    }
  }
  if (victim == nullptr) return false;
  victim->adapter.reset();  // its seat passes to the new load
  return true;
}

absl::StatusOr<AdapterHandle> AdapterRegistry::Acquire(const std::string& name) {
  std::unique_lock<std::mutex> lock(mu_);
  std::shared_ptr<Entry> e;
  for (;;) {
    auto it = names_.find(name);
    if (it == names_.end())
      return absl::NotFoundError(absl::StrCat("adapter ", name, " does not exist"));
    e = it->second;
    if (!e->loading) break;
    loaded_.wait(lock);  // another thread is reading this adapter: share its result
  }
  if (e->adapter == nullptr) {
    if (!TakeSeat()) {
      return absl::ResourceExhaustedError(
          absl::StrCat("cannot load adapter ", name, ": all ", options_.max_cpu_loras,
                       " resident adapters (lora.max_cpu_loras) are in use"));
    }
    e->loading = true;
    lock.unlock();
    auto loaded = Adapter::Load(e->dir, targets_, AdapterLoadOptions{options_.max_lora_rank});
    lock.lock();
    e->loading = false;
    loaded_.notify_all();
    if (!loaded.ok() || e->removed) {
      --seats_taken_;
      if (!loaded.ok()) return loaded.status();
      return absl::NotFoundError(absl::StrCat("adapter ", name, " was removed while loading"));
    }
    e->adapter = *std::move(loaded);
  }
  ++e->pins;
  e->last_use = ++tick_;
  AdapterHandle h;
  h.registry_ = this;
  h.adapter_ = e->adapter;
  h.entry_ = std::move(e);
  return h;
}

void AdapterRegistry::Unpin(Entry& e) {
  std::lock_guard<std::mutex> lock(mu_);
  KVS_CHECK(e.pins > 0);
  --e.pins;
  e.last_use = ++tick_;
  if (e.removed && e.pins == 0 && e.adapter != nullptr) {
    e.adapter.reset();
    --seats_taken_;
  }
}

std::vector<AdapterInfo> AdapterRegistry::List() const {
  std::vector<AdapterInfo> out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [name, e] : names_) {
      out.push_back(
          AdapterInfo{name, e->dir, e->adapter != nullptr, e->pins,
                      e->adapter != nullptr ? e->adapter->digest().hex() : std::string()});
    }
  }
  std::sort(out.begin(), out.end(),
            [](const AdapterInfo& a, const AdapterInfo& b) { return a.name < b.name; });
  return out;
}

int AdapterRegistry::resident_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return seats_taken_;
}

}  // namespace kvserve::lora
