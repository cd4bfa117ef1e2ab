// Applying an allowed-token bitmask (structured outputs: bit i of word i/64 set = token i may be
// sampled) to a row of logits, shared by the sampler and the grammar benchmark. The row is
// walked 8 tokens at a time: each byte of the mask selects one of 256 precomputed 8-float rows
// of +inf (allowed) / -inf (masked), and the logits take the minimum, a branch-free loop of
// fixed length that the compiler turns into vector min instructions. Whole words that are all
// allowed are skipped, whole words that are all masked are filled.
//
// Invariant: tokens at or past mask.size() * 64 are masked (a model vocabulary padded beyond the
// tokenizer's is never sampled under a grammar).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <span>

namespace kvserve::base {

namespace token_mask_internal {

struct ByteRows {
  std::array<std::array<float, 8>, 256> rows;
};

constexpr ByteRows MakeByteRows() {
  ByteRows t{};
  for (int b = 0; b < 256; ++b) {
    for (int j = 0; j < 8; ++j) {
      t.rows[b][j] = ((b >> j) & 1) ? std::numeric_limits<float>::infinity() : -std::numeric_limits<float>::infinity();
    }
  }
  return t;
}

inline constexpr ByteRows kByteRows = MakeByteRows();

}  // namespace token_mask_internal

inline void MaskLogits(std::span<const uint64_t> mask, std::span<float> row) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const size_t n = row.size();
  const size_t full = std::min(mask.size(), n / 64);
  float* p = row.data();
  for (size_t w = 0; w < full; ++w, p += 64) {
    const uint64_t bits = mask[w];
    if (bits == ~uint64_t{0}) continue;
    if (bits == 0) {
      std::fill_n(p, 64, kNegInf);
      continue;
    }
    for (int k = 0; k < 8; ++k) {
      const float* sel = token_mask_internal::kByteRows.rows[(bits >> (8 * k)) & 0xFF].data();
      float* q = p + 8 * k;
      for (int j = 0; j < 8; ++j) q[j] = std::min(q[j], sel[j]);
    }
  }
  for (size_t i = full * 64; i < n; ++i) {  // the tail (at most one partial word) and past the mask
    const size_t w = i >> 6;
    if (w >= mask.size() || !((mask[w] >> (i & 63)) & 1)) row[i] = kNegInf;
  }
}

}  // namespace kvserve::base
