#include "tests/support/hf_models/checkpoint_writer.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "tests/support/hf_models/mxfp4.h"
#include "tests/support/hf_models/safetensors_writer.h"

namespace kvserve::testing::hf {
namespace {

using nlohmann::json;

bool HasHeadDimField(Arch a) { return a != Arch::kQwen2 && a != Arch::kPhi3; }
bool HasQkNorm(Arch a) { return a == Arch::kQwen3 || a == Arch::kQwen3Moe || a == Arch::kGemma3; }

json RopeScalingJson(const FixtureSpec& spec) {
  const RopeScalingSpec& r = spec.rope_scaling;
  if (r.type.empty()) return nullptr;
  json j = json::object();
  // Phi-3 checkpoints spell the key "type" (pre-rename); the others save "rope_type".
  j[spec.arch == Arch::kPhi3 ? "type" : "rope_type"] = r.type;
  if (r.type == "longrope") {
    j["short_factor"] = r.short_factor;
    j["long_factor"] = r.long_factor;
    if (r.attention_factor) j["attention_factor"] = *r.attention_factor;
    return j;
  }
  j["factor"] = r.factor;
  if (r.type == "llama3") {
    j["low_freq_factor"] = r.low_freq_factor;
    j["high_freq_factor"] = r.high_freq_factor;
    j["original_max_position_embeddings"] = r.original_max_position_embeddings;
  } else if (r.type == "yarn") {
    if (r.original_max_position_embeddings > 0) {
      j["original_max_position_embeddings"] = r.original_max_position_embeddings;
    }
    if (r.beta_fast) j["beta_fast"] = *r.beta_fast;
    if (r.beta_slow) j["beta_slow"] = *r.beta_slow;
    if (r.attention_factor) j["attention_factor"] = *r.attention_factor;
    if (r.mscale) j["mscale"] = *r.mscale;
    if (r.mscale_all_dim) j["mscale_all_dim"] = *r.mscale_all_dim;
    if (r.truncate) j["truncate"] = *r.truncate;
  }
  return j;
}

json OptionalNumber(const std::optional<double>& v) { return v ? json(*v) : json(nullptr); }
json OptionalInt(const std::optional<int>& v) { return v ? json(*v) : json(nullptr); }

// One tensor's private generator: the draws depend on (seed, name) only.
std::mt19937_64 TensorRng(uint64_t seed, const std::string& name) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (char c : name) h = (h ^ static_cast<uint8_t>(c)) * 1099511628211ull;
  return std::mt19937_64(h ^ (seed * 0x9E3779B97F4A7C15ull));
}

double Uniform01(std::mt19937_64& g) { return static_cast<double>(g() >> 11) * 0x1.0p-53; }

class TensorSet {
 public:
  explicit TensorSet(const FixtureSpec& spec)
      : spec_(spec), bf16_(spec.dtype == WeightDtype::kBf16) {}

  // Uniform with mean `mean` and standard deviation `std`.
  void Add(const std::string& name, std::vector<int64_t> shape, double std, double mean = 0.0) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::mt19937_64 g = TensorRng(spec_.seed, name);
    const double half = std * std::sqrt(3.0);
    std::vector<float> v(static_cast<size_t>(n));
    for (auto& x : v) x = static_cast<float>(mean + (2.0 * Uniform01(g) - 1.0) * half);
    tensors_.push_back(MakeFloatTensor(name, std::move(shape), v, bf16_));
  }
  void AddNorm(const std::string& name, int64_t n) {
    Add(name, {n}, 0.1 / std::sqrt(3.0), IsGemma(spec_.arch) ? 0.0 : 1.0);
  }
  void AddRaw(TensorBlob t) { tensors_.push_back(std::move(t)); }
  bool bf16() const { return bf16_; }
  std::vector<TensorBlob>& tensors() { return tensors_; }

 private:
  const FixtureSpec& spec_;
  bool bf16_;
  std::vector<TensorBlob> tensors_;
};

// gpt-oss experts: random MXFP4 codes for E matrices of [rows][cols] (rows = output
// features), then either the codes or their exact dequantised values in HF's [E, cols, rows]
// (input-major, for x @ W) layout.
void AddMxfp4Experts(TensorSet& set, const FixtureSpec& spec, const std::string& name,
                     int64_t experts, int64_t rows, int64_t cols) {
  std::mt19937_64 g = TensorRng(spec.seed, name + "#mxfp4");
  const int64_t nb = cols / kMxfp4Block;
  std::vector<uint8_t> blocks(static_cast<size_t>(experts * rows * nb * 16));
  std::vector<uint8_t> scales(static_cast<size_t>(experts * rows * nb));
  for (auto& b : blocks) b = static_cast<uint8_t>(g() & 0xFF);
  for (auto& s : scales)
    s = static_cast<uint8_t>(spec.mxfp4_scale_exponent - 1 + static_cast<int>(g() % 3));
  if (spec.expert_format == ExpertFormat::kMxfp4) {
    TensorBlob tb{name + "_blocks", "U8", {experts, rows, nb, 16}, blocks};
    TensorBlob ts{name + "_scales", "U8", {experts, rows, nb}, scales};
    set.AddRaw(std::move(tb));
    set.AddRaw(std::move(ts));
    return;
  }
  std::vector<float> values(static_cast<size_t>(experts * rows * cols));
  for (int64_t e = 0; e < experts; ++e) {
    std::span<const uint8_t> eb(blocks.data() + e * rows * nb * 16,
                                static_cast<size_t>(rows * nb * 16));
    std::span<const uint8_t> es(scales.data() + e * rows * nb, static_cast<size_t>(rows * nb));
    const std::vector<double> w = DequantMxfp4(eb, es, rows, cols);  // [rows][cols]
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        values[static_cast<size_t>((e * cols + c) * rows + r)] =
            static_cast<float>(w[static_cast<size_t>(r * cols + c)]);
      }
    }
  }
  // FP4 × 2^k is exact in bf16 (3 significant bits at most).
  set.AddRaw(MakeFloatTensor(name, {experts, cols, rows}, values, set.bf16()));
}

absl::Status Validate(const FixtureSpec& s) {
  auto err = [](const std::string& field, const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("fixture spec: ", field, ": ", why));
  };
  if (!HasHeadDimField(s.arch) && s.head_dim * s.num_attention_heads != s.hidden_size) {
    return err("head_dim", absl::StrCat(ModelType(s.arch),
                                        " has no head_dim field: it must equal hidden_size / "
                                        "num_attention_heads"));
  }
  if (s.num_attention_heads % s.num_key_value_heads != 0)
    return err("num_key_value_heads", "must divide heads");
  if (RotaryDim(s) % 2 != 0) return err("partial_rotary_factor", "rotary dim must be even");
  if (s.rope_scaling.type == "longrope") {
    const size_t half = static_cast<size_t>(RotaryDim(s) / 2);
    if (s.rope_scaling.short_factor.size() != half || s.rope_scaling.long_factor.size() != half) {
      return err("rope_scaling", absl::StrCat("longrope factor lists need ", half, " entries"));
    }
  }
  const bool moe = s.arch == Arch::kMixtral || s.arch == Arch::kQwen3Moe || s.arch == Arch::kGptOss;
  if (moe &&
      (s.num_experts <= 0 || s.num_experts_per_tok <= 0 || s.num_experts_per_tok > s.num_experts)) {
    return err("num_experts", "MoE needs 0 < num_experts_per_tok <= num_experts");
  }
  if (s.arch == Arch::kQwen3Moe && s.moe_intermediate_size <= 0)
    return err("moe_intermediate_size", "must be > 0");
  if (s.arch == Arch::kGptOss &&
      (s.hidden_size % kMxfp4Block != 0 || s.intermediate_size % kMxfp4Block != 0)) {
    return err("intermediate_size",
               "gpt-oss experts need hidden and intermediate sizes that are multiples of 32");
  }
  if (!s.layer_types.empty() && static_cast<int>(s.layer_types.size()) != s.num_hidden_layers) {
    return err("layer_types", "needs one entry per layer");
  }
  if (s.num_shards < 1 || s.num_shards > 2) return err("num_shards", "1 or 2");
  return absl::OkStatus();
}

}  // namespace

std::string ConfigJson(const FixtureSpec& s) {
  json j = json::object();
  j["architectures"] = {ArchitectureName(s.arch)};
  j["model_type"] = ModelType(s.arch);
  j["hidden_size"] = s.hidden_size;
  j["intermediate_size"] = s.intermediate_size;
  j["num_hidden_layers"] = s.num_hidden_layers;
  j["num_attention_heads"] = s.num_attention_heads;
  j["num_key_value_heads"] = s.num_key_value_heads;
  if (HasHeadDimField(s.arch)) j["head_dim"] = s.head_dim;
  j["vocab_size"] = s.vocab_size;
  j["rms_norm_eps"] = s.rms_norm_eps;
  j["rope_theta"] = s.rope_theta;
  j["rope_scaling"] = RopeScalingJson(s);
  j["max_position_embeddings"] = s.max_position_embeddings;
  j["tie_word_embeddings"] = s.tie_word_embeddings;
  j["torch_dtype"] = s.dtype == WeightDtype::kBf16 ? "bfloat16" : "float32";
  j["bos_token_id"] = 1;
  j["eos_token_id"] = 2;
  j["attention_dropout"] = 0.0;
  j["initializer_range"] = 0.02;
  j["use_cache"] = true;
  j["transformers_version"] = "4.56.0";
  // Gemma 2 configs carry both spellings; Gemma3TextConfig only hidden_activation.
  if (s.arch != Arch::kGemma3) j["hidden_act"] = IsGemma(s.arch) ? "gelu_pytorch_tanh" : "silu";
  const std::vector<std::string> types = LayerTypes(s);
  switch (s.arch) {
    case Arch::kLlama:
      j["attention_bias"] = s.attention_bias;
      j["mlp_bias"] = false;
      j["pretraining_tp"] = 1;
      break;
    case Arch::kQwen2:
    case Arch::kQwen3:
    case Arch::kQwen3Moe:
      if (s.arch != Arch::kQwen2) j["attention_bias"] = s.attention_bias;
      j["sliding_window"] = OptionalInt(s.sliding_window);
      j["use_sliding_window"] = s.use_sliding_window;
      j["max_window_layers"] = s.max_window_layers;
      if (s.arch == Arch::kQwen3Moe) {
        j["num_experts"] = s.num_experts;
        j["num_experts_per_tok"] = s.num_experts_per_tok;
        j["moe_intermediate_size"] = s.moe_intermediate_size;
        j["norm_topk_prob"] = s.norm_topk_prob;
        j["decoder_sparse_step"] = s.decoder_sparse_step;
        j["mlp_only_layers"] = s.mlp_only_layers;
        j["router_aux_loss_coef"] = 0.001;
        j["output_router_logits"] = false;
      }
      break;
    case Arch::kMistral:
      j["sliding_window"] = OptionalInt(s.sliding_window);
      break;
    case Arch::kGemma2:
    case Arch::kGemma3:
      j["hidden_activation"] = "gelu_pytorch_tanh";
      j["query_pre_attn_scalar"] = s.query_pre_attn_scalar;
      j["attn_logit_softcapping"] = OptionalNumber(s.attn_logit_softcapping);
      j["final_logit_softcapping"] = OptionalNumber(s.final_logit_softcapping);
      j["sliding_window"] = OptionalInt(s.sliding_window);
      j["attention_bias"] = false;
      j["cache_implementation"] = "hybrid";
      j["pad_token_id"] = 0;
      if (s.write_layer_types) j["layer_types"] = types;
      if (s.arch == Arch::kGemma3) {
        j["sliding_window_pattern"] = s.sliding_window_pattern;
        j["rope_local_base_freq"] = s.rope_local_base_freq;
      }
      break;
    case Arch::kPhi3:
      j["original_max_position_embeddings"] = s.original_max_position_embeddings;
      if (s.partial_rotary_factor != 1.0) j["partial_rotary_factor"] = s.partial_rotary_factor;
      j["sliding_window"] = OptionalInt(s.sliding_window);
      j["attention_bias"] = false;
      j["embd_pdrop"] = 0.0;
      j["resid_pdrop"] = 0.0;
      j["pad_token_id"] = 0;
      break;
    case Arch::kMixtral:
      j["num_local_experts"] = s.num_experts;
      j["num_experts_per_tok"] = s.num_experts_per_tok;
      j["sliding_window"] = OptionalInt(s.sliding_window);
      j["router_aux_loss_coef"] = 0.02;
      j["output_router_logits"] = false;
      break;
    case Arch::kGptOss:
      j["attention_bias"] = s.attention_bias;
      j["num_local_experts"] = s.num_experts;
      j["num_experts_per_tok"] = s.num_experts_per_tok;
      j["experts_per_token"] = s.num_experts_per_tok;
      j["swiglu_limit"] = s.swiglu_limit;
      j["sliding_window"] = OptionalInt(s.sliding_window);
      if (s.write_layer_types) j["layer_types"] = types;
      j["initial_context_length"] = s.rope_scaling.original_max_position_embeddings;
      j["router_aux_loss_coef"] = 0.9;
      j["output_router_logits"] = false;
      if (s.expert_format == ExpertFormat::kMxfp4) {
        j["quantization_config"] = {{"quant_method", "mxfp4"},
                                    {"modules_to_not_convert",
                                     {"model.layers.*.self_attn", "model.layers.*.mlp.router",
                                      "model.embed_tokens", "lm_head"}}};
      }
      break;
  }
  return j.dump(2) + "\n";
}

absl::Status WriteRandomCheckpoint(const FixtureSpec& s, const std::string& dir) {
  if (auto st = Validate(s); !st.ok()) return st;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", dir, ": ", ec.message()));

  const int64_t d = s.hidden_size, hd = s.head_dim, v = s.vocab_size;
  const int64_t qd = s.num_attention_heads * hd, kvd = s.num_key_value_heads * hd;
  const double w = s.weight_std, bias_std = 0.05;
  TensorSet set(s);
  set.Add("model.embed_tokens.weight", {v, d}, s.embed_std);
  for (int i = 0; i < s.num_hidden_layers; ++i) {
    const std::string p = absl::StrCat("model.layers.", i, ".");
    set.AddNorm(p + "input_layernorm.weight", d);
    set.AddNorm(p + "post_attention_layernorm.weight", d);
    if (IsGemma(s.arch)) {
      set.AddNorm(p + "pre_feedforward_layernorm.weight", d);
      set.AddNorm(p + "post_feedforward_layernorm.weight", d);
    }
    // Attention.
    if (s.arch == Arch::kPhi3) {
      set.Add(p + "self_attn.qkv_proj.weight", {qd + 2 * kvd, d}, w);
    } else {
      set.Add(p + "self_attn.q_proj.weight", {qd, d}, w);
      set.Add(p + "self_attn.k_proj.weight", {kvd, d}, w);
      set.Add(p + "self_attn.v_proj.weight", {kvd, d}, w);
    }
    set.Add(p + "self_attn.o_proj.weight", {d, qd}, w);
    const bool qkv_bias =
        s.arch == Arch::kQwen2 ||
        (s.attention_bias && (s.arch == Arch::kLlama || s.arch == Arch::kQwen3 ||
                              s.arch == Arch::kQwen3Moe || s.arch == Arch::kGptOss));
    const bool o_bias = s.arch != Arch::kQwen2 && qkv_bias;
    if (qkv_bias) {
      set.Add(p + "self_attn.q_proj.bias", {qd}, bias_std);
      set.Add(p + "self_attn.k_proj.bias", {kvd}, bias_std);
      set.Add(p + "self_attn.v_proj.bias", {kvd}, bias_std);
    }
    if (o_bias) set.Add(p + "self_attn.o_proj.bias", {d}, bias_std);
    if (HasQkNorm(s.arch)) {
      set.AddNorm(p + "self_attn.q_norm.weight", hd);
      set.AddNorm(p + "self_attn.k_norm.weight", hd);
    }
    if (s.arch == Arch::kGptOss) set.Add(p + "self_attn.sinks", {s.num_attention_heads}, 0.5);

    // Feed-forward.
    const int64_t in = s.intermediate_size, e = s.num_experts;
    switch (s.arch) {
      case Arch::kPhi3:
        set.Add(p + "mlp.gate_up_proj.weight", {2 * in, d}, w);
        set.Add(p + "mlp.down_proj.weight", {d, in}, w);
        break;
      case Arch::kMixtral:
        set.Add(p + "block_sparse_moe.gate.weight", {e, d}, w);
        for (int x = 0; x < e; ++x) {
          const std::string ep = absl::StrCat(p, "block_sparse_moe.experts.", x, ".");
          set.Add(ep + "w1.weight", {in, d}, w);
          set.Add(ep + "w2.weight", {d, in}, w);
          set.Add(ep + "w3.weight", {in, d}, w);
        }
        break;
      case Arch::kGptOss:
        set.Add(p + "mlp.router.weight", {e, d}, w);
        set.Add(p + "mlp.router.bias", {e}, bias_std);
        AddMxfp4Experts(set, s, p + "mlp.experts.gate_up_proj", e, 2 * in, d);
        set.Add(p + "mlp.experts.gate_up_proj_bias", {e, 2 * in}, bias_std);
        AddMxfp4Experts(set, s, p + "mlp.experts.down_proj", e, d, in);
        set.Add(p + "mlp.experts.down_proj_bias", {e, d}, bias_std);
        break;
      case Arch::kQwen3Moe: {
        bool sparse = (i + 1) % s.decoder_sparse_step == 0;
        for (int m : s.mlp_only_layers) sparse = sparse && m != i;
        if (sparse) {
          const int64_t mi = s.moe_intermediate_size;
          set.Add(p + "mlp.gate.weight", {e, d}, w);
          for (int x = 0; x < e; ++x) {
            const std::string ep = absl::StrCat(p, "mlp.experts.", x, ".");
            set.Add(ep + "gate_proj.weight", {mi, d}, w);
            set.Add(ep + "up_proj.weight", {mi, d}, w);
            set.Add(ep + "down_proj.weight", {d, mi}, w);
          }
          break;
        }
        [[fallthrough]];
      }
      default:
        set.Add(p + "mlp.gate_proj.weight", {in, d}, w);
        set.Add(p + "mlp.up_proj.weight", {in, d}, w);
        set.Add(p + "mlp.down_proj.weight", {d, in}, w);
        break;
    }
  }
  set.AddNorm("model.norm.weight", d);
  if (!s.tie_word_embeddings) set.Add("lm_head.weight", {v, d}, w);

  std::ofstream cfg(dir + "/config.json", std::ios::trunc);
  cfg << ConfigJson(s);
  if (!cfg) return absl::InternalError(absl::StrCat("write failed: ", dir, "/config.json"));
  cfg.close();
  // A stale single file or index from an earlier write would shadow the new layout.
  std::filesystem::remove(dir + "/model.safetensors", ec);
  std::filesystem::remove(dir + "/model.safetensors.index.json", ec);
  return WriteSafetensors(set.tensors(), dir, s.num_shards);
}

}  // namespace kvserve::testing::hf
