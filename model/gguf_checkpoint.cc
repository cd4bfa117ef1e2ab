#include "model/gguf_checkpoint.h"

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/absl_compat.h"
#include "base/check.h"
#include "model/gguf_names.h"

namespace kvserve::model {
namespace {

// One GGUF file's tensors under their Hugging Face names. Entry byte ranges are relative to
// the file's data region (base_).
class GgufTensorFile final : public TensorFile {
 public:
  GgufTensorFile(std::shared_ptr<const gguf::GgufModel> keep, const gguf::GgufFile* file,
                 std::vector<SafetensorsEntry> entries, const std::byte* base)
      : keep_(std::move(keep)), file_(file), entries_(std::move(entries)), base_(base) {
    std::sort(entries_.begin(), entries_.end(),
              [](const auto& a, const auto& b) { return a.name < b.name; });
  }
  const std::string& path() const override { return file_->path(); }
  const std::vector<SafetensorsEntry>& entries() const override { return entries_; }
  std::span<const std::byte> Bytes(const SafetensorsEntry& e) const override {
    return {base_ + e.begin, static_cast<size_t>(e.end - e.begin)};
  }
  void WillNeed(const SafetensorsEntry& e) const override { file_->WillNeed(Range(e)); }
  void Release(const SafetensorsEntry& e) const override { file_->Release(Range(e)); }

 private:
  static gguf::TensorInfo Range(const SafetensorsEntry& e) {
    gguf::TensorInfo t;
    t.name = e.name;
    t.offset = e.begin;
    t.bytes = e.end - e.begin;
    return t;
  }
  std::shared_ptr<const gguf::GgufModel> keep_;  // the mapping outlives every entry
  const gguf::GgufFile* file_;
  std::vector<SafetensorsEntry> entries_;
  const std::byte* base_;
};

}  // namespace

absl::StatusOr<SafetensorsCheckpoint> OpenGgufCheckpoint(
    std::shared_ptr<const gguf::GgufModel> gguf, const ModelConfig& config) {
  // Group the tensors by file, keeping the files' order.
  std::vector<const gguf::GgufFile*> files;
  std::vector<std::vector<SafetensorsEntry>> entries;
  std::vector<const std::byte*> bases;
  for (const std::string& name : gguf->TensorNames()) {
    KVS_ASSIGN_OR_RETURN(gguf::GgufModel::Tensor t, gguf->FindTensor(name));
    const std::optional<GgufTensorName> m = GgufToHf(config, name);
    if (!m) {
      if (GgufTensorReadIntoConfig(name)) continue;
      return absl::InvalidArgumentError(
          absl::StrCat(t.file->path(), ": tensor \"", name, "\" is not one a ",
                       base::AsAbsl(ArchitectureName(config.architecture)),
                       " model has (unsupported variant?)"));
    }
    auto it = std::find(files.begin(), files.end(), t.file);
    if (it == files.end()) {
      files.push_back(t.file);
      entries.emplace_back();
      bases.push_back(t.file->Bytes(*t.info).data() - t.info->offset);
      it = files.end() - 1;
    }
    std::vector<SafetensorsEntry>& out = entries[static_cast<size_t>(it - files.begin())];
    const gguf::TensorInfo& info = *t.info;
    const auto traits = quant::Traits(info.type);
    SafetensorsEntry e;
    e.dtype = std::string(traits.name);
    e.dtype_bytes = traits.quantized ? 0 : static_cast<size_t>(traits.block_bytes);
    e.permute_heads = m->permute_heads;
    const std::vector<int64_t>& ne = info.ne;
    if (!m->experts) {
      if (ne.size() > 2) {
        return absl::InvalidArgumentError(absl::StrCat(t.file->path(), ": tensor \"", name,
                                                       "\": expected 1 or 2 dimensions, got ",
                                                       ne.size()));
      }
      e.name = m->hf;
      e.shape = ne.size() == 1 ? std::vector<int64_t>{ne[0]} : std::vector<int64_t>{ne[1], ne[0]};
      e.begin = info.offset;
      e.end = info.offset + info.bytes;
      out.push_back(std::move(e));
      continue;
    }
    // Matrices [in, out, experts]; biases (gpt-oss) [out, experts].
    const bool bias = name.ends_with(".bias");
    if (ne.size() != (bias ? 2u : 3u)) {
      return absl::InvalidArgumentError(absl::StrCat(
          t.file->path(), ": tensor \"", name, "\": expected ",
          bias ? "[out, experts]" : "[in, out, experts]", ", got ", ne.size(), " dimensions"));
    }
    const int64_t count = ne.back();
    if (count <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(t.file->path(), ": tensor \"", name, "\": no experts"));
    }
    const uint64_t per_expert = info.bytes / static_cast<uint64_t>(count);
    for (int64_t x = 0; x < count; ++x) {
      SafetensorsEntry ex = e;
      ex.name = m->hf;
      ex.name.replace(ex.name.find("{e}"), 3, std::to_string(x));
      ex.shape = bias ? std::vector<int64_t>{ne[0]} : std::vector<int64_t>{ne[1], ne[0]};
      ex.begin = info.offset + static_cast<uint64_t>(x) * per_expert;
      ex.end = ex.begin + per_expert;
      out.push_back(std::move(ex));
    }
  }
  std::vector<std::unique_ptr<TensorFile>> tensor_files;
  for (size_t i = 0; i < files.size(); ++i) {
    tensor_files.push_back(
        std::make_unique<GgufTensorFile>(gguf, files[i], std::move(entries[i]), bases[i]));
  }
  KVS_ASSIGN_OR_RETURN(
      SafetensorsCheckpoint ckpt,
      SafetensorsCheckpoint::FromFiles(std::move(tensor_files), gguf->description()));
  // llama.cpp's converter stores Gemma's norms as (1 + w).
  ckpt.set_norm_offset_stored(config.norm_weight_offset);
  return ckpt;
}

}  // namespace kvserve::model
