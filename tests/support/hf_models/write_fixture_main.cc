// hf_write_fixture: writes one random Hugging Face checkpoint (checkpoint_writer.h) to a
// directory, for benchmarks that load real model directories (bench/decode_bench --model).
// Test tooling, like the library it links: not part of the server.
//
//   hf_write_fixture --out DIR [--arch mixtral|mistral|qwen3moe|llama] [--hidden D]
//                    [--inter I] [--layers L] [--heads H] [--kv-heads K] [--vocab V]
//                    [--experts E] [--top-k k] [--dtype f32|bf16] [--seed S]
//
// The MoE benchmark of docs/moe.md pairs `--arch mixtral --experts 8 --top-k 2 --inter I`
// with `--arch mistral --inter 2I`: the same active parameters, all else equal.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "tests/support/hf_models/checkpoint_writer.h"
#include "tests/support/hf_models/presets.h"

namespace kvserve::testing::hf {
namespace {

int Main(int argc, char** argv) {
  FixtureSpec s = MixtralPreset();
  std::string out;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], v = argv[i + 1];
    const int n = std::atoi(v.c_str());
    if (flag == "--out") {
      out = v;
    } else if (flag == "--arch") {
      if (v == "mixtral") {
        s.arch = Arch::kMixtral;
      } else if (v == "mistral") {
        s.arch = Arch::kMistral;
      } else if (v == "qwen3moe") {
        s.arch = Arch::kQwen3Moe;
      } else if (v == "llama") {
        s.arch = Arch::kLlama;
      } else {
        std::fprintf(stderr, "unknown --arch %s\n", v.c_str());
        return 2;
      }
    } else if (flag == "--hidden") {
      s.hidden_size = n;
    } else if (flag == "--inter") {
      s.intermediate_size = n;
      s.moe_intermediate_size = n;
    } else if (flag == "--layers") {
      s.num_hidden_layers = n;
    } else if (flag == "--heads") {
      s.num_attention_heads = n;
    } else if (flag == "--kv-heads") {
      s.num_key_value_heads = n;
    } else if (flag == "--vocab") {
      s.vocab_size = n;
    } else if (flag == "--experts") {
      s.num_experts = n;
    } else if (flag == "--top-k") {
      s.num_experts_per_tok = n;
    } else if (flag == "--dtype") {
      s.dtype = v == "bf16" ? WeightDtype::kBf16 : WeightDtype::kF32;
    } else if (flag == "--seed") {
      s.seed = static_cast<uint64_t>(n);
    } else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  if (out.empty()) {
    std::fprintf(stderr, "usage: hf_write_fixture --out DIR [flags, see the source]\n");
    return 2;
  }
  s.head_dim = s.hidden_size / s.num_attention_heads;
  s.mlp_only_layers.clear();
  if (auto st = WriteRandomCheckpoint(s, out); !st.ok()) {
    std::fprintf(stderr, "hf_write_fixture: %s\n", std::string(st.message()).c_str());
    return 1;
  }
  std::printf("wrote %s (%s)\n", out.c_str(), ArchitectureName(s.arch).c_str());
  return 0;
}

}  // namespace
}  // namespace kvserve::testing::hf

int main(int argc, char** argv) { return kvserve::testing::hf::Main(argc, argv); }
