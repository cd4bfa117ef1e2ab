// GGUF models against the float64 reference: a random Hugging Face fixture is written as a
// GGUF file by our exporter (model/gguf_export.h) in each tensor type, served by kvserve's CPU
// forward from that file, and compared with the float64 forward (tests/support/hf_models) on
// a Hugging Face directory holding the GGUF file's weights dequantized (quant/block_type.h's
// dequantizers, themselves checked bit for bit against float64 decoders in quant_test). So the
// comparison isolates what serving a GGUF file adds: the metadata -> config translation, the
// tensor names and the llama q/k permutation, Gemma's stored norms, and the quantized kernels.
//
// Bounds (max |logprob difference| over every position and vocabulary entry):
//   F32, F16, BF16 weights: the fp32 kernels on exactly the reference's weights, as the
//     safetensors agreement test (1e-4);
//   quantized weights: the kernels quantize activations to int8 per 32 elements
//     (kernels/cpu/quant/panel_format.h derives the per-projection bound: about 0.4 % of
//     Σ|w|·amax). Carried through the fixtures' layers to the logprobs it measures 0.02-0.19
//     (worst: phi3 Q4_K_M, 0.19; every type and architecture prints its figure), so kQuantTol is
//     0.3: an error of the kernels' size passes, a wrong block, scale or permutation (errors of
//     1 and more, as seen while writing this test) fails.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gguf/gguf_file.h"
#include "gtest/gtest.h"
#include "model/gguf_checkpoint.h"
#include "model/gguf_config.h"
#include "model/gguf_export.h"
#include "model/llama_model.h"
#include "model/tensor_reader.h"
#include "quant/block_type.h"
#include "tests/support/hf_models/checkpoint_writer.h"
#include "tests/support/hf_models/presets.h"
#include "tests/support/hf_models/reference_forward.h"
#include "tests/support/hf_models/safetensors_writer.h"
#include "tests/unit/hf_models/hf_test_util.h"
#include "tests/unit/hf_models/reference_diffs.h"
#include "tests/unit/model/model_test_util.h"

namespace kvserve::testing::hf {
namespace {

constexpr double kFloatTol = 1e-4;
constexpr double kQuantTol = 0.3;

// gpt-oss: the GGUF file's split experts (gate, up, down and their biases per expert) back
// into Hugging Face's fused tensors, written from transformers' layout independently of the
// loader: gate_up_proj [E][hidden][2I] input-major with gate in the even and up in the odd
// columns, gate_up_proj_bias [E][2I] likewise, down_proj [E][I][hidden], down_proj_bias
// [E][hidden].
void FuseGptOssExperts(const model::ModelConfig& c,
                       std::map<std::string, std::vector<float>>& split,
                       std::vector<TensorBlob>& blobs) {
  const int64_t E = c.moe.num_experts, I = c.moe.intermediate_size, D = c.hidden_size;
  for (int layer = 0; layer < c.num_layers; ++layer) {
    const std::string p = "model.layers." + std::to_string(layer) + ".mlp.experts.";
    std::vector<float> gu(static_cast<size_t>(E * D * 2 * I)), gub(static_cast<size_t>(E * 2 * I));
    std::vector<float> dn(static_cast<size_t>(E * I * D)), dnb(static_cast<size_t>(E * D));
    for (int64_t e = 0; e < E; ++e) {
      const std::string ep = p + std::to_string(e) + ".";
      const auto& g = split.at(ep + "gate_proj.weight");  // [I][D]
      const auto& u = split.at(ep + "up_proj.weight");
      const auto& d = split.at(ep + "down_proj.weight");  // [D][I]
      const auto& gb = split.at(ep + "gate_proj.bias");
      const auto& ub = split.at(ep + "up_proj.bias");
      const auto& db = split.at(ep + "down_proj.bias");
      for (int64_t j = 0; j < I; ++j) {
        for (int64_t k = 0; k < D; ++k) {
          gu[static_cast<size_t>((e * D + k) * 2 * I + 2 * j)] = g[static_cast<size_t>(j * D + k)];
          gu[static_cast<size_t>((e * D + k) * 2 * I + 2 * j + 1)] =
              u[static_cast<size_t>(j * D + k)];
          dn[static_cast<size_t>((e * I + j) * D + k)] = d[static_cast<size_t>(k * I + j)];
        }
        gub[static_cast<size_t>(e * 2 * I + 2 * j)] = gb[static_cast<size_t>(j)];
        gub[static_cast<size_t>(e * 2 * I + 2 * j + 1)] = ub[static_cast<size_t>(j)];
      }
      for (int64_t k = 0; k < D; ++k)
        dnb[static_cast<size_t>(e * D + k)] = db[static_cast<size_t>(k)];
    }
    blobs.push_back(MakeFloatTensor(p + "gate_up_proj", {E, D, 2 * I}, gu, false));
    blobs.push_back(MakeFloatTensor(p + "gate_up_proj_bias", {E, 2 * I}, gub, false));
    blobs.push_back(MakeFloatTensor(p + "down_proj", {E, I, D}, dn, false));
    blobs.push_back(MakeFloatTensor(p + "down_proj_bias", {E, D}, dnb, false));
  }
}

// Writes `gguf_path`'s weights, dequantized to F32 under their Hugging Face names (q/k rows
// un-permuted, Gemma's stored (1 + w) norms back to w), with `hf_dir`'s config.json, into
// `out_dir`: the float64 reference's view of the GGUF file.
absl::Status WriteDequantized(const std::string& gguf_path, const std::string& hf_dir,
                              const std::string& out_dir) {
  auto opened = gguf::GgufModel::Open(gguf_path);
  if (!opened.ok()) return opened.status();
  auto g = std::make_shared<const gguf::GgufModel>(std::move(*opened));
  auto config = model::LoadGgufModelConfig(*g);
  if (!config.ok()) return config.status();
  auto ckpt = model::OpenGgufCheckpoint(g, *config);
  if (!ckpt.ok()) return ckpt.status();
  std::vector<TensorBlob> blobs;
  std::map<std::string, std::vector<float>> split;
  for (const std::string& name : ckpt->TensorNames()) {
    auto found = ckpt->Find(name);
    if (!found.ok()) return found.status();
    const auto& [file, e] = *found;
    const auto traits = quant::FindBlockTypeByName(e->dtype);
    if (!traits) return absl::InvalidArgumentError("unknown dtype " + e->dtype);
    const int64_t rows = e->shape.size() == 2 ? e->shape[0] : 1;
    const int64_t cols = e->shape.size() == 2 ? e->shape[1] : e->shape[0];
    std::vector<float> values(static_cast<size_t>(rows * cols));
    quant::DequantizeRows(traits->type, file->Bytes(*e).data(), rows, cols, values.data());
    if (e->permute_heads > 0) {
      std::vector<float> stored = values;
      model::UnpermuteHeadRows(std::as_bytes(std::span<const float>(stored)), e->shape.front(),
                               e->permute_heads, std::as_writable_bytes(std::span<float>(values)));
    }
    if (ckpt->norm_offset_stored() && name.ends_with("norm.weight")) {
      for (float& v : values) v -= 1.0f;  // exact: the stored value lies in [0.5, 2] (Sterbenz)
    }
    if (config->moe.split_experts && name.find(".mlp.experts.") != std::string::npos) {
      split[name] = std::move(values);  // re-fused below
      continue;
    }
    blobs.push_back(MakeFloatTensor(name, e->shape, values, /*bf16=*/false));
  }
  if (config->moe.split_experts) FuseGptOssExperts(*config, split, blobs);
  std::filesystem::create_directories(out_dir);
  std::filesystem::copy_file(hf_dir + "/config.json", out_dir + "/config.json",
                             std::filesystem::copy_options::overwrite_existing);
  return WriteSafetensors(blobs, out_dir, 1);
}

struct GgufCase {
  std::string name;
  FixtureSpec spec;
  std::string type;
};

class GgufReferenceTest : public ::testing::TestWithParam<GgufCase> {};

TEST_P(GgufReferenceTest, LogprobsMatchTheDequantizedReference) {
  const GgufCase& c = GetParam();
  FixtureDir hf(c.name + "_hf"), deq(c.name + "_deq"), out(c.name + "_gguf");
  ASSERT_TRUE(WriteRandomCheckpoint(c.spec, hf.path()).ok());
  model::GgufExportOptions options;
  options.type = c.type;
  std::filesystem::create_directories(out.path());
  const std::string gguf_path = out.path() + "/model.gguf";
  auto written = model::ExportGguf(hf.path(), gguf_path, options);
  ASSERT_TRUE(written.ok()) << written.status();
  ASSERT_TRUE(WriteDequantized(gguf_path, hf.path(), deq.path()).ok());

  model::ModelOptions opts;
  opts.threads = 1;
  opts.max_tokens_per_step = 128;
  auto m = model::LlamaModel::Load(gguf_path, opts);
  ASSERT_TRUE(m.ok()) << m.status();
  const int vocab = c.spec.vocab_size;
  const std::vector<int32_t> ids = TestIds(40, vocab, 1);
  auto diffs = DiffsAgainstReference(**m, deq.path(), ids, vocab);
  ASSERT_TRUE(diffs.ok()) << diffs.status();
  const std::vector<double>& per_position = *diffs;
  std::vector<double> sorted = per_position;
  std::sort(sorted.begin(), sorted.end());
  const double worst = sorted.back(), median = sorted[sorted.size() / 2];
  const auto traits = quant::FindBlockTypeByName(c.type);
  const bool exact = traits && !traits->quantized;
  std::printf("[ gguf ] %s: |logprob diff| max %.3g, median over positions %.3g\n", c.name.c_str(),
              worst, median);
  if (c.type == "F32") {
    // The lossless type also matches the original checkpoint, so the exporter's name mapping,
    // permutation and (gpt-oss) expert splitting are checked too, not only the reader's.
    auto d = DiffsAgainstReference(**m, hf.path(), ids, vocab);
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_LE(*std::max_element(d->begin(), d->end()), kFloatTol)
        << "against the original checkpoint";
  }
  if (exact || c.spec.num_experts == 0) {
    EXPECT_LE(worst, exact ? kFloatTol : kQuantTol);
  } else {
    // Top-k routing is discontinuous: a token whose router logits tie to within the
    // activation rounding may take another expert, and then its logprobs move by far more
    // than the rounding. Such positions are a minority (a flip in an early layer also nudges
    // later positions through its keys and values): the median position stays within the
    // dense bound.
    EXPECT_LE(median, kQuantTol);
  }
}

// Rows of 256 and 512 elements, so the K-quants' 256-element super-blocks apply to every
// matrix (the presets' 64-wide models would fall back to the 32-element types).
FixtureSpec Wide(FixtureSpec s) {
  const int head_dim = s.hidden_size / s.num_attention_heads,
            group = s.num_attention_heads / s.num_key_value_heads;
  s.hidden_size = 256;
  s.intermediate_size = 512;
  s.num_attention_heads = s.hidden_size / head_dim;  // hidden / heads stays the head size
  s.num_key_value_heads = s.num_attention_heads / group;
  return s;
}

// GGUF has no key for Gemma's query scale: llama.cpp assumes head_dim (gguf_export.h refuses
// anything else), so the Gemma fixtures use that.
FixtureSpec GgufExpressible(FixtureSpec s) {
  if (s.arch == Arch::kGemma2 || s.arch == Arch::kGemma3) s.query_pre_attn_scalar = s.head_dim;
  // Nor for YaRN's `truncate` (gpt-oss writes false): llama.cpp always truncates.
  if (s.arch == Arch::kGptOss) s.rope_scaling.truncate = true;
  return s;
}

std::vector<GgufCase> Cases() {
  std::vector<GgufCase> v;
  auto add = [&](const std::string& arch, const FixtureSpec& spec, const std::string& type) {
    v.push_back({arch + "_" + type, spec, type});
  };
  FixtureSpec llama3 = Wide(LlamaPreset());
  llama3.rope_scaling = Llama3Rope(8.0, 32);
  for (const char* type : {"F32", "F16", "Q8_0", "Q4_K_M", "Q6_K", "Q5_K_M"})
    add("llama", Wide(LlamaPreset()), type);
  add("llama3", llama3, "Q4_K_M");
  for (const char* type : {"Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "IQ4_NL",
                           "IQ4_XS", "MXFP4", "BF16"}) {
    add("llama", Wide(LlamaPreset()), type);
  }
  for (const auto& [arch, preset] : AllPresets()) {
    if (arch == "llama" || arch == "gptoss_mxfp4" || arch == "yarn_llama") continue;
    const FixtureSpec spec = GgufExpressible(preset);
    add(arch, spec, "F32");
    add(arch, spec, "Q8_0");
    add(arch, Wide(spec), "Q4_K_M");
  }
  // gpt-oss as llama.cpp's own files hold it: MXFP4 experts (every matrix MXFP4 here).
  add("gptoss", Wide(GgufExpressible(GptOssPreset())), "MXFP4");
  // Experts in each K-quant alone (the preset mixes Q4_K and Q6_K experts).
  add("mixtral", Wide(MixtralPreset()), "Q4_K");
  add("mixtral", Wide(MixtralPreset()), "Q6_K");
  return v;
}

INSTANTIATE_TEST_SUITE_P(Types, GgufReferenceTest, ::testing::ValuesIn(Cases()),
                         [](const auto& p) { return p.param.name; });

}  // namespace
}  // namespace kvserve::testing::hf
