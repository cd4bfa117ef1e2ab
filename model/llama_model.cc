#include "model/llama_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/absl_compat.h"
#include "base/check.h"
#include "kernels/cpu/compute_pool.h"
#include "kernels/cpu/kv_quant.h"
#include "kernels/cpu/kv_write.h"
#include "kernels/cpu/packed_linear.h"
#include "kernels/cpu/paged_attention.h"
#include "kernels/cpu/quant/fp8_segment.h"
#include "kernels/cpu/rmsnorm.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/swiglu.h"
#include "model/forward_validation.h"
#include "model/load_model_config.h"
#include "model/lora_hooks.h"

namespace kvserve::model {
namespace {

// What config.json can ask for that this forward pass does not compute yet: refused at
// start-up with the field named, never approximated.
absl::Status CheckImplemented(const ModelConfig& c) {
  auto refuse = [&](std::string_view field) {
    return absl::UnimplementedError(
        absl::StrCat(c.architecture_name, ": ", base::AsAbsl(field),
                     " is not implemented by the CPU forward pass yet"));
  };
  // MoE layers add their experts straight into the residual (no Gemma sandwich norm).
  if (c.any_moe_layer() && c.sandwich_norms)
    return refuse("post_feedforward_layernorm on a MoE layer");
  return absl::OkStatus();
}

// Rounds the Gemma embedding normalizer sqrt(hidden) to the checkpoint's dtype, as Hugging
// Face builds it as a tensor of the hidden states' dtype.
float EmbeddingScale(const ModelConfig& c, WeightDtype dtype) {
  const float s = std::sqrt(static_cast<float>(c.hidden_size));
  switch (dtype) {
    case WeightDtype::kBf16:
      return kernels::cpu::Bf16ToFloat(kernels::cpu::FloatToBf16(s));
    case WeightDtype::kF16:
      return kernels::cpu::HalfToFloat(kernels::cpu::FloatToHalf(s));
    case WeightDtype::kF32:
      break;
  }
  return s;
}

// The RoPE angles of the step's positions for one table, times its attention factor.
void CosSin(const ForwardBatch& b, const RopeTable& table, int half, float* out) {
  const int64_t t = b.num_tokens();
  kernels::cpu::RopeCosSin(b.positions.data(), t, table.inv_freq.data(), half, out);
  if (table.attention_factor != 1.0f) {
    for (int64_t i = 0; i < t * 2 * half; ++i) out[i] *= table.attention_factor;
  }
}

// Per-head RMSNorm of `heads` heads of each row (Qwen3 / Gemma 3 q_norm and k_norm).
void HeadNorm(float* x, int64_t rows, int64_t stride, int heads, int head_dim, const float* w,
              float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    float* row = x + r * stride;
    kernels::cpu::RmsNorm(row, head_dim, w, row, head_dim, heads, head_dim, eps);
  }
}

absl::Status BatchError(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("forward batch: ", what));
}

}  // namespace

absl::StatusOr<std::unique_ptr<LlamaModel>> LlamaModel::Load(const std::string& model_dir,
                                                             const ModelOptions& options) {
  if (options.max_context < 0) return absl::InvalidArgumentError("max_context must be >= 0");
  KVS_ASSIGN_OR_RETURN(ModelSource source, OpenModelSource(model_dir));
  ModelConfig config = std::move(source.config);
  if (options.max_context > 0)
    config.served_context = std::min(config.served_context, options.max_context);
  KVS_ASSIGN_OR_RETURN(
      LlamaWeights weights,
      LlamaWeights::Load(
          config, std::move(source.checkpoint), options.pack_weights,
          WeightRange{options.layer_begin, options.layer_end > 0 ? options.layer_end : -1}));
  return Create(std::move(config), std::move(weights), options);
}

absl::StatusOr<std::unique_ptr<LlamaModel>> LlamaModel::Create(ModelConfig config,
                                                               LlamaWeights weights,
                                                               const ModelOptions& options) {
  if (options.max_tokens_per_step < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_tokens_per_step must be >= 1, got ", options.max_tokens_per_step));
  }
  if (options.threads < 0) return absl::InvalidArgumentError("threads must be >= 0");
  if (weights.num_layers() != config.num_layers) {
    return absl::InvalidArgumentError("weights and config disagree on the number of layers");
  }
  KVS_RETURN_IF_ERROR(CheckImplemented(config));
  const int layer_end = options.layer_end > 0 ? options.layer_end : config.num_layers;
  if (options.layer_begin < 0 || options.layer_begin >= layer_end ||
      layer_end > config.num_layers) {
    return absl::InvalidArgumentError(absl::StrCat("pipeline stage: layers [", options.layer_begin,
                                                   ", ", layer_end, ") are not inside the model's ",
                                                   config.num_layers, " layers"));
  }
  if ((options.layer_begin > 0 || layer_end < config.num_layers) && options.stage_link == nullptr) {
    return absl::InvalidArgumentError(
        "pipeline stage: a stage short of the first or last layer needs a stage link");
  }
  for (int i = 0; i < config.num_layers; ++i) {
    if (config.is_moe_layer(i) != (weights.layer(i).moe != nullptr)) {
      return absl::InvalidArgumentError(
          absl::StrCat("weights and config disagree on layer ", i, "'s experts"));
    }
  }
  return std::unique_ptr<LlamaModel>(
      new LlamaModel(std::move(config), std::move(weights), options));
}

LlamaModel::LlamaModel(ModelConfig config, LlamaWeights weights, const ModelOptions& options)
    : config_(std::move(config)),
      weights_(std::move(weights)),
      rope_(ComputeRopeTable(config_, config_.rope_theta, /*scaled=*/true)),
      local_rope_(config_.rope_local_theta
                      ? ComputeRopeTable(config_, *config_.rope_local_theta, /*scaled=*/false)
                      : RopeTable{}),
      threads_(kernels::cpu::SetComputeThreads(options.threads)),
      max_tokens_(options.max_tokens_per_step),
      logger_(options.logger),
      layer_begin_(options.layer_begin),
      layer_end_(options.layer_end > 0 ? options.layer_end : config_.num_layers),
      stage_link_(options.stage_link) {
  const size_t m = static_cast<size_t>(max_tokens_);
  const auto& c = config_;
  x_.resize(m * c.hidden_size);
  h_.resize(m * c.hidden_size);
  qkv_.resize(m * (c.q_size() + 2 * c.kv_size()));
  attn_.resize(m * c.q_size());
  if (c.any_dense_layer()) {
    gate_up_.resize(m * 2 * c.intermediate_size);
    act_.resize(m * c.intermediate_size);
  }
  if (c.any_moe_layer()) moe_ = std::make_unique<MoeLayer>(c, max_tokens_);
  cos_sin_.resize(m * c.head_dim);
  if (!local_rope_.inv_freq.empty()) cos_sin_local_.resize(m * c.head_dim);
  if (c.sandwich_norms) branch_.resize(m * c.hidden_size);
  const char* wdtype = weights_.bf16_projections()   ? "bf16"
                       : weights_.fp16_projections() ? "fp16"
                                                     : "fp32";
  size_t scratch = 0;
  for (const auto* v :
       {&x_, &h_, &qkv_, &attn_, &gate_up_, &act_, &cos_sin_, &cos_sin_local_, &branch_}) {
    scratch += v->size() * sizeof(float);
  }
  if (moe_ != nullptr) {
    scratch += moe_->scratch_bytes();
    logger_.info(
        "model %s: mixture of experts, %d of %d experts per token, %.1f M of %.1f M params active",
        c.architecture_name, c.moe.top_k, c.moe.num_experts,
        static_cast<double>(c.num_active_parameters()) * 1e-6,
        static_cast<double>(c.num_parameters()) * 1e-6);
  }
  if (c.fp8) {  // ---- FP8 checkpoints (hf_fp8_config.h) ----
    logger_.info("model %s: %s; F8_E4M3 projections kept at 8 bits, %s kernels",
                 c.architecture_name, c.fp8->Describe(),
                 kernels::cpu::quant::Fp8KernelName(kernels::cpu::quant::Fp8ProcessIsa()));
  }
  logger_.info(
      "model %s: %d layers, hidden %d, heads %d/%d x %d, vocab %d, %.1f M params, %s weights "
      "(%.1f MiB %s), step scratch %.1f MiB for %d rows, %d threads, %s attention",
      c.architecture_name, c.num_layers, c.hidden_size, c.num_heads, c.num_kv_heads, c.head_dim,
      c.vocab_size, static_cast<double>(c.num_parameters()) * 1e-6, wdtype,
      static_cast<double>(weights_.resident_bytes()) / (1 << 20),
      weights_.packed() ? "packed" : "norms only: a device backend holds the rest",
      static_cast<double>(scratch) / (1 << 20), max_tokens_, threads_,
      kernels::cpu::PagedAttentionKernelName());
}

absl::Status LlamaModel::Validate(const ForwardBatch& b, const KvCacheView& kv,
                                  std::span<float> logits,
                                  const ForwardObservers* observers) const {
  // A pipeline stage's pool holds its own layers only (KvLayoutFor).
  cache::KvLayout layout = kv.layout;
  if (layout.num_layers != layer_end_ - layer_begin_) {
    return BatchError("KV layout does not match the stage's layers");
  }
  layout.num_layers = config_.num_layers;
  KVS_RETURN_IF_ERROR(
      ValidateForwardBatch(config_, max_tokens_, b, layout, kv.num_blocks, kv.lower_tiers));
  KVS_RETURN_IF_ERROR(ValidateKvView(kv));
  KVS_RETURN_IF_ERROR(ValidateWindowTables(b, kv));
  KVS_RETURN_IF_ERROR(ValidateLora(config_, b));
  if (logits.size() < b.logits_rows.size() * static_cast<size_t>(config_.vocab_size)) {
    return BatchError("logits buffer too small");
  }
  return ValidateObservers(config_, b, observers);
}

int LlamaModel::PrepareWindowGroups(const ForwardBatch& b, const KvCacheView& kv) {
  if (kv.layer_group.empty()) return 0;
  int groups = 0;
  for (int16_t g : kv.layer_group) groups = std::max(groups, g + 1);
  const int num_seqs = b.num_seqs();
  const int64_t t = b.num_tokens();
  const int bs = kv.layout.block_size;
  window_offsets_.resize(static_cast<size_t>(groups) * (num_seqs + 1));
  window_slots_.resize(static_cast<size_t>(groups) * static_cast<size_t>(t));
  for (int j = 0; j < groups; ++j) {
    int32_t* offsets = window_offsets_.data() + static_cast<size_t>(j) * (num_seqs + 1);
    int64_t* slots = window_slots_.data() + static_cast<size_t>(j) * static_cast<size_t>(t);
    for (int s = 0; s < num_seqs; ++s) {
      // Only the starts are read: group j's table of sequence s is the j-th of its equal parts.
      const int32_t per_group =
          (b.window_table_offsets[s + 1] - b.window_table_offsets[s]) / groups;
      offsets[s] = b.window_table_offsets[s] + j * per_group;
      const int32_t* table = b.window_block_tables.data() + offsets[s];
      for (int32_t r = b.seq_starts[s]; r < b.seq_starts[s + 1]; ++r) {
        const int32_t p = b.positions[static_cast<size_t>(r)];
        slots[r] = static_cast<int64_t>(table[p / bs]) * bs + p % bs;
      }
    }
    offsets[num_seqs] = b.window_table_offsets[num_seqs];
  }
  return groups;
}

absl::Status LlamaModel::Forward(const ForwardBatch& b, const KvCacheView& kv,
                                 std::span<float> logits, const ForwardObservers* observers) {
  if (!weights_.packed()) {
    return absl::FailedPreconditionError(
        "model loaded without CPU weights (a device backend serves it)");
  }
  KVS_RETURN_IF_ERROR(Validate(b, kv, logits, observers));
  kernels::cpu::SetComputeThreads(threads_);
  const auto& c = config_;
  const int64_t t = b.num_tokens();
  const int d = c.hidden_size;
  const int q_size = c.q_size();
  const int kv_size = c.kv_size();
  const int qkv_stride = q_size + 2 * kv_size;
  const int inter = c.intermediate_size;
  const float scale = static_cast<float>(c.attention_scale);
  const bool want_mass = observers != nullptr && !observers->attention_mass.empty();

  const size_t ws_floats = kernels::cpu::PagedAttentionWorkspaceFloats(
      kv.layout, c.num_heads, kernels::cpu::ComputeThreads());
  if (attn_workspace_.size() < ws_floats) attn_workspace_.resize(ws_floats);  // once per layout
  if (want_mass) {
    if (lse_.size() < static_cast<size_t>(max_tokens_) * c.num_heads)
      lse_.resize(static_cast<size_t>(max_tokens_) * c.num_heads);
    std::fill(observers->attention_mass.begin(), observers->attention_mass.end(), 0.0f);
  }
  const kernels::cpu::PagedSeqs seqs{b.num_seqs(), b.seq_starts.data(), b.kv_lens.data(),
                                     b.block_table_offsets.data(), b.block_tables.data()};
  const int groups = PrepareWindowGroups(b, kv);

  if (!first_stage()) {
    // The previous stage's residual stream replaces the embedding.
    KVS_RETURN_IF_ERROR(
        stage_link_->ReceiveHidden(std::span<float>(x_.data(), static_cast<size_t>(t * d))));
  } else {
    weights_.EmbedRows(b.token_ids.data(), t, x_.data());
  }
  if (c.scale_embedding && first_stage()) {
    const float s = EmbeddingScale(c, weights_.embed_dtype());
    for (int64_t i = 0; i < t * d; ++i) x_[static_cast<size_t>(i)] *= s;
  }
  CosSin(b, rope_, c.rotary_dim / 2, cos_sin_.data());
  if (!cos_sin_local_.empty()) CosSin(b, local_rope_, c.rotary_dim / 2, cos_sin_local_.data());

  for (int layer = layer_begin_; layer < layer_end_; ++layer) {
    const LayerWeights& w = weights_.layer(layer);
    const int local = layer - layer_begin_;  // the stage's KV holds its layers only
    std::byte* data = kv.layer_data[local];
    float* scales = kv.layout.has_scales() ? kv.layer_scales[local] : nullptr;
    // A window layer of a layer group reads and writes its group's window tables.
    const int group = groups > 0 ? kv.layer_group[static_cast<size_t>(local)] : -1;
    const kernels::cpu::PagedSeqs layer_seqs =
        group < 0 ? seqs
                  : kernels::cpu::PagedSeqs{
                        b.num_seqs(), b.seq_starts.data(), b.window_kv_lens.data(),
                        window_offsets_.data() + static_cast<size_t>(group) * (b.num_seqs() + 1),
                        b.window_block_tables.data()};
    const int64_t* slot_mapping =
        group < 0 ? b.slot_mapping.data() : window_slots_.data() + static_cast<size_t>(group) * t;

    kernels::cpu::RmsNorm(x_.data(), d, w.input_norm, h_.data(), d, t, d, c.rms_norm_eps);
    Project(h_.data(), d, w.qkv, w.qkv_bias, qkv_.data(), qkv_stride, t, d, qkv_stride, false);
    AddLora(b, layer, LoraSite::kQkv, h_.data(), d, d, qkv_.data(), qkv_stride);
    if (c.qk_norm) {
      HeadNorm(qkv_.data(), t, qkv_stride, c.num_heads, c.head_dim, w.q_norm, c.rms_norm_eps);
      HeadNorm(qkv_.data() + q_size, t, qkv_stride, c.num_kv_heads, c.head_dim, w.k_norm,
               c.rms_norm_eps);
    }
    if (observers != nullptr && !observers->pre_rope_queries.empty()) {
      float* dst = observers->pre_rope_queries.data() + static_cast<int64_t>(layer) * t * q_size;
      for (int64_t i = 0; i < t; ++i)
        std::memcpy(dst + i * q_size, qkv_.data() + i * qkv_stride, q_size * sizeof(float));
    }
    float* q = qkv_.data();
    float* k = q + q_size;
    float* v = k + kv_size;
    // Gemma 3's sliding-window layers rotate with their own base.
    const float* angles = c.layer_window[static_cast<size_t>(layer)] > 0 && !cos_sin_local_.empty()
                              ? cos_sin_local_.data()
                              : cos_sin_.data();
    kernels::cpu::ApplyRope(q, t, c.num_heads, c.head_dim, c.rotary_dim, qkv_stride, angles);
    kernels::cpu::ApplyRope(k, t, c.num_kv_heads, c.head_dim, c.rotary_dim, qkv_stride, angles);
    kernels::cpu::WriteKv(kv.layout, data, scales, k, v, qkv_stride, slot_mapping, t);
    // The pool is tier 0; demotion tiers follow (a table without tier tags reads only the pool).
    kernels::cpu::KvTierView tiers[kernels::cpu::kMaxKvTiers];
    tiers[0] = {kv.layout, data, scales};
    const size_t num_tiers = 1 + kv.lower_tiers.size();
    for (size_t i = 1; i < num_tiers; ++i) {
      const kernels::cpu::KvTierStorage& st = kv.lower_tiers[i - 1];
      tiers[i] = {st.layout, st.layer_data[local],
                  st.layer_scales != nullptr ? st.layer_scales[local] : nullptr,
                  st.key_basis != nullptr ? st.key_basis[local] : nullptr};
    }
    const std::span<const kernels::cpu::KvTierView> tier_views(tiers, num_tiers);
    const kernels::cpu::AttentionVariant variant{c.layer_window[static_cast<size_t>(layer)],
                                                 static_cast<float>(c.attn_logit_softcap), w.sinks};
    // Window layers' rows are not scored (compression_policy.h), so their mass is not taken.
    const bool layer_mass = want_mass && group < 0;
    kernels::cpu::PagedAttentionTiered(tier_views, layer_seqs, q, qkv_stride, c.num_heads, scale,
                                       attn_.data(), q_size, layer_mass ? lse_.data() : nullptr,
                                       attn_workspace_.data(), attn_workspace_.size(), variant);
    if (layer_mass) {
      float* mass = observers->attention_mass.data() + static_cast<int64_t>(layer) * b.num_seqs() *
                                                           c.num_kv_heads * observers->mass_stride;
      kernels::cpu::AttentionMassTiered(tier_views, seqs, q, qkv_stride, c.num_heads, scale,
                                        lse_.data(), mass, observers->mass_stride,
                                        attn_workspace_.data(), attn_workspace_.size(), variant);
    }
    if (c.sandwich_norms) {
      // Gemma: x += norm(attn · Woᵀ), then x += norm(mlp(norm(x))).
      Project(attn_.data(), q_size, w.o, w.o_bias, branch_.data(), d, t, q_size, d, false);
      AddLora(b, layer, LoraSite::kO, attn_.data(), q_size, q_size, branch_.data(), d);
      kernels::cpu::RmsNorm(branch_.data(), d, w.post_attn_norm, branch_.data(), d, t, d,
                            c.rms_norm_eps);
      for (int64_t i = 0; i < t * d; ++i)
        x_[static_cast<size_t>(i)] += branch_[static_cast<size_t>(i)];
    } else {
      Project(attn_.data(), q_size, w.o, w.o_bias, x_.data(), d, t, q_size, d, true);
      AddLora(b, layer, LoraSite::kO, attn_.data(), q_size, q_size, x_.data(), d);
    }

    kernels::cpu::RmsNorm(x_.data(), d, w.pre_ff_norm, h_.data(), d, t, d, c.rms_norm_eps);
    if (w.moe != nullptr) {  // the experts add into the residual; the layer ends here
      moe_->Forward(*w.moe, h_.data(), t, x_.data(), b.lora, layer);
      continue;
    }
    Project(h_.data(), d, w.gate_up, nullptr, gate_up_.data(), 2 * inter, t, d, 2 * inter, false);
    AddLora(b, layer, LoraSite::kGateUp, h_.data(), d, d, gate_up_.data(), 2 * inter);
    if (c.activation == Activation::kGeluTanh) {
      kernels::cpu::GeluTanhMul(gate_up_.data(), t, inter, act_.data());
    } else {
      kernels::cpu::SiluMul(gate_up_.data(), t, inter, act_.data());
    }
    if (c.sandwich_norms) {
      Project(act_.data(), inter, w.down, nullptr, branch_.data(), d, t, inter, d, false);
      AddLora(b, layer, LoraSite::kDown, act_.data(), inter, inter, branch_.data(), d);
      kernels::cpu::RmsNorm(branch_.data(), d, w.post_ff_norm, branch_.data(), d, t, d,
                            c.rms_norm_eps);
      for (int64_t i = 0; i < t * d; ++i)
        x_[static_cast<size_t>(i)] += branch_[static_cast<size_t>(i)];
    } else {
      Project(act_.data(), inter, w.down, nullptr, x_.data(), d, t, inter, d, true);
      AddLora(b, layer, LoraSite::kDown, act_.data(), inter, inter, x_.data(), d);
    }
  }

  if (!last_stage()) {
    // The next stage continues from x; the first stage gets the logits back.
    last_logits_rows_ = 0;
    return stage_link_->HandOff(b, std::span<const float>(x_.data(), static_cast<size_t>(t * d)),
                                logits);
  }
  // Only the requested rows go through the final norm and the (large) vocabulary projection.
  const int64_t rows = static_cast<int64_t>(b.logits_rows.size());
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(h_.data() + r * d, x_.data() + static_cast<int64_t>(b.logits_rows[r]) * d,
                d * sizeof(float));
  }
  kernels::cpu::RmsNorm(h_.data(), d, weights_.final_norm(), h_.data(), d, rows, d, c.rms_norm_eps);
  last_logits_rows_ = rows;
  Project(h_.data(), d, weights_.lm_head(), nullptr, logits.data(), c.vocab_size, rows, d,
          c.vocab_size, false);
  if (c.final_logit_softcap > 0) {
    const float cap = static_cast<float>(c.final_logit_softcap);
    for (int64_t i = 0; i < rows * c.vocab_size; ++i)
      logits[static_cast<size_t>(i)] = cap * std::tanh(logits[static_cast<size_t>(i)] / cap);
  }
  return absl::OkStatus();
}

}  // namespace kvserve::model
