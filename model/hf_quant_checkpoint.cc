#include "model/hf_quant_checkpoint.h"

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "model/block_weights.h"
#include "model/hf_quant_weights.h"

namespace kvserve::model {
namespace {

class HfQuantTensorFile final : public TensorFile {
 public:
  HfQuantTensorFile(SafetensorsCheckpoint inner, HfQuantConfig cfg)
      : inner_(std::move(inner)), cfg_(std::move(cfg)), path_(inner_.description()) {}

  absl::Status Build() {
    std::set<std::string> hidden;
    for (const std::string& prefix : FindHfQuantModules(inner_, cfg_)) {
      KVS_ASSIGN_OR_RETURN(HfQuantModule m, InspectHfQuantModule(inner_, cfg_, prefix));
      for (std::string& n : HfQuantComponentNames(cfg_, prefix)) hidden.insert(std::move(n));
      SafetensorsEntry e;
      e.name = prefix + ".weight";
      e.dtype = std::string(quant::Traits(m.block).name);
      e.dtype_bytes = 0;
      e.shape = {m.out, m.in};
      KVS_ASSIGN_OR_RETURN(const int64_t row_bytes, quant::RowBytes(m.block, m.in));
      e.end = static_cast<uint64_t>(row_bytes * m.out);
      entries_.push_back(std::move(e));
      if (!m.input_order.empty()) {  // act-order: the stored column order (block_weights.h)
        SafetensorsEntry o;
        o.name = prefix + ".weight" + std::string(kInputOrderSuffix);
        o.dtype = "I32";
        o.dtype_bytes = 4;
        o.shape = {m.in};
        o.end = static_cast<uint64_t>(4 * m.in);
        entries_.push_back(std::move(o));
        orders_.emplace(prefix + ".weight" + std::string(kInputOrderSuffix), m.input_order);
      }
      modules_.emplace(prefix + ".weight", std::move(m));
    }
    if (modules_.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          path_, ": config.json declares ", cfg_.Describe(), " but no tensor is stored that way"));
    }
    for (const std::string& name : inner_.TensorNames()) {
      if (hidden.count(name) != 0 || modules_.count(name) != 0) continue;
      KVS_ASSIGN_OR_RETURN(auto found, inner_.Find(name));
      entries_.push_back(*found.second);
    }
    std::sort(entries_.begin(), entries_.end(),
              [](const SafetensorsEntry& a, const SafetensorsEntry& b) { return a.name < b.name; });
    return absl::OkStatus();
  }

  const std::string& path() const override { return path_; }
  const std::vector<SafetensorsEntry>& entries() const override { return entries_; }

  std::span<const std::byte> Bytes(const SafetensorsEntry& e) const override {
    if (auto o = orders_.find(e.name); o != orders_.end()) {
      return std::as_bytes(std::span<const int32_t>(o->second));
    }
    auto m = modules_.find(e.name);
    if (m == modules_.end()) {
      auto found = inner_.Find(e.name);
      KVS_CHECK(found.ok(), "pass-through tensor indexed");
      return found->first->Bytes(*found->second);
    }
    std::lock_guard<std::mutex> lock(mu_);
    auto c = cache_.find(e.name);
    if (c == cache_.end()) {
      // Checked when opened (Build): reading can only fail on a changed file.
      auto w = ReadGroupedInt(inner_, cfg_, m->second);
      KVS_CHECK(w.ok(), "quantized module readable after its checks");
      c = cache_.emplace(e.name, WriteBlockRows(*w, m->second.block)).first;
      for (const std::string& n : HfQuantComponentNames(cfg_, m->second.prefix)) {
        if (auto f = inner_.Find(n); f.ok()) f->first->Release(*f->second);
      }
    }
    return c->second;
  }

  void WillNeed(const SafetensorsEntry& e) const override {
    if (modules_.count(e.name) != 0 || orders_.count(e.name) != 0) return;
    if (auto f = inner_.Find(e.name); f.ok()) f->first->WillNeed(*f->second);
  }

  void Release(const SafetensorsEntry& e) const override {
    if (modules_.count(e.name) != 0) {
      std::lock_guard<std::mutex> lock(mu_);
      cache_.erase(e.name);
      return;
    }
    if (orders_.count(e.name) != 0) return;
    if (auto f = inner_.Find(e.name); f.ok()) f->first->Release(*f->second);
  }

 private:
  SafetensorsCheckpoint inner_;
  HfQuantConfig cfg_;
  std::string path_;
  std::vector<SafetensorsEntry> entries_;
  std::map<std::string, HfQuantModule> modules_;        // by the block tensor's name
  std::map<std::string, std::vector<int32_t>> orders_;  // by the input-order tensor's name
  mutable std::mutex mu_;
  mutable std::map<std::string, std::vector<std::byte>> cache_;
};

}  // namespace

absl::StatusOr<SafetensorsCheckpoint> OpenHfQuantCheckpoint(SafetensorsCheckpoint inner,
                                                            const HfQuantConfig& cfg) {
  const std::string description = inner.description();
  auto file = std::make_unique<HfQuantTensorFile>(std::move(inner), cfg);
  KVS_RETURN_IF_ERROR(file->Build());
  std::vector<std::unique_ptr<TensorFile>> files;
  files.push_back(std::move(file));
  return SafetensorsCheckpoint::FromFiles(std::move(files),
                                          absl::StrCat(description, " (", cfg.Describe(), ")"));
}

}  // namespace kvserve::model
