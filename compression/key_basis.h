// Low-rank key bases (issue 18): per (layer, KV head) the principal axes of the model's
// post-RoPE keys and the second moment of the post-RoPE queries that read them, measured
// offline over calibration text next to the TriAttention statistics (compression/key_pca.h,
// `kvserve calibrate`). A demotion tier of rank r stores each key as r coefficients
// (kernels/cpu/low_rank_keys.h); the file keeps every axis, so the rank (and the kind of
// basis) is a serving choice (cache.lowrank_key_rank, cache.lowrank_basis), not a calibration one.
//
// Two bases of rank r come out of one file (PackedKeyBasis):
//   pca:   the top-r axes U of the key covariance C (Loki): the best rank-r fit of the keys,
//          P = R = U^T. Variance is not what attention reads, though: a direction with little
//          key variance can carry the score differences a sharp head looks for.
//   query: minimises the expected score error E_q E_k (q . (k - k^))^2 instead. With
//          S = E[q q^T] (queries of the KV head's group) and W = S^(1/2), that is the PCA of the
//          whitened keys W k: V = top-r eigenvectors of W C W, P = V^T W, R = V^T W^-1
//          (P R^T = I; small eigenvalues of S are floored at 1e-6 of the largest).
//
// Why post-RoPE: keys sit in the cache rotated by their own positions and queries arrive
// rotated by theirs; a basis of the rotated keys makes q . k^ = q . mu + (U^T q) . c hold with
// no position anywhere, for attention and for TriAttention's virtual queries alike (Loki
// reports post-rotary keys as low-rank as pre-rotary ones). A pre-RoPE basis would have to be
// rotated per position before every dot product.
//
// File format v1 (little-endian, no padding):
//
//   off  size  field
//   0    8     magic "KVSKBASE"
//   8    4     u32 version = 1
//   12   4     u32 num_layers
//   16   4     u32 num_kv_heads
//   20   4     u32 head_dim                (even)
//   24   4     u32 key_point               1 = post-RoPE (keys as the cache holds them)
//   28   4     u32 payload_dtype           1 = float64
//   32   8     u64 num_tokens              key rows per (layer, KV head) the PCA is over
//   40   4     u32 source_len (<= 4096), then source_len bytes of UTF-8 provenance text
//   ..   8*F   f64 inv_freq[head_dim / 2]  the model's RoPE table at calibration time
//   ..         per (layer, KV head), layer-major:
//                f64 mean[head_dim]
//                f64 variance[head_dim]          eigenvalues, descending, >= 0
//                f64 axes[head_dim][head_dim]    row i: unit eigenvector of variance[i]
//                f64 query_moment[head_dim][head_dim]  E[q q^T], post-RoPE, over every query
//                                                row of the KV head's query heads (symmetric)
//   ..   8     u64 FNV-1a-64 of every preceding byte
//
// Loading checks sizes against the header before reading, the checksum, finiteness, the
// ordering of the variances and the orthonormality of the axes (|U^T U - I| <= 1e-6), and
// never crashes on a bad file. CheckCompatible refuses a basis of another model (layers, KV
// heads, head_dim, RoPE table), the TriAttention statistics' checks.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/model_config.h"

namespace kvserve::compression {

inline constexpr uint32_t kKeyBasisVersion = 1;
inline constexpr std::string_view kKeyBasisMagic = "KVSKBASE";

enum class KeyPoint : uint32_t { kPostRope = 1 };

struct KeyBasis {
  int num_layers = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  KeyPoint key_point = KeyPoint::kPostRope;
  int64_t num_tokens = 0;
  std::string source;            // provenance; informational
  std::vector<double> inv_freq;  // [head_dim / 2]
  std::vector<double> means;     // [layers][kv heads][head_dim]
  std::vector<double> variances; // [layers][kv heads][head_dim], descending
  std::vector<double> axes;      // [layers][kv heads][head_dim][head_dim], row i = axis i
  std::vector<double> query_moments;  // [layers][kv heads][head_dim][head_dim], E[q q^T]

  size_t head_index(int layer, int head) const { return static_cast<size_t>(layer) * num_kv_heads + head; }
  const double* mean(int layer, int head) const { return means.data() + head_index(layer, head) * head_dim; }
  const double* variance(int layer, int head) const { return variances.data() + head_index(layer, head) * head_dim; }
  const double* axis(int layer, int head, int i) const {
    return axes.data() + (head_index(layer, head) * head_dim + i) * head_dim;
  }
  const double* query_moment(int layer, int head) const {
    return query_moments.data() + head_index(layer, head) * head_dim * head_dim;
  }
  // Share of the head's key variance the top `rank` axes hold (1 for a head with none).
  double explained(int layer, int head, int rank) const;
};

absl::Status ValidateKeyBasis(const KeyBasis& basis);
std::string SerializeKeyBasis(const KeyBasis& basis);
// `origin` (usually the path) prefixes every error.
absl::StatusOr<KeyBasis> ParseKeyBasis(std::string_view bytes, std::string_view origin);
absl::Status SaveKeyBasis(const KeyBasis& basis, const std::string& path);  // atomic
absl::StatusOr<KeyBasis> LoadKeyBasis(const std::string& path);

// FailedPrecondition for a basis measured on another model ("key basis was calibrated for 4
// layers, model has 6").
absl::Status CheckCompatible(const KeyBasis& basis, const model::ModelConfig& config, std::span<const float> inv_freq);
absl::StatusOr<KeyBasis> LoadKeyBasisForModel(const std::string& path, const model::ModelConfig& config,
                                              std::span<const float> inv_freq);

// compression.key_basis_path when set, else <model_dir>/key_basis.bin (next to the stats; a
// model given as one GGUF file: beside the file).
std::string KeyBasisPathFor(const std::string& configured, const std::string& model_dir);

// The rank-r basis in the kernels' form (kernels/cpu/low_rank_keys.h): per layer, every KV
// head's float mean and top-r axes. What a low-rank tier's KvTierStorage::key_basis points at;
// must outlive it. Movable (the pointers stay valid: they point into one heap buffer).
enum class KeyBasisKind { kPca, kQueryAware };

class PackedKeyBasis {
 public:
  // InvalidArgument unless 1 <= rank <= head_dim; Internal if an eigen-solve fails.
  static absl::StatusOr<PackedKeyBasis> Create(const KeyBasis& basis, int rank, KeyBasisKind kind);
  PackedKeyBasis(PackedKeyBasis&&) = default;
  PackedKeyBasis& operator=(PackedKeyBasis&&) = default;
  PackedKeyBasis(const PackedKeyBasis&) = delete;  // layers_ points into data_
  PackedKeyBasis& operator=(const PackedKeyBasis&) = delete;

  int rank() const { return rank_; }
  const float* const* layers() const { return layers_.data(); }

 private:
  PackedKeyBasis() = default;
  int rank_ = 0;
  std::vector<float> data_;
  std::vector<const float*> layers_;
};

}  // namespace kvserve::compression
