#include "kernels/cuda/quant_weight_import.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"

namespace kvserve::kernels::cuda {
namespace {

absl::Status SizeError(absl::string_view format, absl::string_view tensor, size_t got,
                       size_t want) {
  return absl::InvalidArgumentError(
      absl::StrCat(format, ": ", tensor, " has ", got, " elements, want ", want));
}

// Plain per-element codes and per-group zeros, [out][in] and [out][in/group], then the packer;
// zeros that are all the midpoint are dropped.
absl::StatusOr<PackedGroupQuantWeight> Finish(GroupQuantShape shape,
                                              const std::vector<uint8_t>& codes,
                                              const std::vector<uint16_t>& scales,
                                              std::vector<uint8_t> zeros) {
  const auto mid = static_cast<uint8_t>(shape.symmetric_zero());
  shape.has_zeros = !zeros.empty() &&
                    std::any_of(zeros.begin(), zeros.end(), [&](uint8_t z) { return z != mid; });
  if (!shape.has_zeros) zeros.clear();
  return PackGroupQuantWeight(shape, codes, scales, zeros);
}

absl::StatusOr<PackedGroupQuantWeight> PackGgufBlocks(std::span<const uint8_t> data, int out,
                                                      int in, int bits) {
  const char* name = bits == 4 ? "GGUF Q4_0" : "GGUF Q8_0";
  const GroupQuantShape shape{bits, out, in, 32, false};
  if (absl::Status s = ValidateGroupQuantShape(shape); !s.ok()) return s;
  const size_t block_bytes = bits == 4 ? 18 : 34;
  const size_t blocks = static_cast<size_t>(out) * static_cast<size_t>(in / 32);
  if (data.size() != blocks * block_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": tensor data has ", data.size(),
                                                   " bytes, want ", blocks * block_bytes));
  }
  std::vector<uint8_t> codes(blocks * 32);
  std::vector<uint16_t> scales(blocks);
  for (size_t b = 0; b < blocks; ++b) {
    const uint8_t* p = data.data() + b * block_bytes;
    scales[b] = static_cast<uint16_t>(p[0] | (p[1] << 8));
    uint8_t* c = codes.data() + b * 32;
    for (int j = 0; j < 16 && bits == 4; ++j) {
      c[j] = p[2 + j] & 0x0F;
      c[j + 16] = p[2 + j] >> 4;
    }
    for (int j = 0; j < 32 && bits == 8; ++j)
      c[j] = static_cast<uint8_t>(p[2 + j] ^ 0x80);  // int8 + 128
  }
  return Finish(shape, codes, scales, {});
}

}  // namespace

absl::StatusOr<PackedGroupQuantWeight> PackGgufQ4_0(std::span<const uint8_t> data, int out,
                                                    int in) {
  return PackGgufBlocks(data, out, in, 4);
}

absl::StatusOr<PackedGroupQuantWeight> PackGgufQ8_0(std::span<const uint8_t> data, int out,
                                                    int in) {
  return PackGgufBlocks(data, out, in, 8);
}

absl::StatusOr<PackedGroupQuantWeight> PackAwqGemm(std::span<const int32_t> qweight,
                                                   std::span<const int32_t> qzeros,
                                                   std::span<const uint16_t> scales, int in,
                                                   int out, int group) {
  const GroupQuantShape shape{4, out, in, group, true};
  if (absl::Status s = ValidateGroupQuantShape(shape); !s.ok()) return s;
  if (out % 8 != 0)
    return absl::InvalidArgumentError(absl::StrCat("AWQ: out ", out, " is not a multiple of 8"));
  const size_t groups = static_cast<size_t>(in / group), words = static_cast<size_t>(out / 8);
  if (qweight.size() != static_cast<size_t>(in) * words) {
    return SizeError("AWQ", "qweight", qweight.size(), static_cast<size_t>(in) * words);
  }
  if (qzeros.size() != groups * words)
    return SizeError("AWQ", "qzeros", qzeros.size(), groups * words);
  if (scales.size() != groups * static_cast<size_t>(out)) {
    return SizeError("AWQ", "scales", scales.size(), groups * static_cast<size_t>(out));
  }
  std::vector<uint8_t> codes(static_cast<size_t>(out) * static_cast<size_t>(in));
  std::vector<uint8_t> zeros(static_cast<size_t>(out) * groups);
  std::vector<uint16_t> sc(static_cast<size_t>(out) * groups);
  for (size_t i = 0; i < static_cast<size_t>(in); ++i) {
    for (size_t c = 0; c < words; ++c) {
      const auto w = static_cast<uint32_t>(qweight[i * words + c]);
      for (int k = 0; k < 8; ++k) {
        codes[(8 * c + static_cast<size_t>(kAwqOrder[k])) * static_cast<size_t>(in) + i] =
            (w >> (4 * k)) & 0xF;
      }
    }
  }
  for (size_t g = 0; g < groups; ++g) {
    for (size_t c = 0; c < words; ++c) {
      const auto w = static_cast<uint32_t>(qzeros[g * words + c]);
      for (int k = 0; k < 8; ++k)
        zeros[(8 * c + static_cast<size_t>(kAwqOrder[k])) * groups + g] = (w >> (4 * k)) & 0xF;
    }
    for (size_t o = 0; o < static_cast<size_t>(out); ++o)
      sc[o * groups + g] = scales[g * static_cast<size_t>(out) + o];
  }
  return Finish(shape, codes, sc, std::move(zeros));
}

absl::StatusOr<PackedGroupQuantWeight> PackGptq(std::span<const int32_t> qweight,
                                                std::span<const int32_t> qzeros,
                                                std::span<const uint16_t> scales,
                                                std::span<const int32_t> g_idx, int bits, int in,
                                                int out, int group, bool v1_zero_offset) {
  const GroupQuantShape shape{bits, out, in, group, true};
  if (absl::Status s = ValidateGroupQuantShape(shape); !s.ok()) return s;
  const int per_word = 32 / bits;
  const uint32_t mask = (1u << bits) - 1u;
  if (out % per_word != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("GPTQ: out ", out, " is not a multiple of ", per_word));
  }
  const size_t groups = static_cast<size_t>(in / group), n_out = static_cast<size_t>(out);
  const size_t zero_words = n_out / static_cast<size_t>(per_word);
  if (qweight.size() != static_cast<size_t>(in / per_word) * n_out) {
    return SizeError("GPTQ", "qweight", qweight.size(), static_cast<size_t>(in / per_word) * n_out);
  }
  if (qzeros.size() != groups * zero_words)
    return SizeError("GPTQ", "qzeros", qzeros.size(), groups * zero_words);
  if (scales.size() != groups * n_out)
    return SizeError("GPTQ", "scales", scales.size(), groups * n_out);
  if (!g_idx.empty()) {
    if (g_idx.size() != static_cast<size_t>(in))
      return SizeError("GPTQ", "g_idx", g_idx.size(), in);
    for (int i = 0; i < in; ++i) {
      if (g_idx[static_cast<size_t>(i)] != i / group) {
        return absl::UnimplementedError(
            absl::StrCat("GPTQ: g_idx[", i, "] = ", g_idx[static_cast<size_t>(i)], ", not ",
                         i / group, ": act-order (desc_act) checkpoints need the inputs permuted"));
      }
    }
  }
  std::vector<uint8_t> codes(n_out * static_cast<size_t>(in));
  std::vector<uint8_t> zeros(n_out * groups);
  std::vector<uint16_t> sc(n_out * groups);
  for (size_t r = 0; r < static_cast<size_t>(in / per_word); ++r) {
    for (size_t o = 0; o < n_out; ++o) {
      const auto w = static_cast<uint32_t>(qweight[r * n_out + o]);
      for (int j = 0; j < per_word; ++j) {
        codes[o * static_cast<size_t>(in) + r * static_cast<size_t>(per_word) +
              static_cast<size_t>(j)] = static_cast<uint8_t>((w >> (bits * j)) & mask);
      }
    }
  }
  for (size_t g = 0; g < groups; ++g) {
    for (size_t c = 0; c < zero_words; ++c) {
      const auto w = static_cast<uint32_t>(qzeros[g * zero_words + c]);
      for (int j = 0; j < per_word; ++j) {
        const uint32_t z = ((w >> (bits * j)) + (v1_zero_offset ? 1u : 0u)) & mask;
        zeros[(c * static_cast<size_t>(per_word) + static_cast<size_t>(j)) * groups + g] =
            static_cast<uint8_t>(z);
      }
    }
    for (size_t o = 0; o < n_out; ++o) sc[o * groups + g] = scales[g * n_out + o];
  }
  return Finish(shape, codes, sc, std::move(zeros));
}

absl::StatusOr<PackedGroupQuantWeight> PackCompressedTensors(std::span<const int32_t> weight_packed,
                                                             std::span<const uint16_t> weight_scale,
                                                             std::span<const int32_t> zero_points,
                                                             int bits, int out, int in, int group) {
  const bool channel = group == 0;
  const GroupQuantShape shape{bits, out, in, channel ? 128 : group, !zero_points.empty()};
  if (absl::Status s = ValidateGroupQuantShape(shape); !s.ok()) return s;
  const int per_word = 32 / bits;
  const uint32_t mask = (1u << bits) - 1u;
  const size_t n_out = static_cast<size_t>(out),
               groups = static_cast<size_t>(shape.groups_per_row());
  const size_t src_groups = channel ? 1 : groups;
  const size_t row_words = static_cast<size_t>(in / per_word);
  if (weight_packed.size() != n_out * row_words) {
    return SizeError("compressed-tensors", "weight_packed", weight_packed.size(),
                     n_out * row_words);
  }
  if (weight_scale.size() != n_out * src_groups) {
    return SizeError("compressed-tensors", "weight_scale", weight_scale.size(), n_out * src_groups);
  }
  const size_t zero_rows =
      (n_out + static_cast<size_t>(per_word) - 1) / static_cast<size_t>(per_word);
  if (!zero_points.empty() && zero_points.size() != zero_rows * src_groups) {
    return SizeError("compressed-tensors", "weight_zero_point", zero_points.size(),
                     zero_rows * src_groups);
  }
  std::vector<uint8_t> codes(n_out * static_cast<size_t>(in));
  for (size_t o = 0; o < n_out; ++o) {
    for (size_t k = 0; k < row_words; ++k) {
      const auto w = static_cast<uint32_t>(weight_packed[o * row_words + k]);
      for (int j = 0; j < per_word; ++j) {
        codes[o * static_cast<size_t>(in) + k * static_cast<size_t>(per_word) +
              static_cast<size_t>(j)] = static_cast<uint8_t>((w >> (bits * j)) & mask);
      }
    }
  }
  std::vector<uint16_t> sc(n_out * groups);
  std::vector<uint8_t> zeros(zero_points.empty() ? 0 : n_out * groups);
  for (size_t o = 0; o < n_out; ++o) {
    for (size_t g = 0; g < groups; ++g) {
      const size_t src = channel ? 0 : g;
      sc[o * groups + g] = weight_scale[o * src_groups + src];
      if (!zeros.empty()) {
        const auto w = static_cast<uint32_t>(
            zero_points[(o / static_cast<size_t>(per_word)) * src_groups + src]);
        zeros[o * groups + g] =
            static_cast<uint8_t>((w >> (bits * static_cast<int>(o % per_word))) & mask);
      }
    }
  }
  return Finish(shape, codes, sc, std::move(zeros));
}

}  // namespace kvserve::kernels::cuda
