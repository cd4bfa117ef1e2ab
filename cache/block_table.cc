#include "cache/block_table.h"

namespace kvserve::cache {

BlockTable::BlockTable(int block_size)
    : shift_(std::countr_zero(static_cast<unsigned>(block_size))), mask_(block_size - 1) {
  KVS_CHECK(block_size > 0 && std::has_single_bit(static_cast<unsigned>(block_size)),
            "block_size must be a power of two, got ", block_size);
}

void BlockTable::slot_mapping(int64_t first_pos, std::span<int64_t> out) const {
  const int64_t n = static_cast<int64_t>(out.size());
  KVS_CHECK(first_pos >= 0 && n >= 0 && BlocksFor(first_pos + n) <= num_blocks(),
            "slot mapping [", first_pos, ", ", first_pos + n, ") outside the table");
  int64_t pos = first_pos;
  for (int64_t i = 0; i < n; ++i, ++pos) out[i] = slot(pos);
}

}  // namespace kvserve::cache
