// WriteRandomCheckpoint: a model directory exactly as transformers' save_pretrained leaves
// it for the spec's architecture (config.json with the real `architectures`, `model_type`
// and field names; model.safetensors or two shards plus model.safetensors.index.json, with
// the checkpoint's tensor names), filled with deterministic random weights. No tokenizer.
//
// Every tensor draws from its own std::mt19937_64 seeded by (spec.seed, tensor name), so a
// tensor's values do not depend on which other tensors exist: two specs that differ only in
// a config switch (window, rope scaling, softcap) share their weights. Draws are uniform
// (fully specified by the engine, unlike std::normal_distribution) with the std given:
//   projections weight_std; embeddings embed_std; biases 0.05; sinks 0.5;
//   norms 1 + U(±0.1), Gemma's (1 + w) norms U(±0.1);
//   gpt-oss experts: random MXFP4 codes with scales around 2^(mxfp4_scale_exponent - 127),
//   stored as codes (ExpertFormat::kMxfp4) or as their exact dequantised values.
// BF16 tensors hold round-to-nearest-even of the fp32 draws.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "tests/support/hf_models/fixture_spec.h"

namespace kvserve::testing::hf {

// Creates `dir` if needed and (over)writes config.json and the safetensors file(s).
// Inconsistent specs (a head_dim the family cannot express, MXFP4 sizes not multiples of 32,
// a longrope list of the wrong length) are InvalidArgument naming the field.
absl::Status WriteRandomCheckpoint(const FixtureSpec& spec, const std::string& dir);

// The config.json text the writer emits for `spec` (exposed for tests).
std::string ConfigJson(const FixtureSpec& spec);

}  // namespace kvserve::testing::hf
