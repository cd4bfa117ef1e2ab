#include "compression/policy_factory.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "compression/h2o_policy.h"
#include "compression/snapkv_policy.h"
#include "compression/streaming_llm_policy.h"
#include "compression/triattention_policy.h"
#include "compression/triattention_stats.h"

namespace kvserve::compression {
namespace {

// `full`: keeps everything. Due() is false (target 0), so Run() is never asked to select.
class FullPolicy final : public CompressionPolicy {
 public:
  FullPolicy(const PolicyParams& params, const PolicyContext& context)
      : CompressionPolicy(params, context) {}
  SlotState NewSlotState() const override { return SlotState(); }

 protected:
  absl::Status SelectKeep(const RoundInput&, int64_t, int64_t, std::span<int32_t>,
                          RoundResult&) override {
    return absl::InternalError("full policy asked to select");
  }
};

absl::Status CheckContext(const PolicyContext& c) {
  if (c.clock == nullptr)
    return absl::InvalidArgumentError("compression: PolicyContext needs a clock");
  if (c.num_layers <= 0 || c.num_q_heads <= 0 || c.num_kv_heads <= 0 || c.head_dim <= 0 ||
      c.head_dim % 2 != 0 || c.num_q_heads % c.num_kv_heads != 0) {
    return absl::InvalidArgumentError("compression: PolicyContext has a bad model shape");
  }
  if (!c.layer_window.empty() && static_cast<int>(c.layer_window.size()) != c.num_layers) {
    return absl::InvalidArgumentError(
        "compression: PolicyContext::layer_window needs one window per layer");
  }
  if (static_cast<int>(c.rope_inv_freq.size()) != c.head_dim / 2) {
    return absl::InvalidArgumentError(
        "compression: PolicyContext needs the model's RoPE table (head_dim / 2)");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<CompressionPolicy>> CreatePolicy(const PolicyParams& params,
                                                                const PolicyContext& context) {
  KVS_RETURN_IF_ERROR(ValidateParams(params));
  KVS_RETURN_IF_ERROR(CheckContext(context));
  KVS_RETURN_IF_ERROR(CheckWindowBudget(params, context));
  using config::CompressionPolicyKind;
  if (context.full_only_reason != nullptr && params.kind != CompressionPolicyKind::kFull) {
    return absl::FailedPreconditionError(
        absl::StrCat("kv_compression: not available for this model: ", context.full_only_reason));
  }
  switch (params.kind) {
    case CompressionPolicyKind::kFull:
      return std::make_unique<FullPolicy>(params, context);
    case CompressionPolicyKind::kTriAttention: {
      const TriAttentionStats* s = context.triattention_stats;
      if (s == nullptr) {
        return absl::FailedPreconditionError(
            "triattention needs calibration statistics (compression.stats_path; create them with "
            "`kvserve "
            "calibrate`)");
      }
      if (s->num_layers != context.num_layers || s->num_q_heads != context.num_q_heads ||
          s->num_kv_heads != context.num_kv_heads || s->head_dim != context.head_dim) {
        return absl::FailedPreconditionError(absl::StrCat(
            "triattention stats shape (", s->num_layers, " layers, ", s->num_q_heads, "/",
            s->num_kv_heads, " heads, head_dim ", s->head_dim, ") does not match the model"));
      }
      return std::make_unique<TriAttentionPolicy>(params, context);
    }
    case CompressionPolicyKind::kStreamingLlm:
      return std::make_unique<StreamingLlmPolicy>(params, context);
    case CompressionPolicyKind::kSnapKv:
      return std::make_unique<SnapKvPolicy>(params, context);
    case CompressionPolicyKind::kH2O:
      return std::make_unique<H2OPolicy>(params, context);
    case CompressionPolicyKind::kAuto:
      break;  // rejected by ValidateParams
  }
  return absl::InvalidArgumentError("kv_compression.policy: unknown policy");
}

PolicyContext ContextFor(const model::ForwardModel& model, const TriAttentionStats* stats,
                         const base::Clock* clock) {
  return ContextFor(model.config(), model.rope_inv_freq(), stats, clock);
}

PolicyContext ContextFor(const model::ModelConfig& c, std::span<const float> rope_inv_freq,
                         const TriAttentionStats* stats, const base::Clock* clock) {
  PolicyContext ctx;
  ctx.num_layers = c.num_layers;
  ctx.num_q_heads = c.num_heads;
  ctx.num_kv_heads = c.num_kv_heads;
  ctx.head_dim = c.head_dim;
  ctx.rope_inv_freq = rope_inv_freq;
  ctx.max_context = c.max_context();
  if (c.window_binds()) {
    ctx.layer_window = c.layer_window;
    for (int32_t w : c.layer_window) {
      if (w > 0 && w < c.max_context())
        ctx.binding_window = std::max<int64_t>(ctx.binding_window, w);
    }
  }
  if (c.window_binds() && c.kv_window() > 0) {
    ctx.full_only_reason =
        "every layer attends a sliding window, which already bounds its KV (blocks leave with the "
        "window)";
  } else if (c.rotary_dim != c.head_dim) {
    ctx.full_only_reason =
        "its partial rotary embedding leaves dims the policies' RoPE analysis does not cover";
  }
  ctx.triattention_stats = stats;
  ctx.clock = clock;
  return ctx;
}

}  // namespace kvserve::compression
