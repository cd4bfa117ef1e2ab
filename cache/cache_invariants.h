// Whole-cache consistency check. O(blocks + table entries): run it after every operation in
// tests and after every engine step in debug builds (KVSERVE_DEBUG_CHECKS), never on the
// release hot path.
//
// Checked:
//   pool      free + used == usable; the free queue holds exactly the refcount-0 usable
//             blocks, each once; the null block is never free, hashed or in a table;
//             num_cached_free matches the hashed free blocks
//   refcounts every usable block's refcount == number of table entries naming it
//   prefix    a block has a hash <=> it is indexed under that hash (multimap entries unique)
//   tables    every entry in range and referenced; blocks == ceil(tokens / block_size);
//             committed blocks are full and their pool hash equals the sequence's chain hash
//   swap      swapped-out sequences own exactly their host blocks, each once, none free;
//             host free + used == total
#pragma once

#include "absl/status/status.h"

namespace kvserve::cache {

class KvCacheManager;

// OK, or FailedPrecondition naming the first violated invariant.
absl::Status CheckCacheInvariants(const KvCacheManager& manager);

}  // namespace kvserve::cache
