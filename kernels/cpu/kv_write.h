// Writes this step's K and V vectors into the paged cache (quantizing for the narrow KV
// dtypes), one (token, KV head) row at a time:
//
//   k, v rows (token t):   [ head 0 | head 1 | ... ]  head_dim floats each
//        │ slot_mapping[t] = block * block_size + offset   (-1: padding, not written)
//        ▼
//   layer_data: [num_blocks][2 (K,V)][num_kv_heads][block_size][head_dim]   (cache/kv_layout.h)
//
// Same signature as the CUDA kv_write kernel (minus the stream).
#pragma once

#include <cstddef>
#include <cstdint>

#include "cache/kv_layout.h"

namespace kvserve::kernels::cpu {

// k, v:         [num_tokens][kv_stride]; each row starts with num_kv_heads * head_dim floats
// slot_mapping: [num_tokens] physical slot or -1
// layer_data:   one layer's storage; layer_scales: its scales (null unless layout.has_scales())
void WriteKv(const cache::KvLayout& layout, std::byte* layer_data, float* layer_scales,
             const float* k, const float* v, int64_t kv_stride, const int64_t* slot_mapping,
             int64_t num_tokens);

}  // namespace kvserve::kernels::cpu
