#include "model/llama_weights.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "kernels/cpu/kv_quant.h"
#include "model/block_weights.h"
#include "model/hf_fp8_weights.h"

namespace kvserve::model {

void Project(const float* x, int64_t x_stride, const PackedProjection& w, const float* bias, float* y,
             int64_t y_stride, int64_t rows, int in, int out, bool accumulate) {
  if (w.quant != nullptr) {
    kernels::cpu::quant::QuantLinear(x, x_stride, *w.quant, bias, y, y_stride, rows, accumulate);
  } else if (w.bf16 != nullptr) {
    kernels::cpu::PackedLinearBf16(x, x_stride, w.bf16, bias, y, y_stride, rows, in, out, accumulate);
  } else if (w.fp16 != nullptr) {
    kernels::cpu::PackedLinearFp16(x, x_stride, w.fp16, bias, y, y_stride, rows, in, out, accumulate);
  } else {
    kernels::cpu::PackedLinear(x, x_stride, w.f32, bias, y, y_stride, rows, in, out, accumulate);
  }
}
namespace {

constexpr size_t kAlignBytes = 64;
size_t AlignBytes(size_t n) { return (n + kAlignBytes - 1) / kAlignBytes * kAlignBytes; }

size_t PackedBytes(const WeightSpec& s, WeightDtype d) {
  return AlignBytes(kernels::cpu::PackedLinearFloats(static_cast<int>(s.rows()), static_cast<int>(s.cols)) *
                    WeightDtypeBytes(d));
}

// The projections of a layer in a fixed order, for planning and filling alike:
// fn(spec, destination, is_expert). Absent ones (a MoE layer's dense MLP) are skipped.
template <typename Fn>
void ForEachProjection(const LayerWeightSpecs& s, LayerWeights& w, MoeLayerWeights& moe, Fn&& fn) {
  auto each = [&fn](const WeightSpec& spec, PackedProjection& dst, bool expert) {
    if (spec.present()) fn(spec, dst, expert);
  };
  each(s.qkv, w.qkv, false);
  each(s.o, w.o, false);
  each(s.gate_up, w.gate_up, false);
  each(s.down, w.down, false);
  each(s.router, moe.router, false);
  for (size_t e = 0; e < s.experts.size(); ++e) {
    each(s.experts[e].gate_up, moe.experts[e].gate_up, true);
    each(s.experts[e].down, moe.experts[e].down, true);
  }
}

// The vector weights (norms, biases, sinks) of a layer and where their pointers go.
template <typename Fn>
void ForEachVector(const LayerWeightSpecs& s, LayerWeights& w, MoeLayerWeights& moe, Fn&& fn) {
  fn(s.input_norm, w.input_norm);
  fn(s.qkv_bias, w.qkv_bias);
  fn(s.q_norm, w.q_norm);
  fn(s.k_norm, w.k_norm);
  fn(s.o_bias, w.o_bias);
  fn(s.post_attn_norm, w.post_attn_norm);
  fn(s.pre_ff_norm, w.pre_ff_norm);
  fn(s.post_ff_norm, w.post_ff_norm);
  fn(s.sinks, w.sinks);
  fn(s.router_bias, moe.router_bias);
  for (size_t e = 0; e < s.experts.size(); ++e) {
    fn(s.experts[e].gate_up_bias, moe.experts[e].gate_up_bias);
    fn(s.experts[e].down_bias, moe.experts[e].down_bias);
  }
}

}  // namespace

void LlamaWeights::FreeDeleter::operator()(std::byte* p) const { std::free(p); }

absl::StatusOr<LlamaWeights> LlamaWeights::Load(const ModelConfig& c, SafetensorsCheckpoint checkpoint, bool pack,
                                                WeightRange range) {
  LlamaWeights w;
  w.checkpoint_ = std::move(checkpoint);
  w.map_ = MapCheckpoint(c);
  w.hidden_ = c.hidden_size;
  w.packed_ = pack;
  const SafetensorsCheckpoint& ckpt = w.checkpoint_;
  const CheckpointMap& map = w.map_;
  w.layers_.resize(map.layers.size());
  w.moe_.resize(map.layers.size());
  for (size_t i = 0; i < map.layers.size(); ++i) {
    if (map.layers[i].experts.empty()) continue;
    w.moe_[i].experts.resize(map.layers[i].experts.size());
    w.layers_[i].moe = &w.moe_[i];
  }
  // A pipeline stage reads only its share (WeightRange).
  const size_t layer_begin = static_cast<size_t>(range.layer_begin);
  const size_t layer_end = range.layer_end < 0 ? map.layers.size() : static_cast<size_t>(range.layer_end);
  if (layer_begin >= layer_end || layer_end > map.layers.size()) {
    return absl::InvalidArgumentError(absl::StrCat("weights: layer range [", range.layer_begin, ", ",
                                                   range.layer_end, ") is not inside the model's ",
                                                   map.layers.size(), " layers"));
  }
  const bool first_stage = layer_begin == 0;
  const bool last_stage = layer_end == map.layers.size();

  // The embedding stays mapped (scanned once for NaN/inf, then its pages released; a
  // quantized one is only size-checked).
  KVS_ASSIGN_OR_RETURN(const bool embed_blocks, SpecHasBlocks(ckpt, map.embed));
  if (!first_stage) {
    // Not this stage's: the previous stage hands over the hidden states.
  } else if (embed_blocks) {
    KVS_ASSIGN_OR_RETURN(auto found, ckpt.Find(map.embed.names.front()));
    KVS_RETURN_IF_ERROR(CheckShape(*found.first, *found.second, map.embed, 0));
    KVS_ASSIGN_OR_RETURN(const quant::BlockType type, EntryBlockType(*found.first, *found.second));
    KVS_ASSIGN_OR_RETURN(const int64_t row_bytes, quant::RowBytes(type, map.embed.cols));
    w.embed_block_ = type;
    w.embed_row_bytes_ = static_cast<size_t>(row_bytes);
    w.embed_ = found.first->Bytes(*found.second).data();
  } else {
    KVS_ASSIGN_OR_RETURN(w.embed_dtype_, SpecDtype(ckpt, map.embed));
    KVS_ASSIGN_OR_RETURN(std::span<const std::byte> embed, MappedTensor(ckpt, map.embed, w.embed_dtype_));
    w.embed_ = embed.data();
    w.embed_row_bytes_ = static_cast<size_t>(map.embed.cols) * WeightDtypeBytes(w.embed_dtype_);
  }
  if (first_stage) ReleaseTensors(ckpt, map.embed);

  // Vectors (fp32, owned): plan offsets, then read.
  std::vector<std::pair<const WeightSpec*, const float**>> vectors;
  if (last_stage) vectors.push_back({&map.final_norm, &w.final_norm_});
  for (size_t i = layer_begin; i < layer_end; ++i) {
    ForEachVector(map.layers[i], w.layers_[i], w.moe_[i],
                  [&](const WeightSpec& s, const float*& dst) {
                    if (s.present()) vectors.push_back({&s, &dst});
                  });
  }
  size_t floats = 0;
  for (const auto& [spec, dst] : vectors) floats += AlignBytes(static_cast<size_t>(spec->elements()) * 4) / 4;
  w.small_.assign(floats, 0.0f);
  size_t at = 0;
  for (const auto& [spec, dst] : vectors) {
    std::span<float> out(w.small_.data() + at, static_cast<size_t>(spec->elements()));
    KVS_RETURN_IF_ERROR(ReadF32(ckpt, *spec, out));
    // Gemma's RMSNorm scales by (1 + w): the 1 is added here once, in fp32 as Hugging Face
    // adds it on every call, so the forward pass runs the plain RMSNorm kernel.
    if (c.norm_weight_offset && spec->is_norm && !ckpt.norm_offset_stored()) {
      for (float& x : out) x += 1.0f;
    }
    *dst = out.data();
    at += AlignBytes(out.size() * 4) / 4;
  }

  // Projections: streamed bytes are counted whether or not they are packed here.
  const int64_t norm_bytes = static_cast<int64_t>(floats) * 4;
  std::vector<std::pair<const WeightSpec*, PackedProjection*>> projections;
  std::vector<bool> is_expert;
  if (last_stage) {
    projections.push_back({&map.lm_head, &w.lm_head_});
    is_expert.push_back(false);
  }
  for (size_t i = layer_begin; i < layer_end; ++i) {
    ForEachProjection(map.layers[i], w.layers_[i], w.moe_[i],
                      [&](const WeightSpec& s, PackedProjection& dst, bool expert) {
                        projections.push_back({&s, &dst});
                        is_expert.push_back(expert);
                      });
  }
  // dtypes[i]: the projection's dtype, or nullopt when it is stored in ggml blocks.
  std::vector<std::optional<WeightDtype>> dtypes;
  std::vector<bool> fp8;  // ---- FP8 (hf_fp8_weights.h): stored as F8_E4M3 with scales ----
  size_t packed_bytes = 0, streamed = static_cast<size_t>(norm_bytes), largest = 0,
         expert_bytes = 0;
  for (size_t i = 0; i < projections.size(); ++i) {
    const WeightSpec* spec = projections[i].first;
    KVS_ASSIGN_OR_RETURN(const bool blocks, SpecHasBlocks(ckpt, *spec));
    KVS_ASSIGN_OR_RETURN(const bool is_fp8, SpecHasFp8(ckpt, *spec));
    fp8.push_back(is_fp8);
    size_t bytes = 0;
    if (blocks || is_fp8) {
      dtypes.push_back(std::nullopt);
      KVS_ASSIGN_OR_RETURN(bytes, StoredBytes(ckpt, *spec));
    } else {
      KVS_ASSIGN_OR_RETURN(WeightDtype d, SpecDtype(ckpt, *spec));
      dtypes.push_back(d);
      packed_bytes += PackedBytes(*spec, d);
      bytes = static_cast<size_t>(spec->elements()) * WeightDtypeBytes(d);
      largest = std::max(largest, bytes);
    }
    (is_expert[i] ? expert_bytes : streamed) += bytes;
  }
  // A token reads top_k of each MoE layer's experts (all experts have the same shape).
  if (c.moe.num_experts > 0) {
    streamed +=
        static_cast<size_t>(static_cast<double>(expert_bytes) * c.moe.top_k / c.moe.num_experts);
  }
  w.streamed_bytes_ = streamed;
  w.all_bf16_ = std::all_of(dtypes.begin(), dtypes.end(), [](auto d) { return d == WeightDtype::kBf16; });
  w.all_fp16_ = std::all_of(dtypes.begin(), dtypes.end(), [](auto d) { return d == WeightDtype::kF16; });
  w.owned_bytes_ = w.small_.size() * sizeof(float);
  if (!pack) return w;

  // (Nothing to allocate when every projection is stored in blocks.)
  if (packed_bytes > 0) {
    w.packed_storage_.reset(static_cast<std::byte*>(std::aligned_alloc(kAlignBytes, AlignBytes(packed_bytes))));
  }
  if (packed_bytes > 0 && w.packed_storage_ == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat("cannot allocate ", packed_bytes, " bytes of packed weights"));
  }
  w.owned_bytes_ += packed_bytes;
  // One staging buffer, the size of the largest stacked projection, for the row-major
  // matrix before packing; freed when loading ends.
  std::vector<std::byte> staging(largest);
  size_t cursor = 0;
  for (size_t i = 0; i < projections.size(); ++i) {
    const WeightSpec& spec = *projections[i].first;
    if (!dtypes[i]) {
      KVS_ASSIGN_OR_RETURN(kernels::cpu::quant::QuantMatrix m,
                           fp8[i] ? PackFp8Projection(ckpt, spec, c.fp8)
                                  : PackBlockProjection(ckpt, spec));
      w.owned_bytes_ += m.bytes();
      w.quant_.push_back(std::make_unique<kernels::cpu::quant::QuantMatrix>(std::move(m)));
      projections[i].second->quant = w.quant_.back().get();
      continue;
    }
    const WeightDtype d = *dtypes[i];
    const int out = static_cast<int>(spec.rows()), in = static_cast<int>(spec.cols);
    const std::span<std::byte> rows(staging.data(), static_cast<size_t>(spec.elements()) * WeightDtypeBytes(d));
    KVS_RETURN_IF_ERROR(ReadRaw(ckpt, spec, d, rows));
    std::byte* dst = w.packed_storage_.get() + cursor;
    PackedProjection& pp = *projections[i].second;
    switch (d) {
      case WeightDtype::kF32:
        kernels::cpu::PackLinearWeights(reinterpret_cast<const float*>(rows.data()), out, in,
                                        reinterpret_cast<float*>(dst));
        pp.f32 = reinterpret_cast<const float*>(dst);
        break;
      case WeightDtype::kBf16:
        kernels::cpu::PackLinearWeightsBf16(reinterpret_cast<const uint16_t*>(rows.data()), out, in,
                                            reinterpret_cast<uint16_t*>(dst));
        pp.bf16 = reinterpret_cast<const uint16_t*>(dst);
        break;
      case WeightDtype::kF16:
        kernels::cpu::PackLinearWeightsFp16(reinterpret_cast<const uint16_t*>(rows.data()), out, in,
                                            reinterpret_cast<uint16_t*>(dst));
        pp.fp16 = reinterpret_cast<const uint16_t*>(dst);
        break;
    }
    cursor += PackedBytes(spec, d);
  }
  KVS_CHECK(cursor == packed_bytes, "packed weight plan and fill disagree");
  return w;
}

void LlamaWeights::EmbedRows(const int32_t* ids, int64_t n, float* out) const {
  const auto d = static_cast<size_t>(hidden_);
  if (embed_block_) {
    const quant::BlockTraits& traits = quant::Traits(*embed_block_);
    for (int64_t i = 0; i < n; ++i) {
      traits.dequantize(embed_ + static_cast<size_t>(ids[i]) * embed_row_bytes_, out + static_cast<size_t>(i) * d,
                        hidden_);
    }
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    const size_t row = static_cast<size_t>(ids[i]) * d;
    float* dst = out + static_cast<size_t>(i) * d;
    switch (embed_dtype_) {
      case WeightDtype::kF32:
        std::memcpy(dst, embed_ + row * 4, d * 4);
        break;
      case WeightDtype::kBf16:
      case WeightDtype::kF16:
        for (size_t k = 0; k < d; ++k) {
          uint16_t b;
          std::memcpy(&b, embed_ + (row + k) * 2, 2);
          dst[k] = embed_dtype_ == WeightDtype::kBf16 ? kernels::cpu::Bf16ToFloat(b) : kernels::cpu::HalfToFloat(b);
        }
        break;
    }
  }
}

}  // namespace kvserve::model
