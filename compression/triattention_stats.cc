#include "compression/triattention_stats.h"

#include <cmath>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "base/absl_compat.h"
#include "base/check.h"
#include "compression/binary_io.h"

namespace kvserve::compression {
namespace {

constexpr uint32_t kPayloadF64 = 1;
constexpr uint32_t kMaxSourceLen = 4096;
// Generous bounds that keep a corrupt header from asking for absurd allocations.
constexpr uint32_t kMaxLayers = 1024;
constexpr uint32_t kMaxHeads = 1024;
constexpr uint32_t kMaxHeadDim = 1024;
constexpr double kInvFreqRelTol = 1e-6;

}  // namespace

absl::Status ValidateStats(const TriAttentionStats& s) {
  if (s.num_layers <= 0 || s.num_q_heads <= 0 || s.num_kv_heads <= 0 || s.head_dim <= 0 || s.head_dim % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("triattention stats: bad shape (layers ", s.num_layers, ", q heads ",
                                                   s.num_q_heads, ", kv heads ", s.num_kv_heads, ", head_dim ",
                                                   s.head_dim, ")"));
  }
  if (s.num_q_heads % s.num_kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat("triattention stats: ", s.num_q_heads,
                                                   " query heads are not a multiple of ", s.num_kv_heads, " KV heads"));
  }
  if (static_cast<int>(s.inv_freq.size()) != s.num_freqs()) {
    return absl::InvalidArgumentError(absl::StrCat("triattention stats: ", s.inv_freq.size(), " inv_freq entries for ",
                                                   s.num_freqs(), " frequency pairs"));
  }
  const size_t expect = static_cast<size_t>(s.num_layers) * s.num_q_heads * s.num_freqs();
  if (s.entries.size() != expect) {
    return absl::InvalidArgumentError(
        absl::StrCat("triattention stats: ", s.entries.size(), " entries, expected ", expect));
  }
  if (!std::isfinite(s.attention_scaling) || s.attention_scaling <= 0.0) {
    return absl::InvalidArgumentError("triattention stats: attention_scaling must be finite and > 0");
  }
  for (double f : s.inv_freq) {
    if (!std::isfinite(f) || f <= 0.0) return absl::InvalidArgumentError("triattention stats: inv_freq must be > 0");
  }
  for (size_t i = 0; i < s.entries.size(); ++i) {
    const FreqStat& e = s.entries[i];
    if (!std::isfinite(e.a_re) || !std::isfinite(e.a_im) || !std::isfinite(e.m) || e.m < 0.0) {
      return absl::InvalidArgumentError(absl::StrCat("triattention stats: entry ", i, " is not finite or has M < 0"));
    }
  }
  if (s.source.size() > kMaxSourceLen) {
    return absl::InvalidArgumentError(absl::StrCat("triattention stats: source text over ", kMaxSourceLen, " bytes"));
  }
  return absl::OkStatus();
}

std::string SerializeStats(const TriAttentionStats& s) {
  KVS_CHECK(ValidateStats(s).ok(), ValidateStats(s).message());
  std::string out;
  out.reserve(64 + s.source.size() + 8 * (s.inv_freq.size() + 3 * s.entries.size()) + 8);
  out.append(kStatsMagic.data(), kStatsMagic.size());
  PutU32(out, kStatsVersion);
  PutU32(out, static_cast<uint32_t>(s.num_layers));
  PutU32(out, static_cast<uint32_t>(s.num_q_heads));
  PutU32(out, static_cast<uint32_t>(s.num_kv_heads));
  PutU32(out, static_cast<uint32_t>(s.head_dim));
  PutU32(out, static_cast<uint32_t>(s.num_freqs()));
  PutU32(out, static_cast<uint32_t>(s.rope_style));
  PutU32(out, kPayloadF64);
  PutF64(out, s.attention_scaling);
  PutU64(out, static_cast<uint64_t>(s.num_tokens));
  PutU32(out, static_cast<uint32_t>(s.source.size()));
  out.append(s.source);
  for (double f : s.inv_freq) PutF64(out, f);
  for (const FreqStat& e : s.entries) {
    PutF64(out, e.a_re);
    PutF64(out, e.a_im);
    PutF64(out, e.m);
  }
  PutU64(out, Fnv1a64(out));
  return out;
}

absl::StatusOr<TriAttentionStats> ParseStats(std::string_view bytes, std::string_view origin) {
  auto err = [&](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat(base::AsAbsl(origin), ": ", what));
  };
  ByteReader r(bytes);
  std::string_view magic;
  if (!r.Bytes(kStatsMagic.size(), magic) || magic != kStatsMagic) {
    return err("not a kvserve TriAttention stats file (bad magic)");
  }
  uint32_t version = 0, layers = 0, q_heads = 0, kv_heads = 0, head_dim = 0, freqs = 0, style = 0, dtype = 0,
           source_len = 0;
  if (!r.U32(version)) return err("truncated header");
  if (version != kStatsVersion) {
    return err(absl::StrCat("unsupported stats version ", version, " (this build reads version ", kStatsVersion, ")"));
  }
  TriAttentionStats s;
  uint64_t tokens = 0;
  if (!r.U32(layers) || !r.U32(q_heads) || !r.U32(kv_heads) || !r.U32(head_dim) || !r.U32(freqs) || !r.U32(style) ||
      !r.U32(dtype) || !r.F64(s.attention_scaling) || !r.U64(tokens) || !r.U32(source_len)) {
    return err("truncated header");
  }
  if (layers == 0 || layers > kMaxLayers || q_heads == 0 || q_heads > kMaxHeads || kv_heads == 0 ||
      kv_heads > kMaxHeads || head_dim == 0 || head_dim > kMaxHeadDim || head_dim % 2 != 0) {
    return err(absl::StrCat("implausible shape: ", layers, " layers, ", q_heads, " query heads, ", kv_heads,
                            " KV heads, head_dim ", head_dim));
  }
  if (freqs != head_dim / 2) {
    return err(absl::StrCat(freqs, " frequency pairs for head_dim ", head_dim, " (partial rotary is not supported)"));
  }
  if (style != static_cast<uint32_t>(RopeStyle::kHalf)) {
    return err(absl::StrCat("unsupported rope style ", style, " (only 1 = half / rotate_half)"));
  }
  if (dtype != kPayloadF64) return err(absl::StrCat("unsupported payload dtype ", dtype));
  if (source_len > kMaxSourceLen) return err(absl::StrCat("source text of ", source_len, " bytes is too long"));
  if (tokens > static_cast<uint64_t>(INT64_MAX)) return err("token count out of range");
  const uint64_t entries = static_cast<uint64_t>(layers) * q_heads * freqs;
  const uint64_t need = static_cast<uint64_t>(source_len) + 8ull * freqs + 24ull * entries + 8ull;
  if (r.remaining() != need) {
    return err(absl::StrCat("size mismatch: ", r.remaining(), " bytes after the header, the header implies ", need,
                            r.remaining() < need ? " (truncated file?)" : " (trailing bytes?)"));
  }
  const size_t body_end = bytes.size() - 8;
  std::string_view src;
  r.Bytes(source_len, src);
  s.source = std::string(src);
  s.num_layers = static_cast<int>(layers);
  s.num_q_heads = static_cast<int>(q_heads);
  s.num_kv_heads = static_cast<int>(kv_heads);
  s.head_dim = static_cast<int>(head_dim);
  s.rope_style = RopeStyle::kHalf;
  s.num_tokens = static_cast<int64_t>(tokens);
  s.inv_freq.resize(freqs);
  for (double& f : s.inv_freq) r.F64(f);
  s.entries.resize(static_cast<size_t>(entries));
  for (FreqStat& e : s.entries) {
    r.F64(e.a_re);
    r.F64(e.a_im);
    r.F64(e.m);
  }
  KVS_CHECK(r.pos() == body_end);
  if (!r.ChecksumMatches()) return err("checksum mismatch (corrupt file)");
  if (absl::Status st = ValidateStats(s); !st.ok()) return err(std::string(st.message()));
  return s;
}

absl::Status SaveStats(const TriAttentionStats& stats, const std::string& path) {
  KVS_RETURN_IF_ERROR(ValidateStats(stats));
  return WriteFileAtomically(SerializeStats(stats), path);
}

absl::StatusOr<TriAttentionStats> LoadStats(const std::string& path) {
  KVS_ASSIGN_OR_RETURN(std::string bytes, ReadWholeFile(path, "TriAttention stats"));
  return ParseStats(bytes, path);
}

absl::Status CheckCompatible(const TriAttentionStats& s, const model::ModelConfig& c, std::span<const float> inv_freq) {
  auto mismatch = [](const std::string& what) {
    return absl::FailedPreconditionError(
        absl::StrCat("triattention stats were calibrated for ", what,
                     "; recalibrate with `kvserve calibrate` for this model"));
  };
  if (s.num_layers != c.num_layers) {
    return mismatch(absl::StrCat(s.num_layers, " layers, model has ", c.num_layers));
  }
  if (s.num_q_heads != c.num_heads) {
    return mismatch(absl::StrCat(s.num_q_heads, " query heads, model has ", c.num_heads));
  }
  if (s.num_kv_heads != c.num_kv_heads) {
    return mismatch(absl::StrCat(s.num_kv_heads, " KV heads, model has ", c.num_kv_heads));
  }
  if (s.head_dim != c.head_dim) return mismatch(absl::StrCat("head_dim ", s.head_dim, ", model has ", c.head_dim));
  if (s.rope_style != RopeStyle::kHalf) return mismatch("an unsupported rope style, model uses half (rotate_half)");
  if (s.attention_scaling != 1.0) {
    return mismatch(absl::StrCat("attention scaling ", s.attention_scaling, ", model's RoPE has none (1)"));
  }
  if (static_cast<int>(inv_freq.size()) != s.num_freqs()) {
    return mismatch(absl::StrCat(s.num_freqs(), " RoPE frequencies, model has ", inv_freq.size()));
  }
  for (int f = 0; f < s.num_freqs(); ++f) {
    const double want = inv_freq[f];
    if (std::abs(s.inv_freq[f] - want) > kInvFreqRelTol * std::abs(want)) {
      return mismatch(absl::StrCat("RoPE inv_freq[", f, "] = ", s.inv_freq[f], ", model has ", want,
                                   " (different rope_theta or rope scaling)"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<TriAttentionStats> LoadStatsForModel(const std::string& path, const model::ModelConfig& config,
                                                    std::span<const float> inv_freq) {
  KVS_ASSIGN_OR_RETURN(TriAttentionStats stats, LoadStats(path));
  KVS_RETURN_IF_ERROR(CheckCompatible(stats, config, inv_freq));
  return stats;
}

std::string StatsPathFor(const std::string& configured, const std::string& model_dir) {
  if (!configured.empty()) return configured;
  // A model given as one file (GGUF): the statistics lie beside it.
  const std::filesystem::path m(model_dir);
  std::error_code ec;
  const std::filesystem::path dir = std::filesystem::is_regular_file(m, ec) ? m.parent_path() : m;
  return (dir / "triattention_stats.bin").string();
}

}  // namespace kvserve::compression
