#include "compression/key_basis.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "base/absl_compat.h"
#include "base/check.h"
#include "compression/binary_io.h"
#include "kernels/cpu/low_rank_keys.h"
#include "kernels/cpu/sym_eigen.h"

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
      b.axes.size() != heads * hd * hd || b.query_moments.size() != heads * hd * hd) {
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
      const double* qm = b.query_moment(l, h);
      for (int i = 0; i < b.head_dim; ++i) {
        const double scale = std::max(1.0, std::abs(qm[static_cast<size_t>(i) * hd + i]));
        if (!std::isfinite(qm[static_cast<size_t>(i) * hd + i]) || qm[static_cast<size_t>(i) * hd + i] < 0.0) {
          return bad(absl::StrCat("layer ", l, " head ", h, ": query moment diagonal must be finite and >= 0"));
        }
        for (int j = 0; j < b.head_dim; ++j) {
          const double x = qm[static_cast<size_t>(i) * hd + j], y = qm[static_cast<size_t>(j) * hd + i];
          if (!std::isfinite(x) || std::abs(x - y) > kVarianceTol * scale) {
            return bad(absl::StrCat("layer ", l, " head ", h, ": query moment is not finite and symmetric"));
          }
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
  out.reserve(48 + b.source.size() +
              8 * (b.inv_freq.size() + b.means.size() + b.variances.size() + 2 * b.axes.size()));
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
      for (size_t d = 0; d < hd * hd; ++d) PutF64(out, b.query_moment(l, h)[d]);
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
  const uint64_t per_head = 2ull * head_dim + 2ull * head_dim * head_dim;
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
  b.query_moments.resize(heads * hd * hd);
  for (size_t i = 0; i < heads; ++i) {
    for (size_t d = 0; d < hd; ++d) r.F64(b.means[i * hd + d]);
    for (size_t d = 0; d < hd; ++d) r.F64(b.variances[i * hd + d]);
    for (size_t d = 0; d < hd * hd; ++d) r.F64(b.axes[i * hd * hd + d]);
    for (size_t d = 0; d < hd * hd; ++d) r.F64(b.query_moments[i * hd * hd + d]);
  }
  KVS_CHECK(r.pos() == body_end);
  if (!r.ChecksumMatches()) return err("checksum mismatch (corrupt file)");
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
  if (!configured.empty()) return configured;
  // A model given as one file (GGUF): the basis lies beside it, as `kvserve calibrate` writes it
  // beside its statistics.
  const std::filesystem::path m(model_dir);
  std::error_code ec;
  const std::filesystem::path dir = std::filesystem::is_regular_file(m, ec) ? m.parent_path() : m;
  return (dir / "key_basis.bin").string();
}

namespace {

// The rank-r rows P (key projection) and R (reconstruction) of one head, [rank][hd] each.
absl::Status HeadProjection(const KeyBasis& b, int layer, int head, int rank, KeyBasisKind kind,
                            std::vector<double>& p, std::vector<double>& r) {
  const int hd = b.head_dim;
  const size_t n = static_cast<size_t>(hd);
  p.assign(static_cast<size_t>(rank) * n, 0.0);
  r.assign(static_cast<size_t>(rank) * n, 0.0);
  if (kind == KeyBasisKind::kPca) {
    for (int j = 0; j < rank; ++j) {
      std::copy_n(b.axis(layer, head, j), n, p.begin() + static_cast<std::ptrdiff_t>(j * n));
      std::copy_n(b.axis(layer, head, j), n, r.begin() + static_cast<std::ptrdiff_t>(j * n));
    }
    return absl::OkStatus();
  }
  // W = S^(1/2), W^-1 from S's eigen-decomposition, small eigenvalues floored.
  std::vector<double> s(b.query_moment(layer, head), b.query_moment(layer, head) + n * n);
  KVS_ASSIGN_OR_RETURN(kernels::cpu::SymmetricEigen se, kernels::cpu::EigenSymmetric(s, hd));
  const double floor = std::max(se.values[0], 0.0) * 1e-6 + 1e-30;
  std::vector<double> w(n * n, 0.0), w_inv(n * n, 0.0);
  for (size_t i = 0; i < n; ++i) {
    const double lam = std::max(se.values[i], floor);
    const double a = std::sqrt(lam), ai = 1.0 / std::sqrt(lam);
    const double* q = se.vectors.data() + i * n;
    for (size_t x = 0; x < n; ++x) {
      for (size_t y = 0; y < n; ++y) {
        w[x * n + y] += a * q[x] * q[y];
        w_inv[x * n + y] += ai * q[x] * q[y];
      }
    }
  }
  // C = U diag(variance) U^T, then M = W C W.
  std::vector<double> c(n * n, 0.0), wc(n * n, 0.0), m(n * n, 0.0);
  for (size_t i = 0; i < n; ++i) {
    const double v = b.variance(layer, head)[i];
    const double* u = b.axis(layer, head, static_cast<int>(i));
    for (size_t x = 0; x < n; ++x) {
      for (size_t y = 0; y < n; ++y) c[x * n + y] += v * u[x] * u[y];
    }
  }
  for (size_t x = 0; x < n; ++x)
    for (size_t k = 0; k < n; ++k)
      for (size_t y = 0; y < n; ++y) wc[x * n + y] += w[x * n + k] * c[k * n + y];
  for (size_t x = 0; x < n; ++x)
    for (size_t k = 0; k < n; ++k)
      for (size_t y = 0; y < n; ++y) m[x * n + y] += wc[x * n + k] * w[k * n + y];
  for (size_t x = 0; x < n; ++x)
    for (size_t y = x + 1; y < n; ++y) m[x * n + y] = m[y * n + x] = 0.5 * (m[x * n + y] + m[y * n + x]);
  KVS_ASSIGN_OR_RETURN(kernels::cpu::SymmetricEigen me, kernels::cpu::EigenSymmetric(m, hd));
  for (int j = 0; j < rank; ++j) {
    const double* v = me.vectors.data() + static_cast<size_t>(j) * n;
    for (size_t x = 0; x < n; ++x) {
      double pw = 0.0, rw = 0.0;
      for (size_t k = 0; k < n; ++k) {
        pw += w[x * n + k] * v[k];
        rw += w_inv[x * n + k] * v[k];
      }
      p[static_cast<size_t>(j) * n + x] = pw;
      r[static_cast<size_t>(j) * n + x] = rw;
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<PackedKeyBasis> PackedKeyBasis::Create(const KeyBasis& b, int rank, KeyBasisKind kind) {
  if (rank < 1 || rank > b.head_dim) {
    return absl::InvalidArgumentError(
        absl::StrCat("key rank ", rank, ": must be in [1, head_dim = ", b.head_dim, "]"));
  }
  PackedKeyBasis packed;
  packed.rank_ = rank;
  const size_t hd = static_cast<size_t>(b.head_dim);
  const size_t per_head = kernels::cpu::LowRankHeadFloats(b.head_dim, rank);
  const size_t per_layer = per_head * static_cast<size_t>(b.num_kv_heads);
  packed.data_.resize(per_layer * static_cast<size_t>(b.num_layers));
  std::vector<double> p, r;
  for (int l = 0; l < b.num_layers; ++l) {
    for (int h = 0; h < b.num_kv_heads; ++h) {
      KVS_RETURN_IF_ERROR(HeadProjection(b, l, h, rank, kind, p, r));
      float* dst = packed.data_.data() + static_cast<size_t>(l) * per_layer + static_cast<size_t>(h) * per_head;
      for (size_t d = 0; d < hd; ++d) dst[d] = static_cast<float>(b.mean(l, h)[d]);
      for (size_t i = 0; i < p.size(); ++i) dst[hd + i] = static_cast<float>(p[i]);
      for (size_t i = 0; i < r.size(); ++i) dst[hd + p.size() + i] = static_cast<float>(r[i]);
    }
  }
  for (int l = 0; l < b.num_layers; ++l) {
    packed.layers_.push_back(packed.data_.data() + static_cast<size_t>(l) * per_layer);
  }
  return packed;
}

}  // namespace kvserve::compression
