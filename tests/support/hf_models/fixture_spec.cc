#include "tests/support/hf_models/fixture_spec.h"

namespace kvserve::testing::hf {

std::string ArchitectureName(Arch arch) {
  switch (arch) {
    case Arch::kLlama:
      return "LlamaForCausalLM";
    case Arch::kQwen2:
      return "Qwen2ForCausalLM";
    case Arch::kQwen3:
      return "Qwen3ForCausalLM";
    case Arch::kMistral:
      return "MistralForCausalLM";
    case Arch::kGemma2:
      return "Gemma2ForCausalLM";
    case Arch::kGemma3:
      return "Gemma3ForCausalLM";
    case Arch::kPhi3:
      return "Phi3ForCausalLM";
    case Arch::kMixtral:
      return "MixtralForCausalLM";
    case Arch::kQwen3Moe:
      return "Qwen3MoeForCausalLM";
    case Arch::kGptOss:
      return "GptOssForCausalLM";
  }
  return "?";
}

std::string ModelType(Arch arch) {
  switch (arch) {
    case Arch::kLlama:
      return "llama";
    case Arch::kQwen2:
      return "qwen2";
    case Arch::kQwen3:
      return "qwen3";
    case Arch::kMistral:
      return "mistral";
    case Arch::kGemma2:
      return "gemma2";
    case Arch::kGemma3:
      return "gemma3_text";
    case Arch::kPhi3:
      return "phi3";
    case Arch::kMixtral:
      return "mixtral";
    case Arch::kQwen3Moe:
      return "qwen3_moe";
    case Arch::kGptOss:
      return "gpt_oss";
  }
  return "?";
}

bool IsGemma(Arch arch) { return arch == Arch::kGemma2 || arch == Arch::kGemma3; }

int RotaryDim(const FixtureSpec& spec) {
  return static_cast<int>(spec.head_dim * spec.partial_rotary_factor);
}

std::vector<std::string> LayerTypes(const FixtureSpec& spec) {
  if (!spec.layer_types.empty()) return spec.layer_types;
  std::vector<std::string> out;
  for (int i = 0; i < spec.num_hidden_layers; ++i) {
    bool sliding = false;
    switch (spec.arch) {
      // Gemma 2 and gpt-oss: `(i + 1) % 2` slides, so layer 0 is local.
      case Arch::kGemma2:
      case Arch::kGptOss:
        sliding = spec.sliding_window.has_value() && (i + 1) % 2 != 0;
        break;
      case Arch::kGemma3:
        sliding = spec.sliding_window.has_value() && (i + 1) % spec.sliding_window_pattern != 0;
        break;
      case Arch::kQwen2:
      case Arch::kQwen3:
      case Arch::kQwen3Moe:
        sliding = spec.use_sliding_window && spec.sliding_window && i >= spec.max_window_layers;
        break;
      default:
        sliding = spec.sliding_window.has_value();
        break;
    }
    out.push_back(sliding ? "sliding_attention" : "full_attention");
  }
  return out;
}

}  // namespace kvserve::testing::hf
