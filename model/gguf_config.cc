#include "model/gguf_config.h"

#include <cmath>
#include <cstring>
#include <optional>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/absl_compat.h"
#include "base/check.h"
#include "nlohmann/json.hpp"

namespace kvserve::model {
namespace {

using nlohmann::json;

struct ArchRow {
  std::string_view gguf;    // general.architecture
  std::string_view hf;      // config.json "architectures"[0]
  std::string_view moe_hf;  // the architecture when {arch}.expert_count > 0 ("" = same)
};
constexpr ArchRow kArchs[] = {
    {"llama", "LlamaForCausalLM", "MixtralForCausalLM"},
    {"qwen2", "Qwen2ForCausalLM", ""},
    {"qwen3", "Qwen3ForCausalLM", ""},
    {"qwen3moe", "Qwen3MoeForCausalLM", ""},
    {"phi3", "Phi3ForCausalLM", ""},
    {"gemma2", "Gemma2ForCausalLM", ""},
    {"gemma3", "Gemma3ForCausalLM", ""},
    {"gpt-oss", "GptOssForCausalLM", ""},
};

// Reads {arch}.<key> with typed defaults; every error names the file and the key.
class Meta {
 public:
  Meta(const gguf::GgufModel& g, std::string arch) : g_(g), arch_(std::move(arch)) {}
  std::string Key(std::string_view k) const { return absl::StrCat(arch_, ".", base::AsAbsl(k)); }
  bool Has(std::string_view k) const { return g_.Find(Key(k)) != nullptr; }
  absl::StatusOr<std::optional<int64_t>> Int(std::string_view k) const {
    if (!Has(k)) return std::nullopt;
    KVS_ASSIGN_OR_RETURN(int64_t v, g_.GetInt(Key(k)));
    return v;
  }
  absl::StatusOr<int64_t> RequiredInt(std::string_view k) const {
    KVS_ASSIGN_OR_RETURN(std::optional<int64_t> v, Int(k));
    if (!v) return Error(k, "missing (required)");
    return *v;
  }
  absl::StatusOr<std::optional<double>> Float(std::string_view k) const {
    if (!Has(k)) return std::nullopt;
    KVS_ASSIGN_OR_RETURN(double v, g_.GetFloat(Key(k)));
    return v;
  }
  absl::StatusOr<std::optional<std::string>> String(std::string_view k) const {
    if (!Has(k)) return std::nullopt;
    KVS_ASSIGN_OR_RETURN(std::string v, g_.GetString(Key(k)));
    return v;
  }
  absl::Status Error(std::string_view k, std::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat(g_.description(), ": ", Key(k), ": ", base::AsAbsl(what)));
  }

 private:
  const gguf::GgufModel& g_;
  std::string arch_;
};

// {arch}.attention.head_count_kv may be one number or one per layer (all equal for us).
absl::StatusOr<int64_t> KvHeads(const gguf::GgufModel& g, const Meta& m, int64_t heads) {
  const std::string key = m.Key("attention.head_count_kv");
  const gguf::Value* v = g.Find(key);
  if (v == nullptr) return heads;
  if (v->type != gguf::ValueType::kArray) return g.GetInt(key);
  KVS_ASSIGN_OR_RETURN(std::vector<int64_t> per_layer, g.GetInts(key));
  if (per_layer.empty()) return m.Error("attention.head_count_kv", "empty list");
  for (int64_t n : per_layer) {
    if (n != per_layer.front())
      return m.Error("attention.head_count_kv", "differs between layers (not supported)");
  }
  return per_layer.front();
}

// A tensor's F32 values (rope_freqs, rope_factors_*), or nullopt when absent.
absl::StatusOr<std::optional<std::vector<double>>> F32Tensor(const gguf::GgufModel& g,
                                                             std::string_view name) {
  if (!g.Contains(name)) return std::nullopt;
  KVS_ASSIGN_OR_RETURN(gguf::GgufModel::Tensor t, g.FindTensor(name));
  if (t.info->type != quant::BlockType::kF32 || t.info->ne.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        t.file->path(), ": tensor \"", base::AsAbsl(name), "\": expected a 1-D F32 tensor"));
  }
  const std::span<const std::byte> bytes = t.file->Bytes(*t.info);
  std::vector<double> out(static_cast<size_t>(t.info->ne[0]));
  for (size_t i = 0; i < out.size(); ++i) {
    float f;
    std::memcpy(&f, bytes.data() + 4 * i, 4);
    if (!std::isfinite(f) || !(f > 0)) {
      return absl::InvalidArgumentError(absl::StrCat(t.file->path(), ": tensor \"",
                                                     base::AsAbsl(name), "\": element ", i, " is ",
                                                     f, " (must be finite and > 0)"));
    }
    out[i] = f;
  }
  return out;
}

absl::Status RopeFields(const gguf::GgufModel& g, const Meta& m, int64_t head_dim, json& c) {
  KVS_ASSIGN_OR_RETURN(std::optional<double> base, m.Float("rope.freq_base"));
  if (base) c["rope_theta"] = *base;
  KVS_ASSIGN_OR_RETURN(std::optional<int64_t> dims, m.Int("rope.dimension_count"));
  if (dims && *dims != head_dim)
    c["partial_rotary_factor"] = static_cast<double>(*dims) / static_cast<double>(head_dim);
  KVS_ASSIGN_OR_RETURN(std::optional<std::string> type, m.String("rope.scaling.type"));
  KVS_ASSIGN_OR_RETURN(std::optional<double> factor, m.Float("rope.scaling.factor"));
  if (!factor) {
    KVS_ASSIGN_OR_RETURN(factor, m.Float("rope.scale_linear"));  // older files
  }
  KVS_ASSIGN_OR_RETURN(std::optional<int64_t> original,
                       m.Int("rope.scaling.original_context_length"));
  // Per-frequency divisors: Llama 3's rope_freqs, Phi-3's longrope factor tensors.
  KVS_ASSIGN_OR_RETURN(auto freqs, F32Tensor(g, "rope_freqs.weight"));
  KVS_ASSIGN_OR_RETURN(auto longf, F32Tensor(g, "rope_factors_long.weight"));
  KVS_ASSIGN_OR_RETURN(auto shortf, F32Tensor(g, "rope_factors_short.weight"));
  if (freqs) {
    // inverse frequency = base frequency / rope_freqs[i], no attention factor: a longrope
    // table whose short and long factors agree (rope_table.h applies it exactly so).
    c["rope_scaling"] = {{"rope_type", "longrope"},
                         {"short_factor", *freqs},
                         {"long_factor", *freqs},
                         {"attention_factor", 1.0}};
    if (original) c["original_max_position_embeddings"] = *original;
    return absl::OkStatus();
  }
  if (longf || shortf) {
    if (!longf || !shortf)
      return m.Error("rope.scaling.type", "rope_factors_long and rope_factors_short come together");
    json rs = {{"rope_type", "longrope"}, {"short_factor", *shortf}, {"long_factor", *longf}};
    KVS_ASSIGN_OR_RETURN(std::optional<double> attn, m.Float("rope.scaling.attn_factor"));
    if (attn) rs["attention_factor"] = *attn;
    c["rope_scaling"] = rs;
    if (original) c["original_max_position_embeddings"] = *original;
    return absl::OkStatus();
  }
  if (!type || *type == "none") {
    if (factor && *factor != 1.0 && !type)
      c["rope_scaling"] = {{"rope_type", "linear"}, {"factor", *factor}};
    return absl::OkStatus();
  }
  if (*type == "linear") {
    c["rope_scaling"] = {{"rope_type", "linear"}, {"factor", factor.value_or(1.0)}};
    return absl::OkStatus();
  }
  if (*type == "yarn") {
    json rs = {{"rope_type", "yarn"}, {"factor", factor.value_or(1.0)}};
    if (original) rs["original_max_position_embeddings"] = *original;
    KVS_ASSIGN_OR_RETURN(std::optional<double> fast, m.Float("rope.scaling.yarn_beta_fast"));
    KVS_ASSIGN_OR_RETURN(std::optional<double> slow, m.Float("rope.scaling.yarn_beta_slow"));
    if (fast) rs["beta_fast"] = *fast;
    if (slow) rs["beta_slow"] = *slow;
    c["rope_scaling"] = rs;
    return absl::OkStatus();
  }
  return m.Error("rope.scaling.type",
                 absl::StrCat("\"", *type, "\" is not supported (supported: none, linear, yarn)"));
}

}  // namespace

std::string GgufArchitectures() {
  std::string out;
  for (const ArchRow& a : kArchs)
    absl::StrAppend(&out, out.empty() ? "" : ", ", base::AsAbsl(a.gguf));
  return out;
}

absl::StatusOr<std::string> GgufConfigJson(const gguf::GgufModel& g) {
  KVS_ASSIGN_OR_RETURN(std::string arch, g.GetString("general.architecture"));
  const ArchRow* row = nullptr;
  for (const ArchRow& a : kArchs) {
    if (a.gguf == arch) row = &a;
  }
  if (row == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(g.description(), ": general.architecture \"", arch,
                     "\" is not supported (supported: ", GgufArchitectures(), ")"));
  }
  const Meta m(g, arch);
  json c = json::object();
  KVS_ASSIGN_OR_RETURN(int64_t hidden, m.RequiredInt("embedding_length"));
  KVS_ASSIGN_OR_RETURN(int64_t layers, m.RequiredInt("block_count"));
  KVS_ASSIGN_OR_RETURN(int64_t heads, m.RequiredInt("attention.head_count"));
  KVS_ASSIGN_OR_RETURN(int64_t kv_heads, KvHeads(g, m, heads));
  KVS_ASSIGN_OR_RETURN(std::optional<int64_t> ff, m.Int("feed_forward_length"));
  KVS_ASSIGN_OR_RETURN(std::optional<int64_t> experts, m.Int("expert_count"));
  const bool moe = experts && *experts > 0;
  KVS_ASSIGN_OR_RETURN(std::optional<int64_t> window, m.Int("attention.sliding_window"));
  // llama.cpp converts Mistral to `llama`; a window on every layer is what tells them apart.
  std::string_view hf = moe && !row->moe_hf.empty() ? row->moe_hf : row->hf;
  if (hf == "LlamaForCausalLM" && window) hf = "MistralForCausalLM";
  c["architectures"] = {std::string(hf)};
  c["hidden_size"] = hidden;
  c["num_hidden_layers"] = layers;
  c["num_attention_heads"] = heads;
  c["num_key_value_heads"] = kv_heads;
  // The vocabulary is the embedding's rows (Gemma 3's converter trims it to the real size).
  KVS_ASSIGN_OR_RETURN(gguf::GgufModel::Tensor embd, g.FindTensor("token_embd.weight"));
  if (embd.info->ne.size() != 2 || embd.info->ne[0] != hidden) {
    return absl::InvalidArgumentError(absl::StrCat(embd.file->path(),
                                                   ": tensor \"token_embd.weight\": expected [",
                                                   hidden, " x vocabulary] (embedding_length)"));
  }
  c["vocab_size"] = embd.info->ne[1];
  c["tie_word_embeddings"] = !g.Contains("output.weight");
  KVS_ASSIGN_OR_RETURN(std::optional<int64_t> key_len, m.Int("attention.key_length"));
  KVS_ASSIGN_OR_RETURN(std::optional<int64_t> value_len, m.Int("attention.value_length"));
  if (key_len && value_len && *key_len != *value_len) {
    return m.Error("attention.value_length", "differs from attention.key_length (not supported)");
  }
  const int64_t head_dim = key_len.value_or(heads > 0 ? hidden / heads : 0);
  c["head_dim"] = head_dim;
  KVS_ASSIGN_OR_RETURN(std::optional<double> eps, m.Float("attention.layer_norm_rms_epsilon"));
  if (eps) c["rms_norm_eps"] = *eps;
  KVS_ASSIGN_OR_RETURN(std::optional<int64_t> ctx, m.Int("context_length"));
  if (ctx) c["max_position_embeddings"] = *ctx;
  KVS_RETURN_IF_ERROR(RopeFields(g, m, head_dim, c));

  if (moe) {
    KVS_ASSIGN_OR_RETURN(int64_t used, m.RequiredInt("expert_used_count"));
    c["num_experts_per_tok"] = used;
    if (arch == "qwen3moe") {
      c["num_experts"] = *experts;
      KVS_ASSIGN_OR_RETURN(int64_t expert_ff, m.RequiredInt("expert_feed_forward_length"));
      c["moe_intermediate_size"] = expert_ff;
      c["norm_topk_prob"] = true;  // llama.cpp's qwen3moe always renormalises the top-k weights
    } else {
      c["num_local_experts"] = *experts;
    }
    // Layers without a router run the dense MLP (Qwen3-MoE's mlp_only_layers).
    if (arch == "qwen3moe") {
      json dense = json::array();
      for (int64_t i = 0; i < layers; ++i) {
        if (!g.Contains(absl::StrCat("blk.", i, ".ffn_gate_inp.weight"))) dense.push_back(i);
      }
      c["mlp_only_layers"] = dense;
    }
  }
  if (arch == "gpt-oss") {  // every layer is MoE: the experts' width is the model's
    KVS_ASSIGN_OR_RETURN(int64_t expert_ff, m.RequiredInt("expert_feed_forward_length"));
    ff = expert_ff;
  }
  if (!ff) {
    if (!moe) return m.Error("feed_forward_length", "missing (required)");
    KVS_ASSIGN_OR_RETURN(int64_t expert_ff, m.RequiredInt("expert_feed_forward_length"));
    ff = expert_ff;
  }
  c["intermediate_size"] = *ff;

  // Biases are present in the file or not: the tensors say so (Llama's attention_bias).
  if (arch == "llama" || arch == "qwen3" || arch == "qwen3moe" || arch == "gemma2" ||
      arch == "gemma3" || arch == "gpt-oss") {
    c["attention_bias"] = g.Contains("blk.0.attn_q.bias");
  }
  // A window on every layer (Mistral-style, Phi-3); Qwen's optional windows are not used by
  // its released models and llama.cpp does not apply them either.
  if (window && (arch == "phi3" || arch == "llama")) c["sliding_window"] = *window;
  if (arch == "gpt-oss") {
    // llama.cpp: layer i slides iff i % pattern < pattern - 1 (pattern 2: even layers, as
    // Hugging Face's GptOssConfig alternates them).
    if (!window) return m.Error("attention.sliding_window", "missing (required)");
    KVS_ASSIGN_OR_RETURN(std::optional<int64_t> pattern, m.Int("attention.sliding_window_pattern"));
    const int64_t n = pattern.value_or(2);
    if (n < 1) return m.Error("attention.sliding_window_pattern", "must be >= 1");
    c["sliding_window"] = *window;
    json types = json::array();
    for (int64_t i = 0; i < layers; ++i)
      types.push_back(i % n < n - 1 ? "sliding_attention" : "full_attention");
    c["layer_types"] = types;
  }
  if (arch == "gemma2" || arch == "gemma3") {
    c["hidden_activation"] = "gelu_pytorch_tanh";
    // llama.cpp scales queries by key_length^-1/2, except Gemma 2 27B (46 layers), whose
    // query_pre_attn_scalar is hidden / heads.
    c["query_pre_attn_scalar"] = arch == "gemma2" && layers == 46 ? hidden / heads : head_dim;
    if (window) c["sliding_window"] = *window;
    KVS_ASSIGN_OR_RETURN(std::optional<double> attn_cap, m.Float("attn_logit_softcapping"));
    KVS_ASSIGN_OR_RETURN(std::optional<double> final_cap, m.Float("final_logit_softcapping"));
    c["attn_logit_softcapping"] = attn_cap.value_or(0.0);
    c["final_logit_softcapping"] = final_cap.value_or(0.0);
    if (arch == "gemma3") {
      KVS_ASSIGN_OR_RETURN(std::optional<int64_t> pattern,
                           m.Int("attention.sliding_window_pattern"));
      c["sliding_window_pattern"] = pattern.value_or(6);
      KVS_ASSIGN_OR_RETURN(std::optional<double> local, m.Float("rope.freq_base_swa"));
      c["rope_local_base_freq"] = local.value_or(10000.0);
    }
  }
  // Token ids the model config carries (the tokenizer's own come from tokenizer.ggml.*).
  if (const gguf::Value* bos = g.Find("tokenizer.ggml.bos_token_id"); bos != nullptr) {
    KVS_ASSIGN_OR_RETURN(int64_t id, g.GetInt("tokenizer.ggml.bos_token_id"));
    c["bos_token_id"] = id;
  }
  if (const gguf::Value* eos = g.Find("tokenizer.ggml.eos_token_id"); eos != nullptr) {
    KVS_ASSIGN_OR_RETURN(int64_t id, g.GetInt("tokenizer.ggml.eos_token_id"));
    c["eos_token_id"] = id;
  }
  return c.dump();
}

absl::StatusOr<ModelConfig> LoadGgufModelConfig(const gguf::GgufModel& g) {
  KVS_ASSIGN_OR_RETURN(std::string text, GgufConfigJson(g));
  KVS_ASSIGN_OR_RETURN(ModelConfig c, ParseModelConfig(text, g.description()));
  // llama.cpp's converter splits gpt-oss's fused experts (ModelConfig::MoeConfig::split_experts).
  c.moe.split_experts = c.architecture == Architecture::kGptOss;
  return c;
}

}  // namespace kvserve::model
