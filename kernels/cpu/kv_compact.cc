#include "kernels/cpu/kv_compact.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/check.h"

namespace kvserve::kernels::cpu {
namespace {

// Copies slot `src` to slot `dst` (src > dst) of one (layer, head) row: K and V data, their
// scales, and every side array's element.
struct RowMover {
  const cache::KvLayout& layout;
  std::byte* data;
  float* scales;  // null for unscaled dtypes
  const int32_t* table;
  const SlotSideArray* side;
  int num_side;
  int64_t side_row;  // layer * num_kv_heads + head
  int head;
  size_t row_bytes;

  void Move(int64_t src, int64_t dst) const {
    const int bs = layout.block_size;
    const int64_t sb = table[src / bs];
    const int64_t db = table[dst / bs];
    const int so = static_cast<int>(src % bs);
    const int d_off = static_cast<int>(dst % bs);
    const size_t eb = layout.elem_bytes();
    for (int kv = 0; kv < 2; ++kv) {
      std::memcpy(data + layout.elem_offset(db, kv, head, d_off) * eb,
                  data + layout.elem_offset(sb, kv, head, so) * eb, row_bytes);
      if (scales != nullptr) {
        scales[layout.scale_offset(db, kv, head, d_off)] = scales[layout.scale_offset(sb, kv, head, so)];
      }
    }
    for (int a = 0; a < num_side; ++a) {
      const SlotSideArray& s = side[a];
      std::byte* row = s.data + side_row * s.row_stride * s.elem_bytes;
      std::memcpy(row + dst * s.elem_bytes, row + src * s.elem_bytes, static_cast<size_t>(s.elem_bytes));
    }
  }
};

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
  const size_t row_bytes = static_cast<size_t>(layout.head_dim) * layout.elem_bytes();
  const int64_t per_row_bytes =
      2 * static_cast<int64_t>(row_bytes) + (layout.has_scales() ? 2 * static_cast<int64_t>(sizeof(float)) : 0);
  const int64_t tail = plan.phys_len - plan.scored_end;
  for (int layer = 0; layer < layout.num_layers; ++layer) {
    for (int head = 0; head < layout.num_kv_heads; ++head) {
      const int64_t row = static_cast<int64_t>(layer) * layout.num_kv_heads + head;
      const RowMover mover{layout,
                           layer_data[layer],
                           layout.has_scales() ? layer_scales[layer] : nullptr,
                           block_table,
                           side,
                           num_side,
                           row,
                           head,
                           row_bytes};
      const int32_t* keep = plan.keep + row * plan.num_keep;
      // Identity prefix: kept slots that are already where they belong.
      int64_t i = 0;
      while (i < plan.num_keep && keep[i] == plan.lo + i) ++i;
      for (; i < plan.num_keep; ++i) {
        mover.Move(keep[i], plan.lo + i);
        ++stats.rows_moved;
      }
      const int64_t shift = plan.scored_end - (plan.lo + plan.num_keep);  // dropped candidates
      if (shift > 0) {
        for (int64_t j = 0; j < tail; ++j) {
          mover.Move(plan.scored_end + j, plan.scored_end + j - shift);
          ++stats.rows_moved;
        }
      }
    }
  }
  stats.bytes_moved = stats.rows_moved * per_row_bytes;
  return stats;
}

}  // namespace kvserve::kernels::cpu
