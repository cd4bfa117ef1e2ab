// One sequence's KV as the compression code sees it: the pool's layer arrays (layout in
// cache/kv_layout.h), the sequence's block table and its physical length. No ownership; the
// runner that owns the storage builds one per round.
//
//   physical index i  ->  block block_table[i / block_size], slot i % block_size
//   rows of (layer, K|V, head) are read through kernels/cpu/kv_quant.h, so every KV dtype
//   (fp32, fp16, bf16, fp8_e4m3, int8) scores the same way.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "absl/status/status.h"
#include "cache/kv_layout.h"

namespace kvserve::compression {

struct SeqKvView {
  cache::KvLayout layout;
  std::span<std::byte* const> layer_data;  // [num_layers]
  std::span<float* const> layer_scales;    // [num_layers]; may be empty unless layout.has_scales()
  std::span<const int32_t> block_table;    // covers at least phys_len slots
  int64_t phys_len = 0;

  int64_t blocks_for(int64_t len) const { return (len + layout.block_size - 1) / layout.block_size; }
};

// Shape checks (layer counts, scales present for scaled dtypes, table long enough).
absl::Status ValidateSeqKvView(const SeqKvView& view);

// Dequantizes rows [begin, end) of (layer, kv: 0=K 1=V, head) into out: [end - begin][head_dim].
void ReadRows(const SeqKvView& view, int layer, int kv, int head, int64_t begin, int64_t end, float* out);

}  // namespace kvserve::compression
