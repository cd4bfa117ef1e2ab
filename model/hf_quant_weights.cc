#include "model/hf_quant_weights.h"

#include <algorithm>
#include <cstring>
#include <span>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/absl_compat.h"
#include "base/check.h"
#include "kernels/cpu/kv_quant.h"  // HalfToFloat, Bf16ToFloat
#include "quant/fp16.h"

namespace kvserve::model {
namespace {

using quant::BlockType;

// AutoAWQ's nibble order: nibble i of a packed word holds output column 8c + kAwqOrder[i].
constexpr int kAwqOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};

struct Found {
  const TensorFile* file = nullptr;
  const SafetensorsEntry* entry = nullptr;
};

absl::Status ModuleError(const std::string& name, std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("tensor \"", name, "\": ", base::AsAbsl(what)));
}

absl::StatusOr<Found> Get(const SafetensorsCheckpoint& ckpt, const std::string& name) {
  KVS_ASSIGN_OR_RETURN(auto f, ckpt.Find(name));
  return Found{f.first, f.second};
}

std::string ShapeText(const std::vector<int64_t>& s) {
  return absl::StrCat("[", absl::StrJoin(s, ", "), "]");
}

absl::Status Expect(const Found& t, std::initializer_list<std::string_view> dtypes,
                    const std::vector<int64_t>& shape) {
  const SafetensorsEntry& e = *t.entry;
  if (std::find(dtypes.begin(), dtypes.end(), e.dtype) == dtypes.end()) {
    std::vector<std::string> names(dtypes.begin(), dtypes.end());
    return ModuleError(
        e.name, absl::StrCat("dtype ", e.dtype, ", expected ", absl::StrJoin(names, " or ")));
  }
  if (e.shape != shape) {
    return ModuleError(e.name,
                       absl::StrCat("shape ", ShapeText(e.shape), ", expected ", ShapeText(shape)));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int64_t>> Shape2(const Found& t) {
  if (t.entry->shape.size() != 2) {
    return ModuleError(t.entry->name,
                       absl::StrCat("shape ", ShapeText(t.entry->shape), " is not 2-D"));
  }
  return t.entry->shape;
}

// Integer elements (I8, I32, I64) widened to int64.
std::vector<int64_t> LoadInts(const Found& t) {
  const std::span<const std::byte> b = t.file->Bytes(*t.entry);
  const size_t n = b.size() / t.entry->dtype_bytes;
  std::vector<int64_t> out(n);
  for (size_t i = 0; i < n; ++i) {
    if (t.entry->dtype == "I8") {
      out[i] = static_cast<int8_t>(b[i]);
    } else if (t.entry->dtype == "I32") {
      int32_t v;
      std::memcpy(&v, b.data() + 4 * i, 4);
      out[i] = v;
    } else {
      std::memcpy(&out[i], b.data() + 8 * i, 8);
    }
  }
  return out;
}

// The stored scale values exactly (F16, BF16, F32).
std::vector<float> LoadScales(const Found& t) {
  const std::span<const std::byte> b = t.file->Bytes(*t.entry);
  const size_t n = b.size() / t.entry->dtype_bytes;
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) {
    if (t.entry->dtype == "F32") {
      std::memcpy(&out[i], b.data() + 4 * i, 4);
      continue;
    }
    uint16_t h;
    std::memcpy(&h, b.data() + 2 * i, 2);
    out[i] = t.entry->dtype == "F16" ? kernels::cpu::HalfToFloat(h) : kernels::cpu::Bf16ToFloat(h);
  }
  return out;
}

// Field k of width `bits` of a packed 32-bit word.
int Field(int64_t word, int bits, int k) {
  return static_cast<int>((static_cast<uint32_t>(word) >> (bits * k)) & ((1u << bits) - 1));
}

std::string MarkerOf(const HfQuantConfig& cfg) {
  switch (cfg.method) {
    case HfQuantMethod::kAwq:
    case HfQuantMethod::kGptq:
      return ".qweight";
    case HfQuantMethod::kCompressedTensors:
      return cfg.w8a8 ? ".weight_scale" : ".weight_packed";
  }
  return "";
}

// Scales [out][G] (transposed from AWQ/GPTQ's [G][out]) and zeros [out][G], checked.
struct Groups {
  int64_t count = 0;  // G
  std::vector<float> scales;
  std::vector<int32_t> zeros;
  bool fp16 = false;
};

absl::StatusOr<Groups> ReadGroups(const SafetensorsCheckpoint& ckpt, const HfQuantConfig& cfg,
                                  const std::string& p, int64_t out, int64_t in) {
  Groups g;
  const int bits = cfg.bits;
  const int per_word = 32 / bits;
  if (cfg.method == HfQuantMethod::kAwq || cfg.method == HfQuantMethod::kGptq) {
    KVS_ASSIGN_OR_RETURN(Found s, Get(ckpt, p + ".scales"));
    KVS_ASSIGN_OR_RETURN(auto ss, Shape2(s));
    g.count = ss[0];
    KVS_RETURN_IF_ERROR(Expect(s, {"F16"}, {g.count, out}));
    KVS_ASSIGN_OR_RETURN(Found z, Get(ckpt, p + ".qzeros"));
    if (out * bits % 32 != 0)
      return ModuleError(z.entry->name, "output count does not fill whole words");
    KVS_RETURN_IF_ERROR(Expect(z, {"I32"}, {g.count, out * bits / 32}));
    const std::vector<float> sv = LoadScales(s);
    const std::vector<int64_t> zv = LoadInts(z);
    g.scales.resize(out * g.count);
    g.zeros.resize(out * g.count);
    const bool awq = cfg.method == HfQuantMethod::kAwq;
    for (int64_t gi = 0; gi < g.count; ++gi) {
      for (int64_t o = 0; o < out; ++o) g.scales[o * g.count + gi] = sv[gi * out + o];
      for (int64_t c = 0; c < out / per_word; ++c) {
        for (int k = 0; k < per_word; ++k) {
          const int64_t o = awq ? 8 * c + kAwqOrder[k] : per_word * c + k;
          g.zeros[o * g.count + gi] =
              Field(zv[gi * (out / per_word) + c], bits, k) + (cfg.gptq_v1_zeros ? 1 : 0);
        }
      }
    }
    g.fp16 = true;
  } else {  // compressed-tensors: [out][G]
    KVS_ASSIGN_OR_RETURN(Found s, Get(ckpt, p + ".weight_scale"));
    KVS_ASSIGN_OR_RETURN(auto ss, Shape2(s));
    g.count = ss[1];
    KVS_RETURN_IF_ERROR(Expect(s, {"F16", "BF16", "F32"}, {out, g.count}));
    g.scales = LoadScales(s);
    g.fp16 = s.entry->dtype == "F16";
    const int mid = 1 << (bits - 1);
    g.zeros.assign(out * g.count, mid);
    const std::string zname = p + ".weight_zero_point";
    if (ckpt.Contains(zname)) {
      KVS_ASSIGN_OR_RETURN(Found z, Get(ckpt, zname));
      const std::vector<int64_t> zv = LoadInts(z);
      if (z.entry->dtype == "I32" && !cfg.w8a8) {  // packed along the output, offset stored
        const int64_t words = (out + per_word - 1) / per_word;
        KVS_RETURN_IF_ERROR(Expect(z, {"I32"}, {words, g.count}));
        for (int64_t r = 0; r < words; ++r)
          for (int64_t gi = 0; gi < g.count; ++gi)
            for (int k = 0; k < per_word && per_word * r + k < out; ++k)
              g.zeros[(per_word * r + k) * g.count + gi] = Field(zv[r * g.count + gi], bits, k);
      } else {  // one signed value per group
        KVS_RETURN_IF_ERROR(Expect(z, {"I8", "I32"}, {out, g.count}));
        for (size_t i = 0; i < zv.size(); ++i) g.zeros[i] = static_cast<int32_t>(zv[i]) + mid;
      }
    } else if (!cfg.symmetric) {
      return ModuleError(zname, "missing (the config says asymmetric)");
    }
  }
  if (g.count <= 0 || in % g.count != 0) {
    return ModuleError(p, absl::StrCat(in, " inputs do not split into ", g.count, " groups"));
  }
  const int64_t group = in / g.count;
  if (group % 32 != 0) {
    return ModuleError(
        p, absl::StrCat("group of ", group,
                        " inputs is not a multiple of 32 (supported: multiples of 32)"));
  }
  if (cfg.group_size > 0 && group != cfg.group_size) {
    return ModuleError(
        p, absl::StrCat("groups of ", group, " inputs, the config says ", cfg.group_size));
  }
  for (int32_t z : g.zeros) {
    if (z < 0 || z > (1 << bits))
      return ModuleError(p, absl::StrCat("zero point ", z, " out of range"));
  }
  return g;
}

// The stored column order of an act-order g_idx (hf_quant_weights.h): empty when there is no
// g_idx or it is i / group; else the inputs sorted by group, each group exactly `group` long.
absl::StatusOr<std::vector<int32_t>> InputOrder(const SafetensorsCheckpoint& ckpt,
                                                const std::string& name, int64_t in,
                                                int64_t group) {
  std::vector<int32_t> order;
  if (!ckpt.Contains(name)) return order;
  KVS_ASSIGN_OR_RETURN(Found t, Get(ckpt, name));
  KVS_RETURN_IF_ERROR(Expect(t, {"I32", "I64"}, {in}));
  const std::vector<int64_t> gi = LoadInts(t);
  bool identity = true;
  std::vector<int64_t> count(static_cast<size_t>(in / group), 0);
  for (int64_t i = 0; i < in; ++i) {
    if (gi[i] < 0 || gi[i] >= in / group) {
      return ModuleError(name, absl::StrCat("group ", gi[i], " of input ", i, " out of range"));
    }
    identity &= gi[i] == i / group;
    ++count[gi[i]];
  }
  if (identity) return order;
  for (int64_t c : count) {
    if (c != group) {
      return ModuleError(name, absl::StrCat("act-order g_idx with a group of ", c,
                                            " inputs is not "
                                            "supported (supported: groups of exactly ",
                                            group, ")"));
    }
  }
  order.resize(in);
  for (int64_t i = 0; i < in; ++i) order[i] = static_cast<int32_t>(i);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return gi[a] < gi[b]; });
  return order;
}

}  // namespace

std::vector<std::string> HfQuantComponentNames(const HfQuantConfig& cfg, const std::string& p) {
  if (cfg.method != HfQuantMethod::kCompressedTensors) {
    return {p + ".qweight", p + ".qzeros", p + ".scales", p + ".g_idx"};
  }
  if (cfg.w8a8) return {p + ".weight", p + ".weight_scale", p + ".weight_zero_point"};
  return {p + ".weight_packed", p + ".weight_scale", p + ".weight_zero_point", p + ".weight_shape",
          p + ".weight_g_idx"};
}

std::vector<std::string> FindHfQuantModules(const SafetensorsCheckpoint& ckpt,
                                            const HfQuantConfig& cfg) {
  const std::string marker = MarkerOf(cfg);
  std::vector<std::string> out;
  for (const std::string& name : ckpt.TensorNames()) {
    if (!absl::EndsWith(name, marker)) continue;
    const std::string prefix = name.substr(0, name.size() - marker.size());
    if (cfg.w8a8) {  // int-quantized: an I8 weight beside the scale (other modules are float)
      auto w = ckpt.Find(prefix + ".weight");
      if (!w.ok() || w->second->dtype != "I8") continue;
    }
    out.push_back(prefix);
  }
  std::sort(out.begin(), out.end());
  return out;
}

absl::StatusOr<HfQuantModule> InspectHfQuantModule(const SafetensorsCheckpoint& ckpt,
                                                   const HfQuantConfig& cfg, const std::string& p) {
  HfQuantModule m;
  m.prefix = p;
  const int bits = cfg.bits;
  switch (cfg.method) {
    case HfQuantMethod::kAwq: {
      KVS_ASSIGN_OR_RETURN(Found q, Get(ckpt, p + ".qweight"));
      KVS_ASSIGN_OR_RETURN(auto s, Shape2(q));
      m.in = s[0];
      m.out = s[1] * 8;
      KVS_RETURN_IF_ERROR(Expect(q, {"I32"}, {m.in, m.out / 8}));
      break;
    }
    case HfQuantMethod::kGptq: {
      KVS_ASSIGN_OR_RETURN(Found q, Get(ckpt, p + ".qweight"));
      KVS_ASSIGN_OR_RETURN(auto s, Shape2(q));
      m.in = s[0] * 32 / bits;
      m.out = s[1];
      KVS_RETURN_IF_ERROR(Expect(q, {"I32"}, {m.in * bits / 32, m.out}));
      break;
    }
    case HfQuantMethod::kCompressedTensors: {
      if (cfg.w8a8) {
        KVS_ASSIGN_OR_RETURN(Found q, Get(ckpt, p + ".weight"));
        KVS_ASSIGN_OR_RETURN(auto s, Shape2(q));
        m.out = s[0];
        m.in = s[1];
        KVS_RETURN_IF_ERROR(Expect(q, {"I8"}, {m.out, m.in}));
        break;
      }
      KVS_ASSIGN_OR_RETURN(Found shape, Get(ckpt, p + ".weight_shape"));
      KVS_RETURN_IF_ERROR(Expect(shape, {"I32", "I64"}, {2}));
      const std::vector<int64_t> oi = LoadInts(shape);
      m.out = oi[0];
      m.in = oi[1];
      if (m.out <= 0 || m.in <= 0) return ModuleError(shape.entry->name, "not a matrix shape");
      KVS_ASSIGN_OR_RETURN(Found q, Get(ckpt, p + ".weight_packed"));
      const int per_word = 32 / bits;
      KVS_RETURN_IF_ERROR(Expect(q, {"I32"}, {m.out, (m.in + per_word - 1) / per_word}));
      break;
    }
  }
  if (m.in <= 0 || m.out <= 0 || m.in % 32 != 0) {
    return ModuleError(p, absl::StrCat("[", m.out, "][", m.in,
                                       "]: input count must be a positive multiple of 32"));
  }
  KVS_ASSIGN_OR_RETURN(Groups g, ReadGroups(ckpt, cfg, p, m.out, m.in));
  const int64_t group = m.in / g.count;
  KVS_ASSIGN_OR_RETURN(
      m.input_order,
      InputOrder(ckpt,
                 p + (cfg.method == HfQuantMethod::kCompressedTensors ? ".weight_g_idx" : ".g_idx"),
                 m.in, group));
  const int32_t mid = 1 << (bits - 1);
  const bool centred =
      std::all_of(g.zeros.begin(), g.zeros.end(), [&](int32_t z) { return z == mid; });
  if (g.fp16 && centred) {
    m.block = bits == 4 ? BlockType::kQ4_0 : BlockType::kQ8_0;
  } else {
    m.block = bits == 4 ? BlockType::kU4_F32 : BlockType::kU8_F32;
  }
  return m;
}

absl::StatusOr<GroupedIntWeight> ReadGroupedInt(const SafetensorsCheckpoint& ckpt,
                                                const HfQuantConfig& cfg, const HfQuantModule& m) {
  GroupedIntWeight w;
  w.out = m.out;
  w.in = m.in;
  KVS_ASSIGN_OR_RETURN(Groups g, ReadGroups(ckpt, cfg, m.prefix, m.out, m.in));
  w.group = m.in / g.count;
  w.scales = std::move(g.scales);
  w.zeros = std::move(g.zeros);
  w.scales_fp16 = g.fp16;
  w.codes.assign(static_cast<size_t>(m.out * m.in), 0);
  const int bits = cfg.bits, per_word = 32 / bits;
  const std::string& p = m.prefix;
  auto words_of = [&](const std::string& name) -> absl::StatusOr<std::span<const std::byte>> {
    KVS_ASSIGN_OR_RETURN(Found t, Get(ckpt, name));
    return t.file->Bytes(*t.entry);
  };
  auto word = [](std::span<const std::byte> b, int64_t i) {
    uint32_t v;
    std::memcpy(&v, b.data() + 4 * i, 4);
    return static_cast<int64_t>(v);
  };
  switch (cfg.method) {
    case HfQuantMethod::kAwq: {  // [in][out/8], packed along the output in AWQ order
      KVS_ASSIGN_OR_RETURN(auto b, words_of(p + ".qweight"));
      const int64_t cols = m.out / 8;
      for (int64_t i = 0; i < m.in; ++i)
        for (int64_t c = 0; c < cols; ++c) {
          const int64_t v = word(b, i * cols + c);
          for (int k = 0; k < 8; ++k)
            w.codes[(8 * c + kAwqOrder[k]) * m.in + i] = static_cast<uint8_t>(Field(v, 4, k));
        }
      break;
    }
    case HfQuantMethod::kGptq: {  // [in*b/32][out], packed along the input
      KVS_ASSIGN_OR_RETURN(auto b, words_of(p + ".qweight"));
      for (int64_t r = 0; r < m.in / per_word; ++r)
        for (int64_t o = 0; o < m.out; ++o) {
          const int64_t v = word(b, r * m.out + o);
          for (int k = 0; k < per_word; ++k)
            w.codes[o * m.in + per_word * r + k] = static_cast<uint8_t>(Field(v, bits, k));
        }
      break;
    }
    case HfQuantMethod::kCompressedTensors: {
      if (cfg.w8a8) {  // I8 [out][in]: code = q + 128
        KVS_ASSIGN_OR_RETURN(auto b, words_of(p + ".weight"));
        for (int64_t i = 0; i < m.out * m.in; ++i) {
          w.codes[i] = static_cast<uint8_t>(static_cast<uint8_t>(b[i]) ^ 0x80);
        }
        break;
      }
      KVS_ASSIGN_OR_RETURN(auto b, words_of(p + ".weight_packed"));  // [out][ceil(in*b/32)]
      const int64_t cols = (m.in + per_word - 1) / per_word;
      for (int64_t o = 0; o < m.out; ++o)
        for (int64_t c = 0; c < cols; ++c) {
          const int64_t v = word(b, o * cols + c);
          for (int k = 0; k < per_word && per_word * c + k < m.in; ++k)
            w.codes[o * m.in + per_word * c + k] = static_cast<uint8_t>(Field(v, bits, k));
        }
      break;
    }
  }
  if (!m.input_order.empty()) {  // store the columns sorted by group
    std::vector<uint8_t> row(static_cast<size_t>(m.in));
    for (int64_t o = 0; o < m.out; ++o) {
      uint8_t* c = &w.codes[o * m.in];
      for (int64_t k = 0; k < m.in; ++k) row[k] = c[m.input_order[k]];
      std::memcpy(c, row.data(), row.size());
    }
  }
  return w;
}

std::vector<std::byte> WriteBlockRows(const GroupedIntWeight& w, BlockType block) {
  const quant::BlockTraits& t = quant::Traits(block);
  const int64_t nb = w.in / 32, groups = w.in / w.group;
  std::vector<std::byte> out(static_cast<size_t>(w.out * nb * t.block_bytes));
  for (int64_t o = 0; o < w.out; ++o) {
    const uint8_t* code = &w.codes[o * w.in];
    for (int64_t k = 0; k < nb; ++k) {
      std::byte* blk = &out[(o * nb + k) * t.block_bytes];
      const uint8_t* c = code + 32 * k;
      const int64_t gi = o * groups + 32 * k / w.group;
      const float s = w.scales[gi];
      switch (block) {
        case BlockType::kQ4_0:
        case BlockType::kQ8_0: {  // fp16 d = the scale (exact), codes centred on 8 / 128
          const uint16_t d = quant::FloatToFp16(s);
          std::memcpy(blk, &d, 2);
          if (block == BlockType::kQ8_0) {
            for (int j = 0; j < 32; ++j) blk[2 + j] = static_cast<std::byte>(c[j] ^ 0x80);
          } else {
            for (int j = 0; j < 16; ++j) blk[2 + j] = static_cast<std::byte>(c[j] | c[j + 16] << 4);
          }
          break;
        }
        default: {  // U4_F32 / U8_F32: a = s, b = -z * s
          const float b = -(static_cast<float>(w.zeros[gi]) * s);
          std::memcpy(blk, &s, 4);
          std::memcpy(blk + 4, &b, 4);
          if (block == BlockType::kU8_F32) {
            std::memcpy(blk + 8, c, 32);
          } else {
            for (int j = 0; j < 16; ++j) blk[8 + j] = static_cast<std::byte>(c[j] | c[j + 16] << 4);
          }
          break;
        }
      }
    }
  }
  return out;
}

}  // namespace kvserve::model
