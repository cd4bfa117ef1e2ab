#include "kernels/cpu/kv_compact.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "kernels/cpu/kv_quant.h"

namespace kvserve::kernels::cpu {
namespace {

// Copies slot `src` to slot `dst` (src > dst) of one (layer, head) row: the K and V data and
// scales that live per row (every dtype except int4 keys, whose scales span the block:
// RecodeInt4KeyBlocks), and every side array's element.
struct RowMover {
  const cache::KvLayout& layout;
  std::byte* data;
  float* scales;  // null for unscaled dtypes
  const int32_t* table;
  const SlotSideArray* side;
  int num_side;
  int64_t side_row;  // layer * num_kv_heads + head
  int head;

  // Scale entries per row of side kv (0 for int4 keys, whose scales are per block).
  size_t RowScales(int kv) const {
    switch (layout.side_dtype(kv)) {
      case config::KvDtype::kFp8E4M3:
      case config::KvDtype::kInt8: return 1;
      case config::KvDtype::kInt4: return kv == 0 ? 0 : static_cast<size_t>(layout.v_groups());
      default: return 0;
    }
  }

  void Move(int64_t src, int64_t dst) const {
    const int bs = layout.block_size;
    const int64_t sb = table[src / bs];
    const int64_t db = table[dst / bs];
    const int so = static_cast<int>(src % bs);
    const int d_off = static_cast<int>(dst % bs);
    for (int kv = 0; kv < 2; ++kv) {
      if (kv == 0 && layout.k_dtype() == config::KvDtype::kInt4) continue;
      const size_t rb = layout.row_bytes(kv);
      std::memcpy(data + layout.run_byte_offset(db, kv, head) + d_off * rb,
                  data + layout.run_byte_offset(sb, kv, head) + so * rb, rb);
      const size_t ns = RowScales(kv);
      if (ns > 0) {
        std::memcpy(scales + layout.run_scale_offset(db, kv, head) + d_off * ns,
                    scales + layout.run_scale_offset(sb, kv, head) + so * ns, ns * sizeof(float));
      }
    }
    for (int a = 0; a < num_side; ++a) {
      const SlotSideArray& s = side[a];
      std::byte* row = s.data + side_row * s.row_stride * s.elem_bytes;
      std::memcpy(row + dst * s.elem_bytes, row + src * s.elem_bytes, static_cast<size_t>(s.elem_bytes));
    }
  }
};

// int4 keys: every block that receives a moved row is decoded (each of its new rows from
// wherever that row lives now) and encoded afresh over its new rows, so the block's
// per-channel range fits what it holds. Blocks are rebuilt in ascending order; the source of
// new index p is >= p, so it sits in this block (decoded before the block is rewritten) or a
// later one (not yet rewritten). Rows that stay in a rebuilt block are re-encoded too (at
// most half a step of the new range added). Returns the rows re-encoded.
int64_t RecodeInt4KeyBlocks(const cache::KvLayout& layout, std::byte* data, float* scales, const int32_t* table,
                            const KeepPlan& plan, const int32_t* keep, int head, int64_t first_dst) {
  const int bs = layout.block_size;
  const int hd = layout.head_dim;
  const int64_t new_len = plan.new_len();
  const int64_t shift = plan.scored_end - (plan.lo + plan.num_keep);
  auto source = [&](int64_t p) -> int64_t {
    if (p < plan.lo) return p;
    if (p < plan.lo + plan.num_keep) return keep[p - plan.lo];
    return p + shift;
  };
  thread_local std::vector<float> rows;  // grows once to block_size * head_dim
  rows.resize(static_cast<size_t>(bs) * hd);
  int64_t recoded = 0;
  for (int64_t d = first_dst / bs; d * bs < new_len; ++d) {
    const int n = static_cast<int>(std::min<int64_t>(bs, new_len - d * bs));
    for (int r = 0; r < n; ++r) {
      const int64_t src = source(d * bs + r);
      const int64_t sb = table[src / bs];
      DequantizeRun(layout, 0, data + layout.run_byte_offset(sb, 0, head), scales + layout.run_scale_offset(sb, 0, head),
                    static_cast<int>(src % bs), 1, rows.data() + static_cast<size_t>(r) * hd);
    }
    const int64_t db = table[d];
    WriteInt4ChannelRows(data + layout.run_byte_offset(db, 0, head), scales + layout.run_scale_offset(db, 0, head), hd,
                         0, n, rows.data(), hd);
    recoded += n;
  }
  return recoded;
}

}  // namespace

absl::Status ValidateKeepPlan(const cache::KvLayout& layout, int64_t table_len, const KeepPlan& p) {
  if (!(0 <= p.lo && p.lo <= p.scored_end && p.scored_end <= p.phys_len)) {
    return absl::InvalidArgumentError(absl::StrCat("keep plan: need 0 <= lo (", p.lo, ") <= scored_end (",
                                                   p.scored_end, ") <= phys_len (", p.phys_len, ")"));
  }
  if (p.num_keep < 0 || p.num_keep > p.scored_end - p.lo) {
    return absl::InvalidArgumentError(absl::StrCat("keep plan: num_keep ", p.num_keep, " outside [0, ",
                                                   p.scored_end - p.lo, "]"));
  }
  if (table_len * layout.block_size < p.phys_len) {
    return absl::InvalidArgumentError(absl::StrCat("keep plan: block table of ", table_len, " blocks cannot hold ",
                                                   p.phys_len, " slots"));
  }
  if (p.num_keep > 0 && p.keep == nullptr) return absl::InvalidArgumentError("keep plan: keep list is null");
  const int64_t rows = static_cast<int64_t>(layout.num_layers) * layout.num_kv_heads;
  for (int64_t r = 0; r < rows; ++r) {
    const int32_t* k = p.keep + r * p.num_keep;
    for (int64_t i = 0; i < p.num_keep; ++i) {
      if (k[i] < p.lo || k[i] >= p.scored_end || (i > 0 && k[i] <= k[i - 1])) {
        return absl::InvalidArgumentError(absl::StrCat("keep plan: row ", r, " entry ", i, " = ", k[i],
                                                       " is out of range or not strictly ascending"));
      }
    }
  }
  return absl::OkStatus();
}

CompactStats CompactKv(const cache::KvLayout& layout, std::byte* const* layer_data, float* const* layer_scales,
                       const int32_t* block_table, const KeepPlan& plan, const SlotSideArray* side, int num_side) {
  KVS_DCHECK(ValidateKeepPlan(layout, (plan.phys_len + layout.block_size - 1) / layout.block_size, plan).ok());
  CompactStats stats;
  stats.new_len = plan.new_len();
  const bool int4_keys = layout.k_dtype() == config::KvDtype::kInt4;
  const int64_t tail = plan.phys_len - plan.scored_end;
  for (int layer = 0; layer < layout.num_layers; ++layer) {
    if (layer_data[layer] == nullptr) continue;  // not in this table (layer groups' window layers)
    for (int head = 0; head < layout.num_kv_heads; ++head) {
      const int64_t row = static_cast<int64_t>(layer) * layout.num_kv_heads + head;
      const RowMover mover{layout,
                           layer_data[layer],
                           layout.has_scales() ? layer_scales[layer] : nullptr,
                           block_table,
                           side,
                           num_side,
                           row,
                           head};
      const int32_t* keep = plan.keep + row * plan.num_keep;
      // Identity prefix: kept slots that are already where they belong.
      int64_t i = 0;
      while (i < plan.num_keep && keep[i] == plan.lo + i) ++i;
      const int64_t shift = plan.scored_end - (plan.lo + plan.num_keep);  // dropped candidates
      const int64_t first_dst = i < plan.num_keep ? plan.lo + i : plan.lo + plan.num_keep;
      if (int4_keys && (i < plan.num_keep || (shift > 0 && tail > 0))) {
        stats.rows_recoded += RecodeInt4KeyBlocks(layout, layer_data[layer], layer_scales[layer], block_table, plan,
                                                  keep, head, first_dst);
      }
      for (; i < plan.num_keep; ++i) {
        mover.Move(keep[i], plan.lo + i);
        ++stats.rows_moved;
      }
      if (shift > 0) {
        for (int64_t j = 0; j < tail; ++j) {
          mover.Move(plan.scored_end + j, plan.scored_end + j - shift);
          ++stats.rows_moved;
        }
      }
    }
  }
  // Per moved row: K and V codes plus their per-row scales (int4 keys: the codes only; their
  // per-channel scales are rewritten with each rebuilt block).
  int64_t per_row_bytes = static_cast<int64_t>(layout.row_bytes(0) + layout.row_bytes(1));
  for (int kv = 0; kv < 2; ++kv) {
    const config::KvDtype d = layout.side_dtype(kv);
    if (d == config::KvDtype::kFp8E4M3 || d == config::KvDtype::kInt8) per_row_bytes += sizeof(float);
    if (d == config::KvDtype::kInt4 && kv == 1) per_row_bytes += layout.v_groups() * sizeof(float);
  }
  stats.bytes_moved = stats.rows_moved * per_row_bytes;
  return stats;
}

}  // namespace kvserve::kernels::cpu
