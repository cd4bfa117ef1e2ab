#include "tests/support/hf_models/hf_quant_writer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "model/safetensors.h"
#include "nlohmann/json.hpp"
#include "quant/fp16.h"
#include "tests/support/hf_models/safetensors_writer.h"

namespace kvserve::testing::hf {
namespace {

using json = nlohmann::json;

// Decoder-layer linear projections; routers ("...mlp.gate.weight",
// "...block_sparse_moe.gate.weight") stay float like real checkpoints.
bool IsQuantizedLinear(const std::string& name, const std::vector<int64_t>& shape) {
  if (shape.size() != 2 || !name.starts_with("model.layers.") || !name.ends_with(".weight")) {
    return false;
  }
  return !name.ends_with(".gate.weight");
}

// One matrix [out][in] as integers: w ≈ s * (q - z) per (row, group), input k in group gidx[k].
struct Quantized {
  int64_t out = 0, in = 0, group = 0;
  std::vector<int> gidx;  // [in]
  std::vector<int> q;     // [out][in], 0 .. 2^bits - 1
  std::vector<double> s;  // [out][groups], representable in the scale dtype
  std::vector<int> z;     // [out][groups]
};

double RoundScale(double v, const std::string& dtype) {
  if (dtype == "F16") return quant::Fp16ToFloat(quant::FloatToFp16(static_cast<float>(v)));
  if (dtype == "BF16") return F32FromBf16(Bf16FromF32(static_cast<float>(v)));
  return static_cast<float>(v);
}

Quantized Quantize(const std::vector<float>& w, int64_t out, int64_t in, const QuantSpec& spec,
                   const std::string& scale_dtype, uint32_t seed) {
  Quantized r;
  r.out = out;
  r.in = in;
  r.group = spec.group > 0 ? spec.group : in;
  const int64_t groups = in / r.group;
  std::vector<int> perm(in);
  for (int64_t k = 0; k < in; ++k) perm[k] = static_cast<int>(k);
  if (spec.gidx != QuantSpec::Gidx::kSequential) {
    std::mt19937 rng(seed);
    std::shuffle(perm.begin(), perm.end(), rng);
  }
  r.gidx.resize(in);
  for (int64_t j = 0; j < in; ++j) r.gidx[perm[j]] = static_cast<int>(j / r.group);
  if (spec.gidx == QuantSpec::Gidx::kUnequalGroups && groups > 1) r.gidx[perm[0]] = 1;
  std::vector<std::vector<int64_t>> members(groups);
  for (int64_t k = 0; k < in; ++k) members[r.gidx[k]].push_back(k);
  const int levels = 1 << spec.bits, mid = levels / 2;
  r.q.resize(out * in);
  r.s.resize(out * groups);
  r.z.resize(out * groups);
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t g = 0; g < groups; ++g) {
      const float* x = &w[o * in];
      double lo = 0, hi = 0;
      for (int64_t k : members[g]) {
        lo = std::min<double>(lo, x[k]);
        hi = std::max<double>(hi, x[k]);
      }
      double s;
      int z;
      if (spec.symmetric) {
        s = RoundScale(std::max(-lo, hi) / (mid - 1), scale_dtype);
        z = mid;
      } else {
        s = RoundScale((hi - lo) / (levels - 1), scale_dtype);
        z = std::clamp(static_cast<int>(std::lround(-lo / s)), 0, levels - 1);
      }
      r.s[o * groups + g] = s;
      r.z[o * groups + g] = z;
      for (int64_t k : members[g]) {
        r.q[o * in + k] = std::clamp(static_cast<int>(std::lround(x[k] / s)) + z, 0, levels - 1);
      }
    }
  }
  return r;
}

TensorBlob I32Tensor(std::string name, std::vector<int64_t> shape, const std::vector<uint32_t>& v) {
  TensorBlob b{std::move(name), "I32", std::move(shape), {}};
  b.bytes.resize(v.size() * 4);
  std::memcpy(b.bytes.data(), v.data(), b.bytes.size());
  return b;
}

TensorBlob ScaleTensor(std::string name, std::vector<int64_t> shape, const std::vector<double>& v,
                       const std::string& dtype) {
  TensorBlob b{std::move(name), dtype, std::move(shape), {}};
  for (double x : v) {
    const float f = static_cast<float>(x);
    if (dtype == "F32") {
      uint8_t p[4];
      std::memcpy(p, &f, 4);
      b.bytes.insert(b.bytes.end(), p, p + 4);
    } else {
      const uint16_t h = dtype == "F16" ? quant::FloatToFp16(f) : Bf16FromF32(f);
      b.bytes.push_back(static_cast<uint8_t>(h & 0xff));
      b.bytes.push_back(static_cast<uint8_t>(h >> 8));
    }
  }
  return b;
}

// [G][out] from [out][G].
std::vector<double> Transposed(const std::vector<double>& v, int64_t out, int64_t groups) {
  std::vector<double> t(v.size());
  for (int64_t o = 0; o < out; ++o)
    for (int64_t g = 0; g < groups; ++g) t[g * out + o] = v[o * groups + g];
  return t;
}

// The packed tensors of one module, per format (digest §4.1-4.3).
void Pack(const std::string& p, const Quantized& m, const QuantSpec& spec,
          const std::string& scale_dtype, std::vector<TensorBlob>& out) {
  const int bits = spec.bits, per = 32 / bits;
  const int64_t groups = m.in / m.group;
  auto put = [&](uint32_t& word, int slot, int value) {
    word |= static_cast<uint32_t>(value & ((1 << bits) - 1)) << (bits * slot);
  };
  switch (spec.format) {
    case QuantFormat::kAwq: {
      // Along the output: column 8c + order[i] in nibble i, order = 0 2 4 6 1 3 5 7.
      static constexpr int kOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};
      std::vector<uint32_t> qw(m.in * m.out / 8, 0), qz(groups * m.out / 8, 0);
      for (int64_t i = 0; i < m.in; ++i)
        for (int64_t c = 0; c < m.out / 8; ++c)
          for (int n = 0; n < 8; ++n)
            put(qw[i * (m.out / 8) + c], n, m.q[(8 * c + kOrder[n]) * m.in + i]);
      for (int64_t g = 0; g < groups; ++g)
        for (int64_t c = 0; c < m.out / 8; ++c)
          for (int n = 0; n < 8; ++n)
            put(qz[g * (m.out / 8) + c], n, m.z[(8 * c + kOrder[n]) * groups + g]);
      out.push_back(I32Tensor(p + ".qweight", {m.in, m.out / 8}, qw));
      out.push_back(I32Tensor(p + ".qzeros", {groups, m.out / 8}, qz));
      out.push_back(
          ScaleTensor(p + ".scales", {groups, m.out}, Transposed(m.s, m.out, groups), "F16"));
      return;
    }
    case QuantFormat::kGptq: {
      // qweight along the input (row r: inputs per*r + j at bits*j); qzeros along the output.
      std::vector<uint32_t> qw(m.in / per * m.out, 0), qz(groups * m.out / per, 0);
      for (int64_t r = 0; r < m.in / per; ++r)
        for (int64_t o = 0; o < m.out; ++o)
          for (int j = 0; j < per; ++j) put(qw[r * m.out + o], j, m.q[o * m.in + per * r + j]);
      const int v1 = spec.gptq_v1 ? 1 : 0;
      for (int64_t g = 0; g < groups; ++g)
        for (int64_t c = 0; c < m.out / per; ++c)
          for (int j = 0; j < per; ++j)
            put(qz[g * (m.out / per) + c], j, m.z[(per * c + j) * groups + g] - v1);
      std::vector<uint32_t> gidx(m.gidx.begin(), m.gidx.end());
      out.push_back(I32Tensor(p + ".qweight", {m.in / per, m.out}, qw));
      out.push_back(I32Tensor(p + ".qzeros", {groups, m.out / per}, qz));
      out.push_back(
          ScaleTensor(p + ".scales", {groups, m.out}, Transposed(m.s, m.out, groups), "F16"));
      out.push_back(I32Tensor(p + ".g_idx", {m.in}, gidx));
      return;
    }
    case QuantFormat::kCtPack: {
      // weight_packed [out][in/per]: element per*k + i at bits*i, stored as signed + 2^(bits-1)
      // (our unsigned q already is that); zero points packed along the output, same offset.
      std::vector<uint32_t> qw(m.out * (m.in / per), 0);
      for (int64_t o = 0; o < m.out; ++o)
        for (int64_t k = 0; k < m.in / per; ++k)
          for (int i = 0; i < per; ++i)
            put(qw[o * (m.in / per) + k], i, m.q[o * m.in + per * k + i]);
      out.push_back(I32Tensor(p + ".weight_packed", {m.out, m.in / per}, qw));
      out.push_back(ScaleTensor(p + ".weight_scale", {m.out, groups}, m.s, scale_dtype));
      if (spec.gidx != QuantSpec::Gidx::kSequential) {  // actorder "group"
        out.push_back(I32Tensor(p + ".weight_g_idx", {m.in},
                                std::vector<uint32_t>(m.gidx.begin(), m.gidx.end())));
      }
      out.push_back(I32Tensor(p + ".weight_shape", {2},
                              {static_cast<uint32_t>(m.out), static_cast<uint32_t>(m.in)}));
      if (!spec.symmetric) {
        const int64_t rows = (m.out + per - 1) / per;
        std::vector<uint32_t> zp(rows * groups, 0);
        for (int64_t o = 0; o < m.out; ++o)
          for (int64_t g = 0; g < groups; ++g)
            put(zp[(o / per) * groups + g], static_cast<int>(o % per), m.z[o * groups + g]);
        out.push_back(I32Tensor(p + ".weight_zero_point", {rows, groups}, zp));
      }
      return;
    }
    case QuantFormat::kCtInt8: {  // I8 weight = q - 128 (signed), per-channel scale [out][1]
      TensorBlob w{p + ".weight", "I8", {m.out, m.in}, {}};
      for (int v : m.q) w.bytes.push_back(static_cast<uint8_t>(static_cast<int8_t>(v - 128)));
      out.push_back(std::move(w));
      out.push_back(ScaleTensor(p + ".weight_scale", {m.out, groups}, m.s, scale_dtype));
      return;
    }
  }
}

json QuantizationConfig(const QuantSpec& spec, const std::string& scale_dtype) {
  const int group = spec.group > 0 ? spec.group : -1;
  switch (spec.format) {
    case QuantFormat::kAwq:
      return {{"quant_method", "awq"}, {"bits", 4},         {"group_size", group},
              {"zero_point", true},    {"version", "gemm"}, {"modules_to_not_convert", nullptr}};
    case QuantFormat::kGptq:
      return {{"quant_method", "gptq"},
              {"bits", spec.bits},
              {"group_size", group},
              {"sym", spec.symmetric},
              {"desc_act", spec.gidx != QuantSpec::Gidx::kSequential},
              {"checkpoint_format", spec.gptq_v1 ? "gptq" : "gptq_v2"},
              {"damp_percent", 0.01},
              {"true_sequential", true}};
    case QuantFormat::kCtPack:
    case QuantFormat::kCtInt8: {
      json w = {
          {"num_bits", spec.bits},
          {"type", "int"},
          {"symmetric", spec.symmetric},
          {"dynamic", false},
          {"strategy", spec.group > 0 ? "group" : "channel"},
          {"group_size", spec.group > 0 ? json(spec.group) : json(nullptr)},
          {"actorder", spec.gidx == QuantSpec::Gidx::kSequential ? json(nullptr) : json("group")},
          {"observer", "minmax"}};
      json a = nullptr;
      if (spec.format == QuantFormat::kCtInt8) {
        a = {{"num_bits", 8},   {"type", "int"},       {"symmetric", true},
             {"dynamic", true}, {"strategy", "token"}, {"group_size", nullptr}};
      }
      (void)scale_dtype;
      return {{"quant_method", "compressed-tensors"},
              {"format", spec.format == QuantFormat::kCtPack ? "pack-quantized" : "int-quantized"},
              {"quantization_status", "compressed"},
              {"ignore", {"lm_head", "re:.*mlp.gate$", "re:.*block_sparse_moe.gate$"}},
              {"kv_cache_scheme", nullptr},
              {"config_groups",
               {{"group_0", {{"targets", {"Linear"}}, {"weights", w}, {"input_activations", a}}}}}};
    }
  }
  return nullptr;
}

}  // namespace

absl::Status WriteQuantizedFixture(const std::string& float_dir, const QuantSpec& spec,
                                   const std::string& quant_dir, const std::string& deq_dir) {
  auto ckpt = model::SafetensorsCheckpoint::Open(float_dir);
  if (!ckpt.ok()) return ckpt.status();
  const std::string scale_dtype =
      spec.format == QuantFormat::kAwq || spec.format == QuantFormat::kGptq ? "F16"
                                                                            : spec.scale_dtype;
  std::vector<TensorBlob> quant_blobs, deq_blobs;
  for (const std::string& name : ckpt->TensorNames()) {
    auto found = ckpt->Find(name);
    if (!found.ok()) return found.status();
    const std::vector<int64_t> shape = found->second->shape;
    std::vector<float> v(static_cast<size_t>(found->second->num_elements()));
    if (absl::Status s = ckpt->LoadF32(name, shape, v); !s.ok()) return s;
    if (!IsQuantizedLinear(name, shape)) {
      quant_blobs.push_back(MakeFloatTensor(name, shape, v, false));
      deq_blobs.push_back(MakeFloatTensor(name, shape, v, false));
      continue;
    }
    const int64_t out = shape[0], in = shape[1];
    if (spec.group > 0 && in % spec.group != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": ", in, " inputs, group ", spec.group));
    }
    const Quantized m =
        Quantize(v, out, in, spec, scale_dtype, static_cast<uint32_t>(quant_blobs.size() + 1));
    std::vector<float> deq(v.size());
    for (int64_t o = 0; o < out; ++o)
      for (int64_t k = 0; k < in; ++k) {
        const int64_t g = o * (in / m.group) + m.gidx[k];
        deq[o * in + k] = static_cast<float>(m.s[g] * (m.q[o * in + k] - m.z[g]));
      }
    deq_blobs.push_back(MakeFloatTensor(name, shape, deq, false));
    Pack(name.substr(0, name.size() - 7), m, spec, scale_dtype, quant_blobs);
  }
  std::ifstream in(float_dir + "/config.json");
  std::stringstream text;
  text << in.rdbuf();
  json config = json::parse(text.str());
  for (const std::string& dir : {quant_dir, deq_dir}) std::filesystem::create_directories(dir);
  std::ofstream(deq_dir + "/config.json") << config.dump(2);
  config["quantization_config"] = QuantizationConfig(spec, scale_dtype);
  std::ofstream(quant_dir + "/config.json") << config.dump(2);
  if (absl::Status s = WriteSafetensors(deq_blobs, deq_dir, 1); !s.ok()) return s;
  return WriteSafetensors(quant_blobs, quant_dir, spec.shards);
}

}  // namespace kvserve::testing::hf
