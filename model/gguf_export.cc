#include "model/gguf_export.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string_view>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "base/absl_compat.h"
#include "base/check.h"
#include "gguf/gguf_writer.h"
#include "model/checkpoint_map.h"
#include "model/gguf_names.h"
#include "model/model_config.h"
#include "model/rope_table.h"
#include "model/safetensors.h"
#include "model/tensor_reader.h"
#include "quant/block_type.h"
#include "tokenizer/gguf_vocab.h"
#include "tokenizer/gguf_vocab_io.h"
#include "tokenizer/tokenizer_config.h"

namespace kvserve::model {
namespace {

using quant::BlockType;

struct Preset {
  std::string_view name;
  BlockType base;      // every matrix not named below
  bool more_bits;      // attn_v / ffn_down get Q6_K on use_more_bits layers, output Q6_K
  uint32_t file_type;  // general.file_type
};
constexpr Preset kPresets[] = {
    {"Q8_0", BlockType::kQ8_0, false, 7},
    {"Q6_K", BlockType::kQ6_K, false, 18},
    {"Q5_K_M", BlockType::kQ5_K, true, 17},
    {"Q4_K_M", BlockType::kQ4_K, true, 15},
};

// llama.cpp's choice of layers that get more bits in the _M presets.
bool UseMoreBits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

// The type a row of `cols` elements can take when `want`'s block does not divide it.
BlockType Fallback(BlockType want, int64_t cols) {
  if (cols % quant::Traits(want).block_elements == 0) return want;
  BlockType next = BlockType::kF16;
  switch (want) {
    case BlockType::kQ4_K:
      next = BlockType::kQ5_0;
      break;
    case BlockType::kQ5_K:
      next = BlockType::kQ5_1;
      break;
    case BlockType::kQ6_K:
      next = BlockType::kQ8_0;
      break;
    case BlockType::kQ2_K:
    case BlockType::kQ3_K:
      next = BlockType::kQ4_0;
      break;
    case BlockType::kIQ4_XS:
      next = BlockType::kIQ4_NL;
      break;
    default:
      break;
  }
  return next == BlockType::kF16 || cols % quant::Traits(next).block_elements == 0
             ? next
             : BlockType::kF16;
}

struct TypePolicy {
  std::optional<Preset> preset;
  BlockType single = BlockType::kF16;

  // The type of matrix `gguf` (a 2-D or 3-D weight) of layer `layer` (-1: not a layer's).
  BlockType For(const ModelConfig& c, std::string_view gguf, int layer, int64_t cols) const {
    if (!preset) return Fallback(single, cols);
    BlockType t = preset->base;
    const bool tied_embd = gguf == "token_embd.weight" && c.tie_word_embeddings;
    if (preset->more_bits) {
      const bool v = gguf.find(".attn_v.") != std::string_view::npos ||
                     gguf.find(".attn_qkv.") != std::string_view::npos;
      const bool down = gguf.find(".ffn_down") != std::string_view::npos;
      if (gguf == "output.weight" || tied_embd) t = BlockType::kQ6_K;
      if ((v || down) && layer >= 0 && UseMoreBits(layer, c.num_layers)) t = BlockType::kQ6_K;
      if (c.moe.num_experts == 8) {  // llama.cpp's 8-expert overrides (Mixtral)
        if (v || gguf.find(".attn_k.") != std::string_view::npos) t = BlockType::kQ8_0;
        if (gguf.find(".attn_output.") != std::string_view::npos &&
            preset->base == BlockType::kQ4_K) {
          t = BlockType::kQ5_K;
        }
      }
    } else if (gguf == "output.weight" || tied_embd) {
      t = preset->base;
    }
    return Fallback(t, cols);
  }
};

absl::StatusOr<TypePolicy> ParsePolicy(const std::string& type) {
  TypePolicy p;
  const std::string upper = absl::AsciiStrToUpper(type);
  for (const Preset& preset : kPresets) {
    if (preset.name == upper) {
      p.preset = preset;
      return p;
    }
  }
  if (auto t = quant::FindBlockTypeByName(type);
      t && static_cast<uint32_t>(t->type) < quant::kFirstOwnBlockId) {  // ggml's types only
    p.single = t->type;
    return p;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("type \"", type, "\" is not supported (", GgufExportTypes(), ")"));
}

int LayerOf(std::string_view gguf) {
  if (!gguf.starts_with("blk.")) return -1;
  int layer = 0;
  for (size_t i = 4; i < gguf.size() && gguf[i] != '.'; ++i) layer = layer * 10 + (gguf[i] - '0');
  return layer;
}

// Hugging Face row order -> llama.cpp's: stored row h*D + 2i + j holds row h*D + j*D/2 + i.
void PermuteHeadRows(std::vector<float>& rows, int64_t n_rows, int64_t cols, int heads) {
  std::vector<float> out(rows.size());
  const int64_t d = n_rows / heads, half = d / 2;
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t j = 0; j < 2; ++j) {
      for (int64_t i = 0; i < half; ++i) {
        std::memcpy(&out[static_cast<size_t>((h * d + 2 * i + j) * cols)],
                    &rows[static_cast<size_t>((h * d + j * half + i) * cols)],
                    static_cast<size_t>(cols) * 4);
      }
    }
  }
  rows.swap(out);
}

absl::StatusOr<std::vector<float>> ReadF32(const SafetensorsCheckpoint& ckpt,
                                           const std::string& name, int64_t* rows, int64_t* cols) {
  KVS_ASSIGN_OR_RETURN(auto found, ckpt.Find(name));
  const auto& [file, entry] = found;
  if (entry->shape.empty() || entry->shape.size() > 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(file->path(), ": tensor \"", name, "\": expected 1 or 2 dimensions"));
  }
  *rows = entry->shape[0];
  *cols = entry->shape.size() == 2 ? entry->shape[1] : 1;
  std::vector<float> out(static_cast<size_t>(entry->num_elements()));
  KVS_RETURN_IF_ERROR(file->ReadF32(*entry, out));
  return out;
}

std::vector<std::byte> Encode(BlockType type, const std::vector<float>& values, int64_t rows,
                              int64_t cols) {
  const auto row_bytes = quant::RowBytes(type, cols);
  KVS_CHECK(row_bytes.ok(), "export: row size checked by Fallback");
  std::vector<std::byte> out(static_cast<size_t>(rows * *row_bytes));
  quant::QuantizeRows(type, values.data(), rows, cols, out.data());
  return out;
}

absl::Status WriteMetadata(const ModelConfig& c, const TypePolicy& policy, gguf::GgufWriter& w) {
  const std::string arch(GgufArchitectureOf(c));
  auto key = [&](std::string_view k) { return absl::StrCat(arch, ".", base::AsAbsl(k)); };
  w.SetString("general.architecture", arch);
  w.SetU32("general.quantization_version", 2);
  if (policy.preset) w.SetU32("general.file_type", policy.preset->file_type);
  w.SetU32(key("context_length"), static_cast<uint32_t>(c.max_position_embeddings));
  w.SetU32(key("embedding_length"), static_cast<uint32_t>(c.hidden_size));
  w.SetU32(key("block_count"), static_cast<uint32_t>(c.num_layers));
  w.SetU32(key("feed_forward_length"), static_cast<uint32_t>(c.intermediate_size));
  w.SetU32(key("attention.head_count"), static_cast<uint32_t>(c.num_heads));
  w.SetU32(key("attention.head_count_kv"), static_cast<uint32_t>(c.num_kv_heads));
  w.SetU32(key("attention.key_length"), static_cast<uint32_t>(c.head_dim));
  w.SetU32(key("attention.value_length"), static_cast<uint32_t>(c.head_dim));
  w.SetF32(key("attention.layer_norm_rms_epsilon"), c.rms_norm_eps);
  w.SetF32(key("rope.freq_base"), static_cast<float>(c.rope_theta));
  w.SetU32(key("rope.dimension_count"), static_cast<uint32_t>(c.rotary_dim));
  if (c.moe.num_experts > 0) {
    w.SetU32(key("expert_count"), static_cast<uint32_t>(c.moe.num_experts));
    w.SetU32(key("expert_used_count"), static_cast<uint32_t>(c.moe.top_k));
    if (c.architecture == Architecture::kGptOss)
      w.SetU32(key("expert_feed_forward_length"), static_cast<uint32_t>(c.moe.intermediate_size));
    if (c.architecture == Architecture::kQwen3Moe) {
      w.SetU32(key("expert_feed_forward_length"), static_cast<uint32_t>(c.moe.intermediate_size));
      if (!c.moe.renormalize) {
        return absl::InvalidArgumentError(
            "norm_topk_prob false: llama.cpp's qwen3moe always renormalises");
      }
    }
  }
  if (c.architecture == Architecture::kGptOss) {
    // llama.cpp's rule: even layers slide (pattern 2), all with one window. YaRN's `truncate`
    // has no key: llama.cpp always truncates the ramp's ends, and so does a GGUF file here.
    const int window = c.layer_window.empty() ? 0 : c.layer_window.front();
    for (int i = 0; i < c.num_layers; ++i) {
      if (c.layer_window[static_cast<size_t>(i)] != (i % 2 == 0 ? window : 0) || window == 0) {
        return absl::InvalidArgumentError(
            "gpt-oss layer_types: GGUF carries only even layers sliding with one window");
      }
    }
    w.SetU32(key("attention.sliding_window"), static_cast<uint32_t>(window));
  } else if (c.sliding_window) {
    w.SetU32(key("attention.sliding_window"), static_cast<uint32_t>(*c.sliding_window));
  }
  const RopeScaling& rs = c.rope_scaling;
  switch (rs.kind) {
    case RopeScalingKind::kNone:
    case RopeScalingKind::kLlama3:    // rope_freqs (a tensor)
    case RopeScalingKind::kLongRope:  // rope_factors_* (tensors)
      break;
    case RopeScalingKind::kLinear:
      w.SetString(key("rope.scaling.type"), "linear");
      w.SetF32(key("rope.scaling.factor"), static_cast<float>(rs.factor));
      break;
    case RopeScalingKind::kYarn:
      w.SetString(key("rope.scaling.type"), "yarn");
      w.SetF32(key("rope.scaling.factor"), static_cast<float>(rs.factor));
      w.SetU32(key("rope.scaling.original_context_length"),
               static_cast<uint32_t>(rs.original_max_position_embeddings));
      w.SetF32(key("rope.scaling.yarn_beta_fast"), static_cast<float>(rs.beta_fast));
      w.SetF32(key("rope.scaling.yarn_beta_slow"), static_cast<float>(rs.beta_slow));
      break;
    case RopeScalingKind::kDynamic:
      return absl::InvalidArgumentError("rope_scaling dynamic has no GGUF form");
  }
  if (rs.kind == RopeScalingKind::kLongRope) {
    w.SetU32(key("rope.scaling.original_context_length"),
             static_cast<uint32_t>(rs.original_max_position_embeddings));
    if (rs.attention_factor)
      w.SetF32(key("rope.scaling.attn_factor"), static_cast<float>(*rs.attention_factor));
  }
  if (c.architecture == Architecture::kGemma2 || c.architecture == Architecture::kGemma3) {
    // llama.cpp has no key for the query scale: it is head_dim^-1/2, or (hidden / heads)^-1/2
    // for Gemma 2 27B (46 layers); gguf_config.h reads it back the same way.
    const double scalar = c.architecture == Architecture::kGemma2 && c.num_layers == 46
                              ? static_cast<double>(c.hidden_size / c.num_heads)
                              : static_cast<double>(c.head_dim);
    if (std::abs(c.attention_scale * std::sqrt(scalar) - 1.0) > 1e-12) {
      return absl::InvalidArgumentError(absl::StrCat(
          "query_pre_attn_scalar ", 1.0 / (c.attention_scale * c.attention_scale),
          " is not what llama.cpp assumes for this model (", scalar, "): GGUF cannot carry it"));
    }
    if (c.attn_logit_softcap > 0)
      w.SetF32(key("attn_logit_softcapping"), static_cast<float>(c.attn_logit_softcap));
    if (c.final_logit_softcap > 0)
      w.SetF32(key("final_logit_softcapping"), static_cast<float>(c.final_logit_softcap));
    if (c.architecture == Architecture::kGemma3) {
      int pattern = 0;  // the period of full-attention layers
      for (int i = 0; i < c.num_layers; ++i) {
        if (c.layer_window[static_cast<size_t>(i)] == 0) {
          pattern = i + 1;
          break;
        }
      }
      if (pattern > 0)
        w.SetU32(key("attention.sliding_window_pattern"), static_cast<uint32_t>(pattern));
      if (c.rope_local_theta)
        w.SetF32(key("rope.freq_base_swa"), static_cast<float>(*c.rope_local_theta));
    }
  }
  if (c.bos_token_id)
    w.SetU32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(*c.bos_token_id));
  if (!c.eos_token_ids.empty())
    w.SetU32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(c.eos_token_ids.front()));
  return absl::OkStatus();
}

// Per-frequency RoPE divisors as tensors (llama3: rope_freqs; longrope: rope_factors_*).
void WriteRopeTensors(const ModelConfig& c, gguf::GgufWriter& w) {
  auto f32 = [&](const std::string& name, const std::vector<float>& v) {
    std::vector<std::byte> bytes(v.size() * 4);
    std::memcpy(bytes.data(), v.data(), bytes.size());
    w.AddTensor(name, BlockType::kF32, {static_cast<int64_t>(v.size())}, std::move(bytes));
  };
  if (c.rope_scaling.kind == RopeScalingKind::kLlama3) {
    const RopeTable plain = ComputeRopeTable(c, c.rope_theta, /*scaled=*/false);
    const RopeTable scaled = ComputeRopeTable(c, c.rope_theta, /*scaled=*/true);
    std::vector<float> div(plain.inv_freq.size());
    for (size_t i = 0; i < div.size(); ++i) div[i] = plain.inv_freq[i] / scaled.inv_freq[i];
    f32("rope_freqs.weight", div);
  } else if (c.rope_scaling.kind == RopeScalingKind::kLongRope) {
    auto to_f = [](const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); };
    f32("rope_factors_long.weight", to_f(c.rope_scaling.long_factor));
    f32("rope_factors_short.weight", to_f(c.rope_scaling.short_factor));
  }
}

std::optional<std::string> ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// tokenizer.json (with tokenizer_config.json / generation_config.json) as tokenizer.ggml.*;
// a directory without one gets no tokenizer keys.
absl::Status WriteTokenizer(const std::string& hf_dir, int64_t vocab_size, gguf::GgufWriter& w) {
  const std::filesystem::path dir(hf_dir);
  const std::optional<std::string> json = ReadFile(dir / "tokenizer.json");
  if (!json) return absl::OkStatus();
  KVS_ASSIGN_OR_RETURN(
      tokenizer::TokenizerDirConfig tc,
      tokenizer::ParseTokenizerDirConfig(ReadFile(dir / "tokenizer_config.json").value_or(""),
                                         ReadFile(dir / "generation_config.json").value_or("")));
  if (tc.chat_template.empty())
    tc.chat_template = ReadFile(dir / "chat_template.jinja").value_or("");
  auto vocab = tokenizer::GgufVocabFromTokenizerJson(*json, tc);
  if (!vocab.ok()) {
    return absl::Status(vocab.status().code(),
                        absl::StrCat(hf_dir, "/tokenizer.json: ", vocab.status().message()));
  }
  // llama.cpp sizes the vocabulary by the token list: pad it to the embedding's rows.
  KVS_RETURN_IF_ERROR(tokenizer::PadGgufVocab(*vocab, vocab_size));
  tokenizer::WriteGgufVocab(*vocab, w);
  return absl::OkStatus();
}

}  // namespace

std::string GgufExportTypes() {
  std::string out = "presets:";
  for (const Preset& p : kPresets) absl::StrAppend(&out, " ", base::AsAbsl(p.name));
  absl::StrAppend(&out, "; types:");
  for (const quant::BlockTraits& t : quant::AllBlockTypes()) {
    if (static_cast<uint32_t>(t.type) >= quant::kFirstOwnBlockId) continue;  // not ggml's
    absl::StrAppend(&out, " ", base::AsAbsl(t.name));
  }
  return out;
}

absl::StatusOr<BlockType> GgufMatrixType(const std::string& type, const ModelConfig& config,
                                         std::string_view gguf_name, int layer, int64_t cols) {
  KVS_ASSIGN_OR_RETURN(TypePolicy policy, ParsePolicy(type));
  return policy.For(config, gguf_name, layer, cols);
}

namespace {

// One of gpt-oss's split expert tensors (gguf_names.h): ffn_{gate,up,down}_exps.{weight,bias},
// gathered from every expert's slice of the fused Hugging Face tensors. gate is the first
// half of the de-interleaved gate_up rows, up the second.
absl::Status AddGptOssExperts(const ModelConfig& c, const CheckpointMap& map,
                              const SafetensorsCheckpoint& ckpt, const GgufTensorName& n,
                              const TypePolicy& policy, int layer, gguf::GgufWriter& w) {
  const LayerWeightSpecs& l = map.layers[static_cast<size_t>(layer)];
  if (l.experts.empty()) return absl::OkStatus();
  const bool bias = n.gguf.ends_with(".bias");
  const bool down = n.gguf.find("ffn_down_exps") != std::string::npos;
  const bool up = n.gguf.find("ffn_up_exps") != std::string::npos;
  const int64_t ie = c.moe.intermediate_size, d = c.hidden_size;
  const int64_t rows = down ? d : ie, cols = bias ? 1 : down ? ie : d;
  const int64_t experts = static_cast<int64_t>(l.experts.size());
  std::vector<float> all;
  all.reserve(static_cast<size_t>(experts * rows * cols));
  for (const ExpertWeightSpecs& x : l.experts) {
    const WeightSpec& spec =
        down ? (bias ? x.down_bias : x.down) : (bias ? x.gate_up_bias : x.gate_up);
    std::vector<float> v(static_cast<size_t>(spec.elements()));
    KVS_RETURN_IF_ERROR(ReadF32(ckpt, spec, v));
    const size_t first = down || !up ? 0 : static_cast<size_t>(ie * cols);
    all.insert(all.end(), v.begin() + static_cast<ptrdiff_t>(first),
               v.begin() + static_cast<ptrdiff_t>(first + static_cast<size_t>(rows * cols)));
  }
  if (bias) {
    w.AddTensor(n.gguf, BlockType::kF32, {rows, experts},
                Encode(BlockType::kF32, all, 1, rows * experts));
    return absl::OkStatus();
  }
  const BlockType t = policy.For(c, n.gguf, layer, cols);
  w.AddTensor(n.gguf, t, {cols, rows, experts}, Encode(t, all, rows * experts, cols));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ExportGguf(const std::string& hf_dir,
                                                    const std::string& out_path,
                                                    const GgufExportOptions& options) {
  KVS_ASSIGN_OR_RETURN(TypePolicy policy, ParsePolicy(options.type));
  KVS_ASSIGN_OR_RETURN(ModelConfig c, LoadModelConfig(hf_dir));
  KVS_ASSIGN_OR_RETURN(SafetensorsCheckpoint ckpt, SafetensorsCheckpoint::Open(hf_dir));
  // gpt-oss's experts are fused tensors in Hugging Face's layout: read through the checkpoint
  // map's expert slices, which de-interleave gate_up (and unpack MXFP4).
  const CheckpointMap hf_map = MapCheckpoint(c);
  gguf::GgufWriter w;
  KVS_RETURN_IF_ERROR(WriteMetadata(c, policy, w));
  KVS_RETURN_IF_ERROR(WriteTokenizer(hf_dir, c.vocab_size, w));
  WriteRopeTensors(c, w);
  const bool gemma_norms = c.norm_weight_offset;
  for (const GgufTensorName& n : AllGgufTensorNames(c)) {
    const int layer = LayerOf(n.gguf);
    if (!n.experts) {
      if (!ckpt.Contains(n.hf)) continue;
      if (n.gguf == "output.weight" && c.tie_word_embeddings) continue;
      int64_t rows = 0, cols = 0;
      KVS_ASSIGN_OR_RETURN(std::vector<float> v, ReadF32(ckpt, n.hf, &rows, &cols));
      const bool matrix = cols > 1 && n.gguf.find("ffn_gate_inp") == std::string::npos;
      if (gemma_norms && n.gguf.ends_with("norm.weight")) {
        for (float& x : v) x += 1.0f;
      }
      if (n.permute_heads > 0) PermuteHeadRows(v, rows, cols, n.permute_heads);
      const BlockType t = matrix ? policy.For(c, n.gguf, layer, cols) : BlockType::kF32;
      std::vector<int64_t> ne =
          cols > 1 ? std::vector<int64_t>{cols, rows} : std::vector<int64_t>{rows};
      w.AddTensor(n.gguf, t, std::move(ne),
                  cols > 1 ? Encode(t, v, rows, cols) : Encode(t, v, 1, rows));
      continue;
    }
    if (c.architecture == Architecture::kGptOss) {
      KVS_RETURN_IF_ERROR(AddGptOssExperts(c, hf_map, ckpt, n, policy, layer, w));
      continue;
    }
    // Experts: one 3-D tensor [in, out, E] from E Hugging Face matrices.
    std::vector<float> all;
    int64_t rows = 0, cols = 0;
    int e = 0;
    for (;; ++e) {
      std::string hf = n.hf;
      hf.replace(hf.find("{e}"), 3, std::to_string(e));
      if (!ckpt.Contains(hf)) break;
      KVS_ASSIGN_OR_RETURN(std::vector<float> v, ReadF32(ckpt, hf, &rows, &cols));
      all.insert(all.end(), v.begin(), v.end());
    }
    if (e == 0) continue;
    const BlockType t = policy.For(c, n.gguf, layer, cols);
    w.AddTensor(n.gguf, t, {cols, rows, e}, Encode(t, all, rows * e, cols));
  }
  std::filesystem::create_directories(std::filesystem::path(out_path).parent_path().empty()
                                          ? std::filesystem::path(".")
                                          : std::filesystem::path(out_path).parent_path());
  return w.Write(out_path, options.max_file_bytes);
}

}  // namespace kvserve::model
