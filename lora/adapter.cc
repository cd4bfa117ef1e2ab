#include "lora/adapter.h"

#include <openssl/evp.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/absl_compat.h"
#include "base/check.h"
#include "model/safetensors.h"

namespace kvserve::lora {

uint64_t AdapterDigest::key64() const {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | sha256[static_cast<size_t>(i)];
  return v;
}

std::string AdapterDigest::hex() const {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s;
  for (uint8_t b : sha256) {
    s.push_back(kHex[b >> 4]);
    s.push_back(kHex[b & 15]);
  }
  return s;
}

namespace {

constexpr std::string_view kPrefix = "base_model.model.";
constexpr std::string_view kA = ".lora_A.weight";
constexpr std::string_view kB = ".lora_B.weight";

int RoundUp8(int n) { return (n + 7) / 8 * 8; }

std::string Shape(const std::vector<int64_t>& s) {
  return absl::StrCat("[", absl::StrJoin(s, ", "), "]");
}

absl::Status TensorError(const std::string& file, const std::string& tensor,
                         std::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat(file, ": tensor ", tensor, ": ", base::AsAbsl(what)));
}

// SHA-256 through OpenSSL's EVP interface (the low-level SHA256_* calls are deprecated).
class Sha256 {
 public:
  Sha256() : ctx_(EVP_MD_CTX_new()) {
    KVS_CHECK(ctx_ != nullptr && EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr) == 1);
  }
  ~Sha256() { EVP_MD_CTX_free(ctx_); }
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void Update(const void* p, size_t n) { KVS_CHECK(EVP_DigestUpdate(ctx_, p, n) == 1); }
  void Update(std::string_view s) {
    Update(s.data(), s.size());
    Update("\0", 1);  // field separator: ("ab","c") never hashes like ("a","bc")
  }
  std::array<uint8_t, 32> Final() {
    std::array<uint8_t, 32> out{};
    unsigned int n = 0;
    KVS_CHECK(EVP_DigestFinal_ex(ctx_, out.data(), &n) == 1 && n == 32);
    return out;
  }

 private:
  EVP_MD_CTX* ctx_;
};

// The module a tensor adapts, or the refusal that names it.
struct ModuleTensors {
  std::string a, b;  // tensor names
  const TargetTable::ModuleRef* ref = nullptr;
};

absl::StatusOr<std::map<std::string, ModuleTensors>> ClassifyTensors(
    const model::SafetensorsCheckpoint& ckpt, const std::string& file, const TargetTable& targets) {
  std::map<std::string, ModuleTensors> modules;
  for (const std::string& name : ckpt.TensorNames()) {
    if (!absl::StartsWith(name, base::AsAbsl(kPrefix))) {
      return TensorError(
          file, name,
          "not a PEFT adapter key (expected base_model.model.<module>.lora_A/B.weight)");
    }
    const std::string rest = name.substr(kPrefix.size());
    if (absl::StrContains(rest, "lora_magnitude_vector")) {
      return TensorError(file, name, "DoRA (lora_magnitude_vector) is not supported");
    }
    if (absl::StrContains(rest, "lora_embedding_A") ||
        absl::StrContains(rest, "lora_embedding_B")) {
      return TensorError(file, name, "LoRA on embeddings is not supported");
    }
    if (absl::EndsWith(rest, ".lora_B.bias")) {
      return TensorError(file, name, "a trained bias on lora_B (lora_bias) is not supported");
    }
    const bool is_a = absl::EndsWith(rest, base::AsAbsl(kA));
    const bool is_b = absl::EndsWith(rest, base::AsAbsl(kB));
    if (!is_a && !is_b) {
      return TensorError(
          file, name,
          "not a lora_A / lora_B weight: whole-module tensors (modules_to_save) are not supported");
    }
    const std::string module = rest.substr(0, rest.size() - kA.size());
    if (module == "lm_head" || absl::EndsWith(module, ".lm_head")) {
      return TensorError(file, name, "LoRA on lm_head is not supported");
    }
    if (absl::EndsWith(module, "embed_tokens"))
      return TensorError(file, name, "LoRA on embeddings is not supported");
    const TargetTable::ModuleRef* ref = targets.FindModule(module);
    if (ref == nullptr) {
      return TensorError(file, name,
                         absl::StrCat("module ", module, " is not a projection of the base model (",
                                      targets.architecture(), ") that LoRA can target"));
    }
    ModuleTensors& m = modules[module];
    m.ref = ref;
    (is_a ? m.a : m.b) = name;
  }
  for (const auto& [module, m] : modules) {
    if (m.a.empty() || m.b.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(file, ": module ", module, " has ",
                                                     m.a.empty() ? "lora_B" : "lora_A", " but no ",
                                                     m.a.empty() ? "lora_A" : "lora_B"));
    }
  }
  if (modules.empty()) return absl::InvalidArgumentError(absl::StrCat(file, ": no LoRA tensors"));
  return modules;
}

absl::Status CheckShape(const model::SafetensorsCheckpoint& ckpt, const std::string& file,
                        const std::string& name, std::vector<int64_t> expected,
                        std::string_view why) {
  KVS_ASSIGN_OR_RETURN(auto found, ckpt.Find(name));
  if (found.second->shape != expected) {
    return TensorError(file, name,
                       absl::StrCat("expected shape ", Shape(expected), " (", base::AsAbsl(why),
                                    "), got ", Shape(found.second->shape)));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

absl::StatusOr<std::shared_ptr<const Adapter>> Adapter::Load(const std::string& dir,
                                                             const TargetTable& targets,
                                                             const AdapterLoadOptions& options) {
  namespace fs = std::filesystem;
  const std::string config_path = dir + "/adapter_config.json";
  KVS_ASSIGN_OR_RETURN(std::string config_text, ReadText(config_path));
  std::shared_ptr<Adapter> ad(new Adapter());
  ad->dir_ = dir;
  KVS_ASSIGN_OR_RETURN(ad->config_, ParsePeftConfig(config_text, config_path));
  const PeftConfig& cfg = ad->config_;
  if (cfg.max_rank() > options.max_lora_rank) {
    return absl::InvalidArgumentError(absl::StrCat(config_path, ": rank ", cfg.max_rank(),
                                                   " (r / rank_pattern) exceeds max_lora_rank ",
                                                   options.max_lora_rank));
  }
  const std::string file = dir + "/adapter_model.safetensors";
  std::error_code ec;
  if (!fs::exists(file, ec)) {
    if (fs::exists(dir + "/adapter_model.bin", ec)) {
      return absl::InvalidArgumentError(
          absl::StrCat(dir,
                       "/adapter_model.bin: pickle adapters are not supported; save with "
                       "safe_serialization=True"));
    }
    return absl::NotFoundError(absl::StrCat(file, ": not found"));
  }
  KVS_ASSIGN_OR_RETURN(model::SafetensorsCheckpoint ckpt,
                       model::SafetensorsCheckpoint::OpenFile(file));
  KVS_ASSIGN_OR_RETURN(auto modules, ClassifyTensors(ckpt, file, targets));

  // Per target, its adapted slices in row order, with their rank and scale.
  struct Planned {
    const ModuleTensors* m;
    int slice, rank;
    double scale;
  };
  std::vector<std::vector<Planned>> per_target(static_cast<size_t>(targets.size()));
  for (const auto& [module, m] : modules) {
    const Target& tg = targets.targets()[static_cast<size_t>(m.ref->target)];
    const TargetSlice& sl = tg.slices[static_cast<size_t>(m.ref->slice)];
    const int r = cfg.RankFor(module);
    KVS_RETURN_IF_ERROR(CheckShape(ckpt, file, m.a, {r, tg.in},
                                   absl::StrCat("[r, in]: rank ", r, " from adapter_config.json, ",
                                                tg.in, " input features of the base")));
    KVS_RETURN_IF_ERROR(
        CheckShape(ckpt, file, m.b, {sl.out_rows, r},
                   absl::StrCat("[out, r]: ", sl.out_rows, " output features of the base, rank ", r,
                                " from adapter_config.json")));
    per_target[static_cast<size_t>(m.ref->target)].push_back(
        Planned{&m, m.ref->slice, r, cfg.ScaleFor(module)});
  }
  size_t floats = 0, num_slices = 0;
  for (int i = 0; i < targets.size(); ++i) {
    auto& p = per_target[static_cast<size_t>(i)];
    std::sort(p.begin(), p.end(),
              [](const Planned& x, const Planned& y) { return x.slice < y.slice; });
    int rank = 0;
    for (const Planned& s : p) {
      rank += s.rank;
      floats +=
          static_cast<size_t>(s.rank) *
          targets.targets()[static_cast<size_t>(i)].slices[static_cast<size_t>(s.slice)].out_rows;
    }
    floats += static_cast<size_t>(RoundUp8(rank)) * targets.targets()[static_cast<size_t>(i)].in;
    num_slices += p.size();
  }
  // A bf16 file stays bf16 (widened exactly by the kernels, half the bytes); anything else is
  // held as fp32 with the scale folded into B.
  bool bf16 = true;
  for (const std::string& name : ckpt.TensorNames()) {
    KVS_ASSIGN_OR_RETURN(auto found, ckpt.Find(name));
    bf16 = bf16 && found.second->dtype == "BF16";
  }
  ad->bf16_ = bf16;
  if (bf16) {
    ad->storage16_.assign(floats, 0);
  } else {
    ad->storage_.assign(floats, 0.0f);
  }
  // Element `i` of the storage, written as fp32 or as the bf16 bits of a bf16 value (exact:
  // every value written in the bf16 case came from a bf16 tensor).
  auto put = [&](size_t i, float v) {
    if (bf16) {
      uint32_t bits;
      std::memcpy(&bits, &v, sizeof bits);
      ad->storage16_[i] = static_cast<uint16_t>(bits >> 16);
    } else {
      ad->storage_[i] = v;
    }
  };
  ad->slices_.resize(num_slices);
  ad->views_.assign(static_cast<size_t>(targets.size()), kernels::cpu::LoraWeightsView{});
  size_t cursor = 0;
  size_t slice_cursor = 0;
  std::vector<float> tmp;
  for (int i = 0; i < targets.size(); ++i) {
    const auto& p = per_target[static_cast<size_t>(i)];
    if (p.empty()) continue;
    const Target& tg = targets.targets()[static_cast<size_t>(i)];
    kernels::cpu::LoraWeightsView& v = ad->views_[static_cast<size_t>(i)];
    for (const Planned& s : p) v.rank += s.rank;
    const int stride = RoundUp8(v.rank);
    const size_t a_t = cursor;
    cursor += static_cast<size_t>(stride) * tg.in;
    if (bf16) {
      v.a_t_bf16 = ad->storage16_.data() + a_t;
    } else {
      v.a_t = ad->storage_.data() + a_t;
    }
    v.slices = ad->slices_.data() + slice_cursor;
    v.num_slices = static_cast<int32_t>(p.size());
    int rank_begin = 0;
    for (const Planned& s : p) {
      const TargetSlice& sl = tg.slices[static_cast<size_t>(s.slice)];
      // A [r][in] -> a_t[k][rank_begin + j].
      tmp.resize(static_cast<size_t>(s.rank) * tg.in);
      const int64_t a_shape[2] = {s.rank, tg.in};
      KVS_RETURN_IF_ERROR(ckpt.LoadF32(s.m->a, a_shape, tmp));
      for (int j = 0; j < s.rank; ++j) {
        for (int k = 0; k < tg.in; ++k) {
          put(a_t + static_cast<size_t>(k) * stride + rank_begin + j,
              tmp[static_cast<size_t>(j) * tg.in + k]);
        }
      }
      // B [out][r] -> b_t[j][o] = scale · B[o][j] (fp32), or B[o][j] with the scale kept apart
      // (bf16).
      tmp.resize(static_cast<size_t>(sl.out_rows) * s.rank);
      const int64_t b_shape[2] = {sl.out_rows, s.rank};
      KVS_RETURN_IF_ERROR(ckpt.LoadF32(s.m->b, b_shape, tmp));
      const size_t b_t = cursor;
      cursor += static_cast<size_t>(s.rank) * sl.out_rows;
      for (int o = 0; o < sl.out_rows; ++o) {
        for (int j = 0; j < s.rank; ++j) {
          const float b = tmp[static_cast<size_t>(o) * s.rank + j];
          put(b_t + static_cast<size_t>(j) * sl.out_rows + o,
              bf16 ? b : static_cast<float>(static_cast<double>(b) * s.scale));
        }
      }
      kernels::cpu::LoraSliceWeights w{sl.out_begin, sl.out_rows, rank_begin, s.rank};
      if (bf16) {
        w.b_t_bf16 = ad->storage16_.data() + b_t;
        w.scale = static_cast<float>(s.scale);
      } else {
        w.b_t = ad->storage_.data() + b_t;
      }
      ad->slices_[slice_cursor++] = w;
      rank_begin += s.rank;
      ad->max_module_rank_ = std::max(ad->max_module_rank_, s.rank);
      ++ad->num_modules_;
    }
    ad->max_target_rank_ = std::max(ad->max_target_rank_, v.rank);
    if (tg.kind == ProjectionKind::kExpertGateUp || tg.kind == ProjectionKind::kExpertDown)
      ad->touches_experts_ = true;
  }
  KVS_CHECK(cursor == floats);

  Sha256 h;
  h.Update("kvserve-lora-v1");
  h.Update(cfg.CanonicalText());
  for (const std::string& name : ckpt.TensorNames()) {
    KVS_ASSIGN_OR_RETURN(auto found, ckpt.Find(name));
    const auto& [f, e] = found;
    h.Update(name);
    h.Update(e->dtype);
    for (int64_t d : e->shape) h.Update(&d, sizeof d);
    const auto bytes = f->Bytes(*e);
    h.Update(bytes.data(), bytes.size());
  }
  ad->digest_.sha256 = h.Final();
  return std::shared_ptr<const Adapter>(std::move(ad));
}

}  // namespace kvserve::lora
