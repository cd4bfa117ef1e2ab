#include "tests/support/hf_models/fp8_checkpoint.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "model/safetensors.h"
#include "nlohmann/json.hpp"
#include "tests/support/hf_models/fp8_e4m3.h"
#include "tests/support/hf_models/safetensors_writer.h"

namespace kvserve::testing::hf {
namespace {

using json = nlohmann::json;

bool IsProjection(const std::string& name, const std::vector<int64_t>& shape,
                  const Fp8FixtureOptions& o) {
  if (shape.size() != 2 || !name.ends_with(".weight")) return false;
  if (name.find("embed_tokens") != std::string::npos || name.find("lm_head") != std::string::npos)
    return false;
  const std::string module = name.substr(0, name.size() - 7);
  if (module.ends_with(".gate")) return false;  // MoE routers stay unquantized
  return std::find(o.not_converted.begin(), o.not_converted.end(), module) == o.not_converted.end();
}

json IgnoreList(const Fp8FixtureOptions& o) {
  json ignore = json::array({"lm_head", "re:.*\\.gate$"});
  for (const std::string& m : o.not_converted) ignore.push_back(m);
  return ignore;
}

}  // namespace

std::string Fp8QuantizationConfigJson(const Fp8FixtureOptions& o) {
  json q;
  if (!o.compressed_tensors) {
    q = {{"quant_method", "fp8"},
         {"fmt", "e4m3"},
         {"activation_scheme", o.static_activations ? "static" : "dynamic"},
         {"modules_to_not_convert", IgnoreList(o)}};
    if (o.block_cols > 0) q["weight_block_size"] = {o.block_rows, o.block_cols};
    return q.dump();
  }
  json w = {{"type", "float"}, {"num_bits", 8}, {"symmetric", true}, {"dynamic", false}};
  if (o.block_rows == 0 && o.block_cols == 0) {
    w["strategy"] = "tensor";
  } else if (o.block_cols == 0) {
    w["strategy"] = "channel";
  } else if (o.block_rows == 1) {
    w["strategy"] = "group";
    w["group_size"] = o.block_cols;
  } else {
    w["strategy"] = "block";
    w["block_structure"] = {o.block_rows, o.block_cols};
  }
  json a = {{"type", "float"}, {"num_bits", 8}, {"symmetric", true}};
  a["dynamic"] = !o.static_activations;
  a["strategy"] = o.static_activations ? "tensor" : o.block_cols > 0 ? "group" : "token";
  if (!o.static_activations && o.block_cols > 0) a["group_size"] = 128;
  q = {{"quant_method", "compressed-tensors"},
       {"format", "float-quantized"},
       {"quantization_status", "compressed"},
       {"config_groups",
        {{"group_0", {{"targets", {"Linear"}}, {"weights", w}, {"input_activations", a}}}}},
       {"ignore", IgnoreList(o)},
       {"kv_cache_scheme", nullptr}};
  return q.dump();
}

absl::Status WriteFp8Checkpoint(const std::string& src_dir, const Fp8FixtureOptions& o,
                                const std::string& fp8_dir, const std::string& deq_dir) {
  auto ckpt = model::SafetensorsCheckpoint::Open(src_dir);
  if (!ckpt.ok()) return ckpt.status();
  std::vector<TensorBlob> fp8_blobs, deq_blobs;
  const std::string suffix =
      !o.compressed_tensors && o.block_cols > 0 ? "weight_scale_inv" : "weight_scale";
  for (const std::string& name : ckpt->TensorNames()) {
    auto found = ckpt->Find(name);
    if (!found.ok()) return found.status();
    const auto& [file, e] = *found;
    const std::span<const std::byte> raw = file->Bytes(*e);
    TensorBlob same{
        name, e->dtype, e->shape,
        std::vector<uint8_t>(reinterpret_cast<const uint8_t*>(raw.data()),
                             reinterpret_cast<const uint8_t*>(raw.data()) + raw.size())};
    if (!IsProjection(name, e->shape, o)) {
      fp8_blobs.push_back(same);
      deq_blobs.push_back(std::move(same));
      continue;
    }
    const int64_t rows = e->shape[0], cols = e->shape[1];
    std::vector<float> w(static_cast<size_t>(rows * cols));
    if (auto s = ckpt->LoadF32(name, e->shape, w); !s.ok()) return s;
    const int64_t br = o.block_rows == 0 ? rows : o.block_rows;
    const int64_t bc = o.block_cols == 0 ? cols : o.block_cols;
    const int64_t srows = (rows + br - 1) / br, scols = (cols + bc - 1) / bc;
    std::vector<float> scales(static_cast<size_t>(srows * scols));
    std::vector<uint8_t> codes(static_cast<size_t>(rows * cols));
    std::vector<float> deq(static_cast<size_t>(rows * cols));
    for (int64_t sr = 0; sr < srows; ++sr) {
      for (int64_t sc = 0; sc < scols; ++sc) {
        const int64_t r1 = std::min(rows, (sr + 1) * br), c1 = std::min(cols, (sc + 1) * bc);
        double amax = 0;
        for (int64_t r = sr * br; r < r1; ++r)
          for (int64_t c = sc * bc; c < c1; ++c)
            amax = std::max(amax, std::fabs(static_cast<double>(w[r * cols + c])));
        float s = amax > 0 ? static_cast<float>(amax / 448.0) : 1.0f;
        if (o.bf16_scales) s = F32FromBf16(Bf16FromF32(s));
        scales[static_cast<size_t>(sr * scols + sc)] = s;
        for (int64_t r = sr * br; r < r1; ++r) {
          for (int64_t c = sc * bc; c < c1; ++c) {
            const uint8_t code = E4m3FromDouble(w[r * cols + c] / static_cast<double>(s));
            codes[static_cast<size_t>(r * cols + c)] = code;
            deq[static_cast<size_t>(r * cols + c)] =
                static_cast<float>(E4m3Value(code) * static_cast<double>(s));
          }
        }
      }
    }
    const std::string module = name.substr(0, name.size() - 7);
    fp8_blobs.push_back({name, "F8_E4M3", e->shape, codes});
    std::vector<int64_t> scale_shape;
    if (o.block_rows == 0 && o.block_cols == 0) {
      scale_shape = o.compressed_tensors ? std::vector<int64_t>{1} : std::vector<int64_t>{};
    } else if (o.block_cols == 0) {
      scale_shape = {rows, 1};
    } else {
      scale_shape = {srows, scols};
    }
    fp8_blobs.push_back(MakeFloatTensor(module + "." + suffix, scale_shape, scales, o.bf16_scales));
    if (o.static_activations) {
      fp8_blobs.push_back(MakeFloatTensor(module + ".input_scale", {1}, {0.02f}, false));
    }
    deq_blobs.push_back(MakeFloatTensor(name, e->shape, deq, /*bf16=*/false));
  }
  std::ifstream in(src_dir + "/config.json");
  std::stringstream text;
  text << in.rdbuf();
  json config = json::parse(text.str(), nullptr, false);
  if (config.is_discarded()) return absl::InvalidArgumentError(src_dir + "/config.json: bad JSON");
  for (const std::string& dir : {fp8_dir, deq_dir}) std::filesystem::create_directories(dir);
  std::ofstream(deq_dir + "/config.json") << config.dump(2);
  config["quantization_config"] = json::parse(Fp8QuantizationConfigJson(o));
  std::ofstream(fp8_dir + "/config.json") << config.dump(2);
  if (auto s = WriteSafetensors(fp8_blobs, fp8_dir, 1); !s.ok()) return s;
  return WriteSafetensors(deq_blobs, deq_dir, 1);
}

}  // namespace kvserve::testing::hf
