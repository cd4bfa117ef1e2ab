#include "kernels/cpu/kv_write.h"

#include <algorithm>

#include "base/check.h"
#include "kernels/cpu/compute_pool.h"
#include "kernels/cpu/kv_quant.h"

namespace kvserve::kernels::cpu {

void WriteKv(const cache::KvLayout& layout, std::byte* layer_data, float* layer_scales,
             const float* k, const float* v, int64_t kv_stride, const int64_t* slot_mapping,
             int64_t num_tokens) {
  KVS_DCHECK(!layout.has_scales() || layer_scales != nullptr, "scaled KV dtype without scales");
  if (layout.k_dtype() == config::KvDtype::kInt4) {
    // int4 keys share per-channel scales across a block: one thread owns a head and writes
    // its tokens in order, a run of consecutive slots of one block at a time, so the block's
    // range widens once per run (a prefilled block is encoded once) and the result does not
    // depend on the thread count.
    ParallelFor(layout.num_kv_heads, num_tokens * layout.head_dim >= (1 << 14), [&](int64_t h, int) {
      const int head = static_cast<int>(h);
      const int64_t col = static_cast<int64_t>(head) * layout.head_dim;
      for (int64_t t = 0; t < num_tokens;) {
        const int64_t slot = slot_mapping[t];
        if (slot < 0) {
          ++t;
          continue;
        }
        const int64_t block = slot / layout.block_size;
        const int offset = static_cast<int>(slot - block * layout.block_size);
        int n = 1;
        while (t + n < num_tokens && offset + n < layout.block_size && slot_mapping[t + n] == slot + n) ++n;
        WriteKvRows(layout, layer_data, layer_scales, block, 0, head, offset, n, k + t * kv_stride + col, kv_stride);
        WriteKvRows(layout, layer_data, layer_scales, block, 1, head, offset, n, v + t * kv_stride + col, kv_stride);
        t += n;
      }
    });
    return;
  }
  const int64_t rows = num_tokens * layout.num_kv_heads;
  constexpr int64_t kChunkRows = 64;
  const int64_t chunks = (rows + kChunkRows - 1) / kChunkRows;
  ParallelFor(chunks, rows * layout.head_dim >= (1 << 15), [&](int64_t chunk, int) {
  for (int64_t idx = chunk * kChunkRows; idx < std::min(rows, (chunk + 1) * kChunkRows); ++idx) {
    const int64_t t = idx / layout.num_kv_heads;
    const int head = static_cast<int>(idx - t * layout.num_kv_heads);
    const int64_t slot = slot_mapping[t];
    if (slot < 0) continue;
    const int64_t block = slot / layout.block_size;
    const int offset = static_cast<int>(slot - block * layout.block_size);
    const int64_t col = static_cast<int64_t>(head) * layout.head_dim;
    WriteKvRow(layout, layer_data, layer_scales, block, 0, head, offset, k + t * kv_stride + col);
    WriteKvRow(layout, layer_data, layer_scales, block, 1, head, offset, v + t * kv_stride + col);
  }
  });
}

}  // namespace kvserve::kernels::cpu
