#include "compression/key_basis.h"

#include <cmath>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "base/absl_compat.h"
#include "base/check.h"
#include "compression/binary_io.h"
#include "kernels/cpu/low_rank_keys.h"

namespace kvserve::compression {
namespace {

constexpr uint32_t kPayloadF64 = 1;
constexpr uint32_t kMaxSourceLen = 4096;
// Bounds that keep a corrupt header from asking for absurd allocations.
constexpr uint32_t kMaxLayers = 1024;
constexpr uint32_t kMaxHeads = 1024;
constexpr uint32_t kMaxHeadDim = 1024;
constexpr double kInvFreqRelTol = 1e-6;   // as the TriAttention statistics
constexpr double kOrthoTol = 1e-6;        // |U^T U - I| per entry
constexpr double kVarianceTol = 1e-9;     // relative slack for "descending, >= 0"

}  // namespace

double KeyBasis::explained(int layer, int head, int rank) const {
  const double* v = variance(layer, head);
  double total = 0.0, top = 0.0;
  for (int i = 0; i < head_dim; ++i) {
    total += v[i];
    if (i < rank) top += v[i];
  }
  return total > 0.0 ? top / total : 1.0;
}

absl::Status ValidateKeyBasis(const KeyBasis& b) {
  auto bad = [](const std::string& what) { return absl::InvalidArgumentError(absl::StrCat("key basis: ", what)); };
  if (b.num_layers <= 0 || b.num_kv_heads <= 0 || b.head_dim <= 0 || b.head_dim % 2 != 0) {
    return bad(absl::StrCat("bad shape (layers ", b.num_layers, ", kv heads ", b.num_kv_heads, ", head_dim ",
                            b.head_dim, ")"));
  }
  const size_t heads = static_cast<size_t>(b.num_layers) * b.num_kv_heads;
  const size_t hd = static_cast<size_t>(b.head_dim);
  if (b.inv_freq.size() != hd / 2 || b.means.size() != heads * hd || b.variances.size() != heads * hd ||
      b.axes.size() != heads * hd * hd) {
    return bad("array sizes do not match the shape");
  }
  if (b.source.size() > kMaxSourceLen) return bad(absl::StrCat("source text over ", kMaxSourceLen, " bytes"));
  for (double f : b.inv_freq) {
    if (!std::isfinite(f) || f <= 0.0) return bad("inv_freq must be finite and > 0");
  }
  for (double x : b.means) {
    if (!std::isfinite(x)) return bad("non-finite mean");
  }
  for (int l = 0; l < b.num_layers; ++l) {
    for (int h = 0; h < b.num_kv_heads; ++h) {
      const double* v = b.variance(l, h);
      const double slack = kVarianceTol * std::max(1.0, std::abs(v[0]));
      for (int i = 0; i < b.head_dim; ++i) {
        if (!std::isfinite(v[i]) || v[i] < -slack || (i > 0 && v[i] > v[i - 1] + slack)) {
          return bad(absl::StrCat("layer ", l, " head ", h, ": variances must be finite, >= 0 and descending"));
        }
      }
      for (int i = 0; i < b.head_dim; ++i) {
        for (int j = i; j < b.head_dim; ++j) {
          const double* a = b.axis(l, h, i);
          const double* c = b.axis(l, h, j);
          double dot = 0.0;
          for (int d = 0; d < b.head_dim; ++d) dot += a[d] * c[d];
          if (!std::isfinite(dot) || std::abs(dot - (i == j ? 1.0 : 0.0)) > kOrthoTol) {
            return bad(absl::StrCat("layer ", l, " head ", h, ": axes ", i, " and ", j, " are not orthonormal"));
          }
        }
      }
    }
  }
  return absl::OkStatus();
}

std::string SerializeKeyBasis(const KeyBasis& b) {
  KVS_CHECK(ValidateKeyBasis(b).ok(), ValidateKeyBasis(b).message());
  std::string out;
  out.reserve(48 + b.source.size() + 8 * (b.inv_freq.size() + b.means.size() + b.variances.size() + b.axes.size()));
  out.append(kKeyBasisMagic.data(), kKeyBasisMagic.size());
  PutU32(out, kKeyBasisVersion);
  PutU32(out, static_cast<uint32_t>(b.num_layers));
  PutU32(out, static_cast<uint32_t>(b.num_kv_heads));
  PutU32(out, static_cast<uint32_t>(b.head_dim));
  PutU32(out, static_cast<uint32_t>(b.key_point));
  PutU32(out, kPayloadF64);
  PutU64(out, static_cast<uint64_t>(b.num_tokens));
  PutU32(out, static_cast<uint32_t>(b.source.size()));
  out.append(b.source);
  for (double f : b.inv_freq) PutF64(out, f);
  const size_t hd = static_cast<size_t>(b.head_dim);
  for (int l = 0; l < b.num_layers; ++l) {
    for (int h = 0; h < b.num_kv_heads; ++h) {
      for (size_t d = 0; d < hd; ++d) PutF64(out, b.mean(l, h)[d]);
      for (size_t d = 0; d < hd; ++d) PutF64(out, b.variance(l, h)[d]);
      for (size_t d = 0; d < hd * hd; ++d) PutF64(out, b.axis(l, h, 0)[d]);
    }
  }
  PutU64(out, Fnv1a64(out));
  return out;
}

absl::StatusOr<KeyBasis> ParseKeyBasis(std::string_view bytes, std::string_view origin) {
  auto err = [&](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat(base::AsAbsl(origin), ": ", what));
  };
  ByteReader r(bytes);
  std::string_view magic;
  if (!r.Bytes(kKeyBasisMagic.size(), magic) || magic != kKeyBasisMagic) {
    return err("not a kvserve key basis file (bad magic)");
  }
  uint32_t version = 0, layers = 0, kv_heads = 0, head_dim = 0, point = 0, dtype = 0, source_len = 0;
  uint64_t tokens = 0;
  if (!r.U32(version)) return err("truncated header");
  if (version != kKeyBasisVersion) {
    return err(absl::StrCat("unsupported key basis version ", version, " (this build reads version ",
                            kKeyBasisVersion, ")"));
  }
  if (!r.U32(layers) || !r.U32(kv_heads) || !r.U32(head_dim) || !r.U32(point) || !r.U32(dtype) || !r.U64(tokens) ||
      !r.U32(source_len)) {
    return err("truncated header");
  }
  if (layers == 0 || layers > kMaxLayers || kv_heads == 0 || kv_heads > kMaxHeads || head_dim == 0 ||
      head_dim > kMaxHeadDim || head_dim % 2 != 0) {
    return err(absl::StrCat("implausible shape: ", layers, " layers, ", kv_heads, " KV heads, head_dim ", head_dim));
  }
  if (point != static_cast<uint32_t>(KeyPoint::kPostRope)) {
    return err(absl::StrCat("unsupported key point ", point, " (only 1 = post-RoPE)"));
  }
  if (dtype != kPayloadF64) return err(absl::StrCat("unsupported payload dtype ", dtype));
  if (source_len > kMaxSourceLen) return err(absl::StrCat("source text of ", source_len, " bytes is too long"));
  if (tokens > static_cast<uint64_t>(INT64_MAX)) return err("token count out of range");
  const uint64_t heads = static_cast<uint64_t>(layers) * kv_heads;
  const uint64_t per_head = 2ull * head_dim + static_cast<uint64_t>(head_dim) * head_dim;
  const uint64_t need = source_len + 8ull * (head_dim / 2) + 8ull * heads * per_head + 8ull;
  if (r.remaining() != need) {
    return err(absl::StrCat("size mismatch: ", r.remaining(), " bytes after the header, the header implies ", need,
                            r.remaining() < need ? " (truncated file?)" : " (trailing bytes?)"));
  }
  const size_t body_end = bytes.size() - 8;
  KeyBasis b;
  std::string_view src;
  r.Bytes(source_len, src);
  b.source = std::string(src);
  b.num_layers = static_cast<int>(layers);
  b.num_kv_heads = static_cast<int>(kv_heads);
  b.head_dim = static_cast<int>(head_dim);
  b.num_tokens = static_cast<int64_t>(tokens);
  b.inv_freq.resize(head_dim / 2);
  for (double& f : b.inv_freq) r.F64(f);
  const size_t hd = head_dim;
  b.means.resize(heads * hd);
  b.variances.resize(heads * hd);
  b.axes.resize(heads * hd * hd);
  for (size_t i = 0; i < heads; ++i) {
    for (size_t d = 0; d < hd; ++d) r.F64(b.means[i * hd + d]);
    for (size_t d = 0; d < hd; ++d) r.F64(b.variances[i * hd + d]);
    for (size_t d = 0; d < hd * hd; ++d) r.F64(b.axes[i * hd * hd + d]);
  }
  KVS_CHECK(r.pos() == body_end);
  uint64_t checksum = 0;
  r.U64(checksum);
  if (checksum != Fnv1a64(bytes.substr(0, body_end))) return err("checksum mismatch (corrupt file)");
  if (absl::Status st = ValidateKeyBasis(b); !st.ok()) return err(std::string(st.message()));
  return b;
}

absl::Status SaveKeyBasis(const KeyBasis& basis, const std::string& path) {
  KVS_RETURN_IF_ERROR(ValidateKeyBasis(basis));
  return WriteFileAtomically(SerializeKeyBasis(basis), path);
}

absl::StatusOr<KeyBasis> LoadKeyBasis(const std::string& path) {
  KVS_ASSIGN_OR_RETURN(std::string bytes, ReadWholeFile(path, "key basis"));
  return ParseKeyBasis(bytes, path);
}

absl::Status CheckCompatible(const KeyBasis& b, const model::ModelConfig& c, std::span<const float> inv_freq) {
  auto mismatch = [](const std::string& what) {
    return absl::FailedPreconditionError(absl::StrCat("key basis was calibrated for ", what,
                                                      "; recalibrate with `kvserve calibrate` for this model"));
  };
  if (b.num_layers != c.num_layers) return mismatch(absl::StrCat(b.num_layers, " layers, model has ", c.num_layers));
  if (b.num_kv_heads != c.num_kv_heads) {
    return mismatch(absl::StrCat(b.num_kv_heads, " KV heads, model has ", c.num_kv_heads));
  }
  if (b.head_dim != c.head_dim) return mismatch(absl::StrCat("head_dim ", b.head_dim, ", model has ", c.head_dim));
  if (inv_freq.size() != b.inv_freq.size()) {
    return mismatch(absl::StrCat(b.inv_freq.size(), " RoPE frequencies, model has ", inv_freq.size()));
  }
  for (size_t f = 0; f < inv_freq.size(); ++f) {
    const double want = inv_freq[f];
    if (std::abs(b.inv_freq[f] - want) > kInvFreqRelTol * std::abs(want)) {
      return mismatch(absl::StrCat("RoPE inv_freq[", f, "] = ", b.inv_freq[f], ", model has ", want,
                                   " (different rope_theta or rope scaling: post-RoPE keys differ)"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<KeyBasis> LoadKeyBasisForModel(const std::string& path, const model::ModelConfig& config,
                                              std::span<const float> inv_freq) {
  KVS_ASSIGN_OR_RETURN(KeyBasis basis, LoadKeyBasis(path));
  KVS_RETURN_IF_ERROR(CheckCompatible(basis, config, inv_freq));
  return basis;
}

std::string KeyBasisPathFor(const std::string& configured, const std::string& model_dir) {
  return configured.empty() ? (std::filesystem::path(model_dir) / "key_basis.bin").string() : configured;
}

absl::StatusOr<PackedKeyBasis> PackedKeyBasis::Create(const KeyBasis& b, int rank) {
  if (rank < 1 || rank > b.head_dim) {
    return absl::InvalidArgumentError(
        absl::StrCat("key rank ", rank, ": must be in [1, head_dim = ", b.head_dim, "]"));
  }
  PackedKeyBasis p;
  p.rank_ = rank;
  const size_t per_head = kernels::cpu::LowRankHeadFloats(b.head_dim, rank);
  const size_t per_layer = per_head * static_cast<size_t>(b.num_kv_heads);
  p.data_.resize(per_layer * static_cast<size_t>(b.num_layers));
  for (int l = 0; l < b.num_layers; ++l) {
    for (int h = 0; h < b.num_kv_heads; ++h) {
      float* dst = p.data_.data() + static_cast<size_t>(l) * per_layer + static_cast<size_t>(h) * per_head;
      for (int d = 0; d < b.head_dim; ++d) dst[d] = static_cast<float>(b.mean(l, h)[d]);
      for (int j = 0; j < rank; ++j) {
        for (int d = 0; d < b.head_dim; ++d) {
          dst[static_cast<size_t>(1 + j) * b.head_dim + d] = static_cast<float>(b.axis(l, h, j)[d]);
        }
      }
    }
  }
  for (int l = 0; l < b.num_layers; ++l) p.layers_.push_back(p.data_.data() + static_cast<size_t>(l) * per_layer);
  return p;
}

}  // namespace kvserve::compression
