// The KV compression of one request: which policy and settings it runs with (resolved once at
// Submit: request > tenant > server defaults) and what the rounds did to it (the summary in
// usage.kv_compression and the optional audit record).
//
//   RequestSpec.compression ─────────────┐
//   tenant default_policy, budget, ──────┼─► ResolveCompression ─► ResolvedCompression (value)
//     window, k_dtype, v_dtype           │        policy `auto` → triattention params + auto_mode
//   config.compression, cache.k/v_dtype ─┘
//                                      ratio → budget = ceil(ratio * (prompt + max_tokens))
//
//   Compaction (runner, per round) ─► CompressionAccount::OnRound ─► CompressionSummary
//
// The audit hash lets an auditor recompute what the model could no longer see: FNV-1a 64
// over the evicted token ids in position order, each id as 4 little-endian bytes.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "compression/compression_policy.h"
#include "compression/policy_params.h"
#include "config/config.h"
#include "engine/request_spec.h"
#include "engine/request_types.h"
#include "scheduler/step_plan.h"

namespace kvserve::engine {

struct ResolvedCompression {
  config::CompressionPolicyKind requested =
      config::CompressionPolicyKind::kFull;  // label (may be auto)
  compression::PolicyParams params;          // concrete kind: auto runs triattention under pressure
  bool auto_mode = false;
  bool audit = false;
  int32_t max_chunk = 0;  // prefill chunk cap; 0 for full
  // Layers a round may evict from: every layer but a hybrid model's window layers, which keep
  // their latest tokens (compression_policy.h); 0 when the request runs full.
  int32_t compressed_layers = 0;
  // The precision the request's KV is held in: the request's, else its tenant's default, else
  // the pool's (one precision per pool today, so always the pool's once resolved).
  config::KvDtype k_dtype = config::KvDtype::kFp32;
  config::KvDtype v_dtype = config::KvDtype::kFp32;

  bool compressing() const { return params.kind != config::CompressionPolicyKind::kFull; }
  // Most KV tokens one sample of the request can hold: prompt + max_tokens for full (and
  // auto, which may run uncompressed), else the target plus the slack and one chunk (snapkv:
  // at least the prompt plus one chunk, since it first compresses at the end of prefill).
  int64_t footprint(int64_t prompt_tokens, int64_t max_tokens) const;
  // The budget reported in the summary: the length a round compresses back to (0: full).
  int64_t reported_budget() const;
};

// InvalidArgument naming the kv_compression field for bad settings; PermissionDenied when the
// tenant may not use the policy; FailedPrecondition when the policy needs what this server
// lacks (TriAttention statistics). `tenant` may be null (no tenant config); `context` may be
// null (only `full` available).
absl::StatusOr<ResolvedCompression> ResolveCompression(const RequestSpec& spec,
                                                       const config::Config& config,
                                                       const config::TenantConfig* tenant,
                                                       const compression::PolicyContext* context);

// The request's KV precision (kv_compression.kv_dtype / k_dtype / v_dtype) against the pool's
// and the tenant's allowed_kv_dtypes: PermissionDenied for a precision the tenant may not use,
// InvalidArgument naming the field for one the pool does not hold (one precision per pool
// today: a request may name the pool's own, nothing else). Asking for nothing is always OK.
absl::Status CheckRequestPrecision(const CompressionRequest& req, const config::CacheConfig& cache,
                                   const config::TenantConfig* tenant);

// The request's K and V precision, request > tenant default > pool: CheckRequestPrecision for
// what the request names; FailedPrecondition naming the tenant setting for a tenant default the
// pool does not hold (the config loader refuses those, so only a hand-built config gets here).
absl::StatusOr<std::pair<config::KvDtype, config::KvDtype>> ResolvePrecision(
    const CompressionRequest& req, const config::CacheConfig& cache,
    const config::TenantConfig* tenant);

// kv_compression.demote against the server's demotion tiers (cache.demote_dtypes) and the
// tenant's allowed_kv_dtypes: fills params.demote_tokens (tier order). InvalidArgument naming
// kv_compression.demote.<dtype> for a dtype the server has no tier of, a repeated dtype or a
// negative count; PermissionDenied for a precision the tenant may not use.
absl::Status ResolveDemotion(const CompressionRequest& req, const config::CacheConfig& cache,
                             const config::TenantConfig* tenant, compression::PolicyParams& params);

// FNV-1a 64 of token ids (4 little-endian bytes each), in order.
uint64_t HashTokenIds(std::span<const int32_t> ids);

// Accounting of sample 0 of a request (all samples share the policy).
class CompressionAccount {
 public:
  explicit CompressionAccount(const ResolvedCompression& resolved);
  // A step wrote KV: the sequence holds kv_len slots (kv_bytes of KV blocks, demotion tiers
  // included) and has seen `seen` tokens.
  void OnScheduled(int64_t kv_len, int64_t seen, int64_t kv_bytes = 0);
  // A round ran; `tokens` are the sequence's token ids (position p holds tokens[p]).
  void OnRound(const scheduler::Compaction& round, std::span<const int32_t> tokens);
  CompressionSummary Summary() const;

 private:
  CompressionSummary summary_;
  bool audit_ = false;
  int64_t seen_ = 0;
  std::vector<int32_t> scratch_;
};

}  // namespace kvserve::engine
