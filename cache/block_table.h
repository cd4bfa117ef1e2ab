// One sequence's block table: logical block i -> physical block, plus the number of token
// slots in use. Token position p lives in slot  blocks[p / block_size] * block_size +
// p % block_size  (the "slot mapping" the KV-write kernel consumes).
//
//   logical:   0     1     2     3
//   physical: [b7]  [b2]  [b9]  [b4]        block_size = 4, num_tokens = 14
//   tokens:   0..3  4..7  8..11 12,13 (2 of 4 slots used)
//
// Invariant: num_blocks() == ceil(num_tokens / block_size). Growth is append-only at the
// tail; the only other changes are replacing the (partially filled) last block for
// copy-on-write and dropping blocks from the tail (compression's truncate, preemption).
// Holds ids only: references are counted by the owner (KvCacheManager) in the BlockPool.
#pragma once

#include <bit>
#include <cstdint>
#include <span>
#include <vector>

#include "base/check.h"
#include "cache/cache_types.h"

namespace kvserve::cache {

class BlockTable {
 public:
  // `block_size` must be a power of two.
  explicit BlockTable(int block_size);

  int block_size() const { return 1 << shift_; }
  int64_t num_tokens() const { return num_tokens_; }
  int32_t num_blocks() const { return static_cast<int32_t>(blocks_.size()); }
  bool empty() const { return blocks_.empty(); }
  std::span<const BlockId> blocks() const { return blocks_; }
  BlockId operator[](int32_t i) const { return blocks_[i]; }
  BlockId back() const { return blocks_.back(); }

  // Blocks needed to hold `num_tokens` tokens.
  int32_t BlocksFor(int64_t num_tokens) const {
    return static_cast<int32_t>((num_tokens + mask_) >> shift_);
  }
  // Tokens in the last block (0 when the table is empty or the last block is full).
  int tail_fill() const { return static_cast<int>(num_tokens_ & mask_); }
  // Token slots allocated but not (yet) holding a token.
  int64_t free_slots() const { return (static_cast<int64_t>(blocks_.size()) << shift_) - num_tokens_; }
  // Number of full blocks.
  int32_t num_full_blocks() const { return static_cast<int32_t>(num_tokens_ >> shift_); }

  void append_block(BlockId b) { blocks_.push_back(b); }
  void replace_block(int32_t i, BlockId b) { blocks_[i] = b; }
  BlockId pop_block() {
    const BlockId b = blocks_.back();
    blocks_.pop_back();
    return b;
  }
  // Sets the token count; the blocks must already match it (see the invariant).
  void set_num_tokens(int64_t n) {
    KVS_DCHECK(BlocksFor(n) == num_blocks(), "num_tokens ", n, " does not match ", num_blocks(),
               " blocks");
    num_tokens_ = n;
  }
  // Drops every block id and token; keeps the capacity (tables are recycled).
  void clear() {
    blocks_.clear();
    num_tokens_ = 0;
  }
  void reserve(int32_t blocks) { blocks_.reserve(blocks); }
  void assign(const BlockTable& other) {
    blocks_.assign(other.blocks_.begin(), other.blocks_.end());
    num_tokens_ = other.num_tokens_;
  }

  // Physical slot of token position `pos` (< capacity).
  int64_t slot(int64_t pos) const {
    KVS_DCHECK(pos >= 0 && (pos >> shift_) < num_blocks(), "position ", pos, " outside table");
    return (static_cast<int64_t>(blocks_[pos >> shift_].value()) << shift_) + (pos & mask_);
  }
  // Slots of positions [first_pos, first_pos + out.size()).
  void slot_mapping(int64_t first_pos, std::span<int64_t> out) const;

 private:
  int shift_;
  int64_t mask_;
  int64_t num_tokens_ = 0;
  std::vector<BlockId> blocks_;
};

}  // namespace kvserve::cache
