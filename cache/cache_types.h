// Ids and small value types shared by every part of the paged KV cache and by its users
// (scheduler, model runner). Plain data; no CUDA types.
#pragma once

#include <cstdint>

#include "base/strong_id.h"

namespace kvserve::cache {

struct BlockIdTag {};
struct SeqIdTag {};
struct BlockHashTag {};

// Index of a physical block in a KvStorage (device pool or host swap tier).
using BlockId = base::StrongId<BlockIdTag, int32_t>;
// A sequence holding KV: one per request, or one per sample when n > 1.
using SeqId = base::StrongId<SeqIdTag, int64_t>;
// Chained content hash of a full block (block_hasher.h). 0 means "no hash".
using BlockHash = base::StrongId<BlockHashTag, uint64_t>;

// Block 0 of every pool is never allocated and never freed: padding entries of block
// tables and slot -1 style "no slot" paths can point at it without touching real data.
inline constexpr BlockId kNullBlock{0};
inline constexpr BlockHash kNoHash{0};

// One whole-block copy (every layer, K and V, data and scales). For copy-on-write both ids
// are in the same storage; for swapping, src and dst live in different storages.
struct BlockCopy {
  BlockId src;
  BlockId dst;
  bool operator==(const BlockCopy&) const = default;
};

}  // namespace kvserve::cache
