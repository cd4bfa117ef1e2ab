#include "kernels/cpu/kv_demote.h"

#include <algorithm>
#include <vector>

#include "base/check.h"

namespace kvserve::kernels::cpu {

int64_t DemoteKv(const KvTierStorage& src, const int32_t* src_table, const KvTierStorage& dst,
                 const int32_t* dst_table, const int32_t* rows, int64_t n) {
  const cache::KvLayout& sl = src.layout;
  const cache::KvLayout& dl = dst.layout;
  KVS_CHECK(sl.num_layers == dl.num_layers && sl.num_kv_heads == dl.num_kv_heads && sl.head_dim == dl.head_dim &&
                sl.block_size == dl.block_size,
            "DemoteKv: tiers differ in geometry");
  const int bs = sl.block_size;
  const int hd = sl.head_dim;
  thread_local std::vector<float> buf;  // one destination block of rows; grows once
  buf.resize(static_cast<size_t>(bs) * hd);
  int64_t bytes = 0;
  for (int layer = 0; layer < sl.num_layers; ++layer) {
    for (int head = 0; head < sl.num_kv_heads; ++head) {
      const int32_t* row = rows + (static_cast<int64_t>(layer) * sl.num_kv_heads + head) * n;
      for (int kv = 0; kv < 2; ++kv) {
        for (int64_t d = 0; d * bs < n; ++d) {
          const int count = static_cast<int>(std::min<int64_t>(bs, n - d * bs));
          for (int r = 0; r < count; ++r) {
            const int64_t slot = row[d * bs + r];
            ReadTierRow(src, layer, src_table[slot / bs], kv, head, static_cast<int>(slot % bs),
                        buf.data() + static_cast<size_t>(r) * hd);
          }
          WriteTierRows(dst, layer, dst_table[d], kv, head, 0, count, buf.data(), hd);
          bytes += static_cast<int64_t>(count * dl.row_bytes(kv));
        }
      }
    }
  }
  const int64_t blocks = (n + bs - 1) / bs;
  return bytes + blocks * static_cast<int64_t>(dl.num_layers) * static_cast<int64_t>(dl.block_scales() * sizeof(float));
}

}  // namespace kvserve::kernels::cpu
