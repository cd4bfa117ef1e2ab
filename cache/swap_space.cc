#include "cache/swap_space.h"

#include "base/check.h"

namespace kvserve::cache {

SwapSpace::SwapSpace(int32_t num_blocks) : is_free_(num_blocks, 1) {
  KVS_CHECK(num_blocks >= 0, "negative swap space size ", num_blocks);
  stack_.reserve(num_blocks);
  // Low ids on top: the first swap-outs use the start of the host area.
  for (int32_t i = num_blocks - 1; i >= 0; --i) stack_.push_back(i);
}

bool SwapSpace::allocate(int32_t n, std::vector<BlockId>& out) {
  if (n < 0 || n > num_free()) return false;
  for (int32_t i = 0; i < n; ++i) {
    const int32_t b = stack_.back();
    stack_.pop_back();
    is_free_[b] = 0;
    out.push_back(BlockId{b});
  }
  return true;
}

void SwapSpace::release(std::span<const BlockId> blocks) {
  for (BlockId b : blocks) {
    KVS_CHECK(b.value() >= 0 && b.value() < num_blocks() && !is_free_[b.value()],
              "release of host block ", b.value(), " that is not in use");
    is_free_[b.value()] = 1;
    stack_.push_back(b.value());
  }
}

}  // namespace kvserve::cache
