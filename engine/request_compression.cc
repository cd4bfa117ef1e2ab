#include "engine/request_compression.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "base/absl_compat.h"
#include "base/check.h"
#include "config/fields.h"

namespace kvserve::engine {

using config::CompressionPolicyKind;

int64_t ResolvedCompression::footprint(int64_t prompt_tokens, int64_t max_tokens) const {
  const int64_t uncompressed = prompt_tokens + max_tokens;
  if (!compressing() || auto_mode) return uncompressed;
  const int64_t target =
      std::max(compression::TargetLength(params), compression::FirstEvictableSlot(params));
  int64_t bound = target + compression::SlackLength(params) + max_chunk;
  // Rounds run after decode steps (unless compress_prefill), and snapkv scores at the end of
  // prefill, so the whole prompt is held once before the first round.
  if (params.kind == CompressionPolicyKind::kSnapKv || !params.compress_prefill) {
    bound = std::max(bound, prompt_tokens + max_chunk);
  }
  return std::min(uncompressed, bound);
}

int64_t ResolvedCompression::reported_budget() const {
  return compressing() ? compression::TargetLength(params) : 0;
}

absl::Status CheckRequestPrecision(const CompressionRequest& req, const config::CacheConfig& cache,
                                   const config::TenantConfig* tenant) {
  const config::KvDtype pool[2] = {config::EffectiveKDtype(cache), config::EffectiveVDtype(cache)};
  const std::optional<config::KvDtype> asked[2] = {req.k_dtype, req.v_dtype};
  const char* const field[2] = {"kv_compression.k_dtype", "kv_compression.v_dtype"};
  const char* const setting[2] = {"cache.k_dtype", "cache.v_dtype"};
  const char* const side[2] = {"keys", "values"};
  for (int kv = 0; kv < 2; ++kv) {
    if (!asked[kv]) continue;
    const std::string name(config::Name(*asked[kv]));
    if (tenant != nullptr && !tenant->allowed_kv_dtypes.empty() &&
        std::find(tenant->allowed_kv_dtypes.begin(), tenant->allowed_kv_dtypes.end(), *asked[kv]) ==
            tenant->allowed_kv_dtypes.end()) {
      return absl::PermissionDeniedError(absl::StrCat(field[kv], ": tenant '", tenant->name,
                                                      "' may not use KV precision '", name, "'"));
    }
    if (*asked[kv] != pool[kv]) {
      return absl::InvalidArgumentError(
          absl::StrCat(field[kv], "=", name, ": this server's KV pool stores ", side[kv], " as ",
                       base::AsAbsl(config::Name(pool[kv])), " (", setting[kv],
                       "); a request can ask only for the pool's precision"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::pair<config::KvDtype, config::KvDtype>> ResolvePrecision(
    const CompressionRequest& req, const config::CacheConfig& cache,
    const config::TenantConfig* tenant) {
  KVS_RETURN_IF_ERROR(CheckRequestPrecision(req, cache, tenant));
  const config::KvDtype pool[2] = {config::EffectiveKDtype(cache), config::EffectiveVDtype(cache)};
  const std::optional<config::KvDtype> asked[2] = {req.k_dtype, req.v_dtype};
  std::optional<config::KvDtype> tenant_default[2];
  if (tenant != nullptr) {
    tenant_default[0] = tenant->k_dtype;
    tenant_default[1] = tenant->v_dtype;
  }
  const char* const setting[2] = {"k_dtype", "v_dtype"};
  config::KvDtype out[2];
  for (int kv = 0; kv < 2; ++kv) {
    out[kv] = asked[kv] ? *asked[kv] : tenant_default[kv].value_or(pool[kv]);
    if (!asked[kv] && tenant_default[kv] && *tenant_default[kv] != pool[kv]) {
      return absl::FailedPreconditionError(absl::StrCat(
          "tenant '", tenant->name, "' default ", setting[kv], "=",
          base::AsAbsl(config::Name(*tenant_default[kv])), ": this server's KV pool holds ",
          base::AsAbsl(config::Name(pool[kv])), " (cache.", setting[kv], ")"));
    }
  }
  return std::make_pair(out[0], out[1]);
}

absl::Status ResolveDemotion(const CompressionRequest& req, const config::CacheConfig& cache,
                             const config::TenantConfig* tenant,
                             compression::PolicyParams& params) {
  params.demote_tokens.fill(0);
  std::vector<config::KvDtype> seen;
  for (const auto& [dtype, tokens] : req.demote) {
    const std::string name(config::Name(dtype));
    const std::string field = absl::StrCat("kv_compression.demote.", name);
    if (std::find(seen.begin(), seen.end(), dtype) != seen.end()) {
      return absl::InvalidArgumentError(absl::StrCat(field, ": given twice"));
    }
    seen.push_back(dtype);
    if (tokens < 0)
      return absl::InvalidArgumentError(absl::StrCat(field, ": must be >= 0 tokens, got ", tokens));
    if (tenant != nullptr && !tenant->allowed_kv_dtypes.empty() &&
        std::find(tenant->allowed_kv_dtypes.begin(), tenant->allowed_kv_dtypes.end(), dtype) ==
            tenant->allowed_kv_dtypes.end()) {
      return absl::PermissionDeniedError(absl::StrCat(field, ": tenant '", tenant->name,
                                                      "' may not use KV precision '", name, "'"));
    }
    const auto& tiers = cache.demote_dtypes;
    const auto it = std::find(tiers.begin(), tiers.end(), dtype);
    if (cache.demote_kv_bytes == 0 || it == tiers.end()) {
      std::string have;
      for (config::KvDtype d : tiers)
        absl::StrAppend(&have, have.empty() ? "" : ", ", base::AsAbsl(config::Name(d)));
      return absl::InvalidArgumentError(absl::StrCat(
          field, ": this server has no ", name, " demotion tier (",
          cache.demote_kv_bytes == 0 ? std::string("cache.demote_kv_bytes=0: demotion is off")
                                     : absl::StrCat("cache.demote_dtypes: ", have),
          "); tiers hold lower precisions than the pool's"));
    }
    params.demote_tokens[static_cast<size_t>(it - tiers.begin())] = tokens;
  }
  if (req.demote_lowrank) {
    const char* field = "kv_compression.demote.lowrank";
    const int64_t tokens = *req.demote_lowrank;
    if (tokens < 0)
      return absl::InvalidArgumentError(absl::StrCat(field, ": must be >= 0 tokens, got ", tokens));
    if (cache.demote_kv_bytes == 0 || cache.lowrank_key_rank == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": this server has no low-rank key tier (",
                       cache.demote_kv_bytes == 0 ? "cache.demote_kv_bytes=0: demotion is off"
                                                  : "cache.lowrank_key_rank=0",
                       ")"));
    }
    // The tier stores key coefficients and values in these dtypes: a tenant limited to some
    // precisions must allow both.
    for (config::KvDtype d : {cache.lowrank_k_dtype, cache.lowrank_v_dtype}) {
      if (tenant != nullptr && !tenant->allowed_kv_dtypes.empty() &&
          std::find(tenant->allowed_kv_dtypes.begin(), tenant->allowed_kv_dtypes.end(), d) ==
              tenant->allowed_kv_dtypes.end()) {
        return absl::PermissionDeniedError(
            absl::StrCat(field, ": tenant '", tenant->name, "' may not use KV precision '",
                         base::AsAbsl(config::Name(d)), "' (the low-rank tier's)"));
      }
    }
    params.demote_tokens[cache.demote_dtypes.size()] = tokens;
  }
  return absl::OkStatus();
}

absl::StatusOr<ResolvedCompression> ResolveCompression(const RequestSpec& spec,
                                                       const config::Config& config,
                                                       const config::TenantConfig* tenant,
                                                       const compression::PolicyContext* context) {
  const CompressionRequest& req = spec.compression;
  // Request > tenant > server: the tenant's defaults folded into the server's first.
  const config::CompressionConfig defaults = config::EffectiveCompression(config, tenant);
  CompressionPolicyKind kind = defaults.default_policy;
  if (req.policy) kind = *req.policy;
  const std::string name(config::Name(kind));
  if (tenant != nullptr && !tenant->allowed_policies.empty() &&
      std::find(tenant->allowed_policies.begin(), tenant->allowed_policies.end(), kind) ==
          tenant->allowed_policies.end()) {
    return absl::PermissionDeniedError(absl::StrCat("kv_compression.policy: tenant '", tenant->name,
                                                    "' may not use policy '", name, "'"));
  }
  KVS_ASSIGN_OR_RETURN(const auto precision, ResolvePrecision(req, config.cache, tenant));
  ResolvedCompression r;
  r.k_dtype = precision.first;
  r.v_dtype = precision.second;
  r.requested = kind;
  r.audit = req.audit;
  if (kind == CompressionPolicyKind::kFull) {
    if (!req.demote.empty() || req.demote_lowrank) {
      return absl::InvalidArgumentError(
          "kv_compression.demote: needs a compressing policy (triattention); policy full keeps "
          "every token exact");
    }
    return r;
  }

  r.auto_mode = kind == CompressionPolicyKind::kAuto;
  const CompressionPolicyKind concrete = r.auto_mode ? CompressionPolicyKind::kTriAttention : kind;
  if (context == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("kv_compression.policy: '", name,
                     "' is not available on this server (no compression support)"));
  }
  if (context->full_only_reason != nullptr) {
    // `auto` runs full; a named policy is refused with the reason.
    if (r.auto_mode) {
      r.auto_mode = false;
      return r;
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "kv_compression.policy: '", name,
        "' is not available for this model: ", context->full_only_reason, " (docs/models.md)"));
  }
  if (concrete == CompressionPolicyKind::kTriAttention && context->triattention_stats == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("kv_compression.policy: '", name,
                     "' needs TriAttention statistics and none are loaded; run "
                     "`kvserve calibrate` and set compression.stats_path"));
  }
  if (req.budget && req.ratio) {
    return absl::InvalidArgumentError("kv_compression: give either budget or ratio, not both");
  }
  const int64_t prompt = static_cast<int64_t>(spec.prompt_tokens.size());
  compression::PolicyParams p = compression::ParamsFromConfig(defaults, concrete, prompt);
  if (req.budget) p.budget = *req.budget;
  if (req.ratio) {
    // A fraction of everything the request can see: ratio 0.25 is 4x compression at the end.
    p.budget = std::max<int64_t>(
        1, static_cast<int64_t>(std::ceil(*req.ratio * (prompt + spec.max_tokens))));
  }
  if (req.divide_length) p.divide_length = *req.divide_length;
  if (req.window) p.window = *req.window;
  if (req.sinks) p.sinks = *req.sinks;
  if (req.protect_prompt) p.protect_prompt = *req.protect_prompt;
  KVS_RETURN_IF_ERROR(ResolveDemotion(req, config.cache, tenant, p));
  absl::Status valid = compression::ValidateParams(p);
  if (valid.ok()) valid = compression::CheckWindowBudget(p, *context);
  if (!valid.ok()) {
    if (!r.auto_mode) return valid;
    // `auto` with settings that cannot compress this prompt (e.g. a protected prompt longer
    // than the budget) runs uncompressed rather than failing a request that asked for none.
    r.params.kind = CompressionPolicyKind::kFull;
    r.auto_mode = false;
    return r;
  }
  if (spec.n > 1 && compression::FirstEvictableSlot(p) < prompt) {
    return absl::InvalidArgumentError(
        "kv_compression.protect_prompt: n > 1 needs the prompt protected (the samples share the "
        "prompt's "
        "KV blocks, which a round would move)");
  }
  r.params = p;
  r.max_chunk = config.compression.max_prefill_chunk;
  r.compressed_layers = context->num_scored_layers();
  return r;
}

uint64_t HashTokenIds(std::span<const int32_t> ids) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (int32_t id : ids) {
    const uint32_t v = static_cast<uint32_t>(id);
    for (int b = 0; b < 4; ++b) {
      h ^= (v >> (8 * b)) & 0xffu;
      h *= 0x100000001b3ULL;
    }
  }
  return h;
}

CompressionAccount::CompressionAccount(const ResolvedCompression& resolved)
    : audit_(resolved.audit) {
  summary_.policy = std::string(config::Name(resolved.requested));
  summary_.budget = resolved.reported_budget();
  summary_.compressed_layers = resolved.compressed_layers;
}

void CompressionAccount::OnScheduled(int64_t kv_len, int64_t seen, int64_t kv_bytes) {
  summary_.peak_kv_tokens = std::max(summary_.peak_kv_tokens, kv_len);
  summary_.peak_kv_bytes = std::max(summary_.peak_kv_bytes, kv_bytes);
  seen_ = std::max(seen_, seen);
}

void CompressionAccount::OnRound(const scheduler::Compaction& round,
                                 std::span<const int32_t> tokens) {
  ++summary_.rounds;
  summary_.demoted_tokens += round.demoted_tokens;
  summary_.evicted_tokens += static_cast<int64_t>(round.evicted_positions.size());
  summary_.evicted_prompt_tokens += round.evicted_prompt_tokens;
  if (!audit_) return;
  EvictionRecord rec;
  rec.round = static_cast<int>(summary_.rounds);
  rec.at_token = round.next_position;
  rec.positions = round.evicted_positions;
  scratch_.clear();
  for (int64_t p : round.evicted_positions) {
    KVS_CHECK(p >= 0 && p < static_cast<int64_t>(tokens.size()), "evicted position ", p, " of ",
              tokens.size());
    scratch_.push_back(tokens[static_cast<size_t>(p)]);
  }
  rec.token_ids_hash = HashTokenIds(scratch_);
  summary_.audit.push_back(std::move(rec));
}

CompressionSummary CompressionAccount::Summary() const {
  CompressionSummary s = summary_;
  s.compression_ratio = s.peak_kv_tokens > 0
                            ? static_cast<double>(seen_) / static_cast<double>(s.peak_kv_tokens)
                            : 1.0;
  s.kv_bytes_per_token =
      seen_ > 0 ? static_cast<double>(s.peak_kv_bytes) / static_cast<double>(seen_) : 0.0;
  return s;
}

}  // namespace kvserve::engine
