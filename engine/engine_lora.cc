// The engine's LoRA adapter surface (docs/lora.md): the admin calls that list, load and unload
// adapters through the registry (lora/adapter_registry.h), and the running/waiting report the
// metrics read (vllm:lora_requests_info). Pinning at submission, the prefix-key digest and the
// release at completion stay in engine.cc beside the request lifecycle they belong to.
#include "absl/strings/str_cat.h"
#include "engine/engine.h"

namespace kvserve::engine {

// Pinned on the caller's thread (Submit), so that loading an adapter from disk never stalls
// the engine loop (adapter_registry.h). An unknown name is the front end's 404.
absl::StatusOr<lora::AdapterHandle> Engine::PinAdapter(const std::string& name) {
  if (name.empty()) return lora::AdapterHandle();
  absl::StatusOr<lora::AdapterHandle> h =
      lora_ != nullptr ? lora_->Acquire(name)
                       : absl::StatusOr<lora::AdapterHandle>(absl::NotFoundError("no adapters"));
  if (!h.ok() && absl::IsNotFound(h.status())) {
    return absl::NotFoundError(absl::StrCat("The model `", name, "` does not exist."));
  }
  return h;
}

void Engine::ReportLora() {
  if (observer_ == nullptr || lora_active_->version() == lora_version_) return;
  lora_version_ = lora_active_->version();
  LoraState now;
  now.max_lora = config_.lora.max_loras;
  now.running = lora_active_->RunningNames();
  now.waiting = lora_active_->WaitingNames();
  if (now.running == lora_reported_.running && now.waiting == lora_reported_.waiting &&
      lora_reported_.max_lora != 0) {
    return;
  }
  observer_->OnLoraState(now);
  lora_reported_ = std::move(now);
}

bool Engine::HasAdapter(const std::string& name) const {
  if (lora_ == nullptr) return false;
  for (const lora::AdapterInfo& a : lora_->List()) {
    if (a.name == name) return true;
  }
  return false;
}

std::vector<AdapterCard> Engine::ListAdapters() const {
  std::vector<AdapterCard> out;
  if (lora_ == nullptr) return out;
  for (const lora::AdapterInfo& a : lora_->List())
    out.push_back({a.name, a.dir, a.resident, a.digest_hex});
  return out;
}

absl::Status Engine::LoadAdapter(const std::string& name, const std::string& path) {
  if (lora_ == nullptr) return EngineClient::LoadAdapter(name, path);
  if (name == model_.name) {
    return absl::InvalidArgumentError(
        absl::StrCat("lora_name: '", name, "' is the base model's name"));
  }
  return lora_->Add(name, path, /*load_now=*/true);
}

absl::Status Engine::UnloadAdapter(const std::string& name) {
  if (lora_ == nullptr) return EngineClient::UnloadAdapter(name);
  return lora_->Remove(name);
}

}  // namespace kvserve::engine
