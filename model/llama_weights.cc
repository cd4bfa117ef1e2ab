#include "model/llama_weights.h"

#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "kernels/cpu/packed_linear.h"

namespace kvserve::model {
namespace {

constexpr size_t kAlignFloats = 16;  // 64 bytes
size_t Align(size_t n) { return (n + kAlignFloats - 1) / kAlignFloats * kAlignFloats; }

// Offsets (in floats) of one layer's pieces inside storage_.
struct LayerOffsets {
  size_t input_norm, qkv, qkv_bias, o, o_bias, post_norm, gate_up, down;
};

// Loads named tensors into consecutive rows of one destination matrix.
class Loader {
 public:
  Loader(const SafetensorsCheckpoint& ckpt, std::vector<float>& storage) : ckpt_(ckpt), storage_(storage) {}

  // Copies tensor `name` of shape `shape` to storage_[offset...].
  absl::Status Load(const std::string& name, std::vector<int64_t> shape, size_t offset) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return ckpt_.LoadF32(name, shape, std::span<float>(storage_.data() + offset, static_cast<size_t>(n)));
  }

 private:
  const SafetensorsCheckpoint& ckpt_;
  std::vector<float>& storage_;
};

}  // namespace

absl::StatusOr<LlamaWeights> LlamaWeights::Load(const ModelConfig& c, const SafetensorsCheckpoint& ckpt) {
  const int64_t d = c.hidden_size;
  const int64_t q = c.q_size();
  const int64_t kv = c.kv_size();
  const int64_t inter = c.intermediate_size;
  const int64_t vocab = c.vocab_size;
  const int64_t qkv_rows = q + 2 * kv;

  // Plan the single allocation.
  size_t cursor = 0;
  auto take = [&](int64_t floats) {
    const size_t at = cursor;
    cursor += Align(static_cast<size_t>(floats));
    return at;
  };
  const size_t embed_off = take(vocab * d);
  const size_t norm_off = take(d);
  const size_t lm_head_off = c.tie_word_embeddings ? embed_off : take(vocab * d);
  std::vector<LayerOffsets> offs(static_cast<size_t>(c.num_layers));
  for (auto& o : offs) {
    o.input_norm = take(d);
    o.qkv = take(qkv_rows * d);
    o.qkv_bias = c.qkv_bias ? take(qkv_rows) : 0;
    o.o = take(d * q);
    o.o_bias = c.o_bias ? take(d) : 0;
    o.post_norm = take(d);
    o.gate_up = take(2 * inter * d);
    o.down = take(d * inter);
  }

  LlamaWeights w;
  w.storage_.assign(cursor, 0.0f);
  Loader l(ckpt, w.storage_);
  KVS_RETURN_IF_ERROR(l.Load("model.embed_tokens.weight", {vocab, d}, embed_off));
  KVS_RETURN_IF_ERROR(l.Load("model.norm.weight", {d}, norm_off));
  if (!c.tie_word_embeddings) KVS_RETURN_IF_ERROR(l.Load("lm_head.weight", {vocab, d}, lm_head_off));

  for (int i = 0; i < c.num_layers; ++i) {
    const LayerOffsets& o = offs[static_cast<size_t>(i)];
    const std::string p = absl::StrCat("model.layers.", i, ".");
    KVS_RETURN_IF_ERROR(l.Load(p + "input_layernorm.weight", {d}, o.input_norm));
    KVS_RETURN_IF_ERROR(l.Load(p + "self_attn.q_proj.weight", {q, d}, o.qkv));
    KVS_RETURN_IF_ERROR(l.Load(p + "self_attn.k_proj.weight", {kv, d}, o.qkv + q * d));
    KVS_RETURN_IF_ERROR(l.Load(p + "self_attn.v_proj.weight", {kv, d}, o.qkv + (q + kv) * d));
    if (c.qkv_bias) {
      KVS_RETURN_IF_ERROR(l.Load(p + "self_attn.q_proj.bias", {q}, o.qkv_bias));
      KVS_RETURN_IF_ERROR(l.Load(p + "self_attn.k_proj.bias", {kv}, o.qkv_bias + q));
      KVS_RETURN_IF_ERROR(l.Load(p + "self_attn.v_proj.bias", {kv}, o.qkv_bias + q + kv));
    }
    KVS_RETURN_IF_ERROR(l.Load(p + "self_attn.o_proj.weight", {d, q}, o.o));
    if (c.o_bias) KVS_RETURN_IF_ERROR(l.Load(p + "self_attn.o_proj.bias", {d}, o.o_bias));
    KVS_RETURN_IF_ERROR(l.Load(p + "post_attention_layernorm.weight", {d}, o.post_norm));
    KVS_RETURN_IF_ERROR(l.Load(p + "mlp.gate_proj.weight", {inter, d}, o.gate_up));
    KVS_RETURN_IF_ERROR(l.Load(p + "mlp.up_proj.weight", {inter, d}, o.gate_up + inter * d));
    KVS_RETURN_IF_ERROR(l.Load(p + "mlp.down_proj.weight", {d, inter}, o.down));
  }

  const float* base = w.storage_.data();
  w.embed_ = base + embed_off;
  w.final_norm_ = base + norm_off;
  w.lm_head_ = base + lm_head_off;
  for (const auto& o : offs) {
    LayerWeights lw;
    lw.input_norm = base + o.input_norm;
    lw.qkv = base + o.qkv;
    lw.qkv_bias = c.qkv_bias ? base + o.qkv_bias : nullptr;
    lw.o = base + o.o;
    lw.o_bias = c.o_bias ? base + o.o_bias : nullptr;
    lw.post_norm = base + o.post_norm;
    lw.gate_up = base + o.gate_up;
    lw.down = base + o.down;
    w.layers_.push_back(lw);
  }
  // Packed copies for the forward pass (see the header): bf16 or fp16 from the checkpoint's
  // own bytes when it stores the projections so, else fp32.
  KVS_ASSIGN_OR_RETURN(auto probe, ckpt.Find("model.layers.0.mlp.gate_proj.weight"));
  KVS_ASSIGN_OR_RETURN(auto head_probe,
                       ckpt.Find(c.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight"));
  const std::string half_dtype =
      c.num_layers > 0 && probe.second->dtype == head_probe.second->dtype &&
              (probe.second->dtype == "BF16" || probe.second->dtype == "F16")
          ? probe.second->dtype
          : "";
  const bool half = !half_dtype.empty();
  using kernels::cpu::PackedLinearFloats;
  size_t packed_elems = Align(PackedLinearFloats(static_cast<int>(vocab), static_cast<int>(d)));
  const size_t per_layer = Align(PackedLinearFloats(static_cast<int>(qkv_rows), static_cast<int>(d))) +
                           Align(PackedLinearFloats(static_cast<int>(d), static_cast<int>(q))) +
                           Align(PackedLinearFloats(static_cast<int>(2 * inter), static_cast<int>(d))) +
                           Align(PackedLinearFloats(static_cast<int>(d), static_cast<int>(inter)));
  packed_elems += per_layer * static_cast<size_t>(c.num_layers);
  size_t pc = 0;
  std::vector<uint16_t> rows_half;  // one stacked row-major matrix, before packing
  // Packs the row-major fp32 matrix `src` [out][in], or (bf16/fp16) the checkpoint tensors
  // `names` stacked by rows.
  auto pack = [&](const float* src, const std::vector<std::string>& names, int64_t out,
                  int64_t in) -> absl::StatusOr<PackedProjection> {
    PackedProjection pp;
    if (!half) {
      float* dst = w.packed_.data() + pc;
      kernels::cpu::PackLinearWeights(src, static_cast<int>(out), static_cast<int>(in), dst);
      pp.f32 = dst;
    } else {
      rows_half.resize(static_cast<size_t>(out * in));
      size_t at = 0;
      for (const std::string& name : names) {
        KVS_ASSIGN_OR_RETURN(auto found, ckpt.Find(name));
        if (found.second->dtype != half_dtype) {
          return absl::InvalidArgumentError(absl::StrCat(name, " is ", found.second->dtype, "; a ", half_dtype,
                                                          " checkpoint needs every projection in ", half_dtype));
        }
        const auto bytes = found.first->Bytes(*found.second);
        if (at + bytes.size() / 2 > rows_half.size()) return absl::InvalidArgumentError(absl::StrCat(name, ": too large"));
        std::memcpy(rows_half.data() + at, bytes.data(), bytes.size());
        at += bytes.size() / 2;
      }
      if (at != rows_half.size()) return absl::InvalidArgumentError(absl::StrCat(names.front(), ": wrong size"));
      uint16_t* dst = w.packed_half_.data() + pc;
      if (half_dtype == "BF16") {
        kernels::cpu::PackLinearWeightsBf16(rows_half.data(), static_cast<int>(out), static_cast<int>(in), dst);
        pp.bf16 = dst;
      } else {
        kernels::cpu::PackLinearWeightsFp16(rows_half.data(), static_cast<int>(out), static_cast<int>(in), dst);
        pp.fp16 = dst;
      }
    }
    pc += Align(PackedLinearFloats(static_cast<int>(out), static_cast<int>(in)));
    return pp;
  };
  if (half) {
    w.packed_half_.assign(packed_elems, 0);
  } else {
    w.packed_.assign(packed_elems, 0.0f);
  }
  KVS_ASSIGN_OR_RETURN(w.lm_head_packed_,
                       pack(w.lm_head_, {c.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight"},
                            vocab, d));
  for (int i = 0; i < c.num_layers; ++i) {
    LayerWeights& lw = w.layers_[static_cast<size_t>(i)];
    const std::string p = absl::StrCat("model.layers.", i, ".");
    KVS_ASSIGN_OR_RETURN(lw.qkv_packed, pack(lw.qkv, {p + "self_attn.q_proj.weight", p + "self_attn.k_proj.weight",
                                                      p + "self_attn.v_proj.weight"}, qkv_rows, d));
    KVS_ASSIGN_OR_RETURN(lw.o_packed, pack(lw.o, {p + "self_attn.o_proj.weight"}, d, q));
    KVS_ASSIGN_OR_RETURN(lw.gate_up_packed,
                         pack(lw.gate_up, {p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"}, 2 * inter, d));
    KVS_ASSIGN_OR_RETURN(lw.down_packed, pack(lw.down, {p + "mlp.down_proj.weight"}, d, inter));
  }
  KVS_CHECK(pc == packed_elems, "packed weight plan and fill disagree");

  // Norms stream as fp32; the packed projections and lm_head at their packed width.
  const int64_t norm_params = d * (2 * static_cast<int64_t>(c.num_layers) + 1);
  const int64_t matrix_params = c.num_parameters() - (c.tie_word_embeddings ? 0 : vocab * d) - norm_params;
  w.streamed_bytes_ = static_cast<size_t>(norm_params) * sizeof(float) +
                      static_cast<size_t>(matrix_params) * (half ? sizeof(uint16_t) : sizeof(float));
  return w;
}

}  // namespace kvserve::model
