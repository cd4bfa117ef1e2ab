// KvCacheManager: the paged KV cache as the scheduler sees it. Block ids and counts only,
// no tensors; the bytes live in a KvStorage that the model runner owns and fills.
//
//   scheduler ──match_prefix / can_allocate / allocate / commit_full_blocks / fork / free──┐
//             ──swap_out / swap_in / truncate (compression) / usage──────────────────────┐ │
//                                                                                        ▼ ▼
//   KvCacheManager ── SequenceKvState per SeqId (block table, hash chain, swap state)
//        │             slots_[i] recycled through free_slots_; seq_index_: SeqId -> slot
//        ├── BlockPool (device): refcounts, LRU free queue, PrefixIndex (hash -> block)
//        ├── BlockHasher: chained hash of full blocks (+ PrefixKey extra keys)
//        ├── SwapSpace: free ids of the host pool, shared by swap and the host prefix tier
//        └── HostPrefixCache (host prefix tier): hash -> host block, LRU
//
// Threading: owned and called only by the engine thread, so there are no locks.
//
// Lifecycle of a sequence's KV:
//   match_prefix (optional, first)  -> table starts with cached blocks (refs taken)
//   allocate(n) ... allocate(1)     -> slots appended; copy-on-write of a shared tail block
//   commit_full_blocks(tokens)      -> newly filled full blocks published for prefix hits
//   fork(parent, child)             -> n > 1 samples share every block until they diverge
//   truncate(new_len)               -> compression drops trailing blocks
//   release_before(first_needed)    -> sliding-window models drop leading blocks
//   swap_out / swap_in              -> preemption without recompute (host tier)
//   free                            -> blocks back to the LRU, tail first; idempotent
//
// Host pool accounting (one pool of host blocks, two users):
//   - swap (preempted sequences) may take every block of the pool: when free blocks run short,
//     the prefix tier yields its least recently used blocks (dropped, never written back);
//   - the prefix tier holds at most `host_cache_blocks` and only takes blocks that are free:
//     it never makes a swap-out fail that would have succeeded without it.
// The host pool is sized host_swap_bytes + host_cache_bytes (host_kv_cache.h).
//
// Tiered prefix cache. When allocation evicts a cached device block (its hash is dropped for
// new content), the block is offloaded: copied device -> host into the prefix tier (a copy
// appended to the step's swap-out list). match_prefix continues a device hit with host-tier
// blocks: each takes a fresh device block and a host -> device copy (the swap-in list). A
// host block read or written by a copy of the current step is never handed out again in the
// same step (it waits in quarantine_ until begin_step): the runner executes all swap-outs,
// then all swap-ins. A host block that a copy of the current step READS (a swap-in or a load)
// is never handed out again in the same step (it waits in quarantine_ until begin_step): a
// later write to it would run first. Blocks only written this step may be reused: writes run
// in list order, so the last owner's copy lands last.
//
// Demotion tier pools (importance-aware mixed precision, issue 18). Each tier is a pool of
// its own (cache.demote_dtypes: one per lower precision, sized from cache.demote_kv_bytes, so
// a tier block costs that tier's bytes, not the main pool's). reserve_tier_blocks grants a
// sequence a fixed number of a tier's blocks at once (all or nothing); the runner fills
// them with demoted tokens. Accounting rule: the main pool counts only full-precision
// blocks; a granted tier block is used in its tier pool from the grant until the sequence is
// freed (finished, aborted, or preempted: such a sequence is always recomputed, never
// swapped, so tier blocks never reach the host tier). They are never shared or published.
//
// "No room" is an ordinary answer (false / nullopt), never an error: the scheduler preempts,
// swaps or waits. Misuse (e.g. allocate on a swapped-out sequence) is a bug and aborts.
// Copy lists returned here must be executed in call order (kv_storage.h).
//
// Design notes (NOTE):
//   - Writing into a partially filled tail block: if it is shared (refcount > 1) allocate()
//     copies it first (CoW, reported in AllocationDelta::cow); if it is private but
//     published (a full block that truncate() made partial again) it leaves the prefix
//     index first, so cached content never changes under a hit.
//   - The delta names the first changed table index: with CoW the last entry is replaced,
//     so "append only" holds for every entry but a CoW'd tail.
//   - Swap-out copies every block, shared ones included (a swapped sequence owns its host
//     copy; sharing is not preserved across a swap). Swap-in first looks committed blocks
//     up in the prefix index: blocks still cached on the device are reused, not copied.
//   - Hot paths (allocate, free, match_prefix, commit) do not allocate in steady state:
//     sequence states are recycled with their vectors' capacity and deltas hold up to 4
//     blocks inline. swap_out/swap_in return vectors (rare, preemption only).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/hash/hash.h"
#include "base/logger.h"
#include "cache/block_hasher.h"
#include "cache/block_pool.h"
#include "cache/cache_types.h"
#include "cache/cache_usage.h"
#include "cache/host_prefix_cache.h"
#include "cache/kv_layout.h"
#include "cache/sequence_kv_state.h"
#include "cache/swap_space.h"

namespace kvserve::cache {

// When blocks are handed to the remote tier (take_remote_writes).
enum class RemoteWrites : uint8_t {
  kNone,          // no remote tier
  kWriteThrough,  // every block committed by a non-compressing sequence
  kWriteBack,     // blocks the host prefix tier evicts (LRU), not those yielded to swap
};

// A block to publish to the remote tier: read its bytes after the step ran, before the next
// Schedule (the block stays untouched until then).
struct RemoteWrite {
  BlockHash hash;
  uint64_t tenant_salt = 0;
  BlockId block;
  bool on_host = false;  // block id in the host pool; otherwise in the device pool
};

// Read-only probe of the tiers for a prompt (no references taken, nothing copied).
struct PrefixProbe {
  int32_t eligible_blocks = 0;  // full blocks a hit may cover (prompt_len - 1 tokens)
  int32_t cached_blocks = 0;    // leading blocks found on the device or in the host tier
};

struct KvCacheManagerOptions {
  KvLayout layout;                // block_size and the bytes per block (for the log)
  int32_t num_blocks = 0;         // device pool, including the null block (>= 2)
  int32_t num_host_blocks = 0;    // host pool (swap + prefix tier); 0: no host tier
  int32_t host_cache_blocks = 0;  // most blocks the host prefix tier holds; 0: off
  RemoteWrites remote_writes = RemoteWrites::kNone;  // what to hand the remote tier
  bool enable_prefix_caching = true;
  // Usable blocks (without the null block) of each demotion tier pool; empty: no tiers.
  std::vector<int32_t> demote_tier_blocks;
  std::vector<size_t> demote_tier_block_bytes;  // bytes per block of each tier (kv_layout.h)
  uint64_t hash_seed = BlockHasher::kDefaultSeed;
  // Layer groups (cache/layer_groups.h): window tables per sequence and the window they
  // keep; 0: one table. Needs enable_prefix_caching = false (a hit would lack the window
  // layers' KV before it).
  int32_t num_window_groups = 0;
  int32_t group_window = 0;
  int32_t expected_sequences = 256;  // capacity reserved up front (not a limit)
};

// Result of match_prefix: the first num_blocks table entries (num_tokens tokens) came from
// the prefix cache; the sequence computes from token num_tokens on.
struct PrefixMatch {
  int32_t num_blocks = 0;
  int64_t num_tokens = 0;
  int32_t host_blocks = 0;    // of num_blocks: loaded from the host tier (copies pending)
  int32_t remote_blocks = 0;  // of host_blocks: first use of a block fetched from the remote tier
};

// What allocate() changed: the model runner applies it to its copy of the block table.
struct AllocationDelta {
  int64_t first_pos = 0;            // position of the first new token slot
  int32_t num_tokens = 0;           // new token slots
  int32_t first_changed_block = 0;  // table index of blocks[0]
  // New values of table entries [first_changed_block, first_changed_block + blocks.size()):
  // appended blocks, preceded by the private copy of the tail block when `cow` is set.
  absl::InlinedVector<BlockId, 4> blocks;
  // Copy-on-write: copy cow->src into cow->dst (== blocks[0]) before writing new tokens.
  std::optional<BlockCopy> cow;
  // Layer groups: the same for the window tables (indexed by absolute position), group-major:
  // window_blocks[j * k + i] is the new entry window_first_block + i of group j's table,
  // k = window_blocks.size() / num_window_groups; window_cow holds the tail copies.
  int32_t window_first_block = 0;
  absl::InlinedVector<BlockId, 4> window_blocks;
  absl::InlinedVector<BlockCopy, 1> window_cow;
};

class KvCacheManager {
 public:
  KvCacheManager(const KvCacheManagerOptions& options, base::Logger logger);
  KvCacheManager(const KvCacheManager&) = delete;
  KvCacheManager& operator=(const KvCacheManager&) = delete;

  // ---- prefix cache
  // Looks up the longest cached prefix of `prompt_tokens` (full blocks, at most
  // prompt_len - 1 tokens so the last prompt token is always computed and yields logits),
  // takes a reference on each hit block and starts `seq`'s table with them. Also records
  // `key` as the sequence's extra keys for commit_full_blocks. `seq` must hold no KV yet
  // (new, or freed after preemption). With prefix caching off it only records the key.
  PrefixMatch match_prefix(SeqId seq, std::span<const int32_t> prompt_tokens, const PrefixKey& key);
  // Hashes the full blocks filled since the last call and publishes them for prefix hits.
  // `tokens` are all tokens of the sequence so far (prompt + output) whose KV is stored.
  // Blocks reaching past the publish limit are not published; sequences that never went
  // through match_prefix have no key and publish nothing.
  void commit_full_blocks(SeqId seq, std::span<const int32_t> tokens);
  // Blocks holding tokens at or past `max_tokens` are never published (compression: blocks
  // with evictable tokens must not become cache hits). Set it before those blocks commit;
  // creates the sequence if it does not exist yet.
  void set_publish_limit(SeqId seq, int64_t max_tokens);

  // ---- tiers (host prefix tier, remote tier hand-off)
  // Start of a scheduler step: host blocks quarantined during the last one become free.
  void begin_step();
  // Appends and clears the copies the tiers need this step: offloads (device -> host, to
  // run with the swap-outs) and loads (host -> device, with the swap-ins).
  void take_tier_copies(std::vector<BlockCopy>& to_host, std::vector<BlockCopy>& to_device);
  // Appends and clears the blocks to publish to the remote tier (RemoteWrites).
  void take_remote_writes(std::vector<RemoteWrite>& out);
  PrefixProbe probe_prefix(std::span<const int32_t> prompt_tokens, const PrefixKey& key) const;
  // Chain hashes of full blocks [from, to) of `tokens` under `key` (appended to `out`).
  void prefix_hashes(std::span<const int32_t> tokens, const PrefixKey& key, int32_t from,
                     int32_t to, std::vector<BlockHash>& out) const;
  // A host block for a block fetched from the remote tier, held by the prefix tier under
  // `hash` (evicting its LRU entry if full); nullopt when the tier is off, already holds the
  // hash, or has no free block. The caller fills its bytes before the next Schedule.
  std::optional<BlockId> insert_remote_block(BlockHash hash, uint64_t tenant_salt);
  bool host_cache_enabled() const { return host_cache_.enabled(); }

  // ---- allocation
  // Blocks allocate(seq, num_new_tokens) would take from the free queue (CoW included).
  int32_t blocks_needed(SeqId seq, int num_new_tokens) const;
  bool can_allocate(SeqId seq, int num_new_tokens) const;
  // Appends `num_new_tokens` token slots to `seq` (created on first use). nullopt, with no
  // change, when the free queue cannot supply the blocks.
  std::optional<AllocationDelta> allocate(SeqId seq, int num_new_tokens);
  // `child` (must not exist) shares all of `parent`'s blocks and prefix state.
  void fork(SeqId parent, SeqId child);
  // Sliding-window models whose every layer is windowed: tokens before `first_needed` are
  // never attended again, so the blocks wholly before it go back to the pool (a published
  // one stays a prefix-cache entry until evicted) and their table entries become kNullBlock;
  // slot mapping and logical indices are unchanged. With prefix caching on, only committed
  // blocks are released (a block is published before it leaves). A sequence holding
  // released entries is preempted by recompute, never swapped. Returns blocks released.
  // With layer groups it releases the window tables' front instead (every window group; the
  // main table keeps every block); `first_needed` is then an absolute position.
  int32_t release_before(SeqId seq, int64_t first_needed);
  // Shrinks `seq`'s main table to its first `new_num_tokens` tokens, freeing trailing blocks
  // (tail first); window tables are untouched (a compaction rewrites global layers only).
  // Returns the number of blocks released.
  int32_t truncate(SeqId seq, int64_t new_num_tokens);
  // Speculative decoding: the last `num_rejected` slots of every table (rejected guesses, the
  // step's trailing rows) go. The main table may be shorter than the window tables (it is
  // physical and compression compacts it; window tables are indexed by position), so both
  // drop the same count, not to the same length. Returns the blocks released.
  int32_t rollback(SeqId seq, int64_t num_rejected);
  // Releases everything `seq` holds (device blocks tail first, or host blocks) and forgets
  // it. Idempotent: unknown sequences are a no-op. Returns the blocks released.
  int32_t free(SeqId seq);

  // ---- demotion tiers
  int num_demote_tiers() const { return static_cast<int>(tier_pools_.size()); }
  // Grants `seq` (must be resident) num_blocks more blocks of demotion tier `tier`, all or
  // nothing: the granted ids (the tail of its tier table), or nullopt with no change when the
  // tier pool has fewer free blocks.
  std::optional<std::span<const BlockId>> reserve_tier_blocks(SeqId seq, int tier,
                                                              int32_t num_blocks);
  // Empty for unknown sequences or tiers never granted.
  std::span<const BlockId> tier_blocks(SeqId seq, int tier) const;
  const BlockPool& tier_pool(int tier) const { return tier_pools_[static_cast<size_t>(tier)]; }
  // KV bytes (all layers, K and V, scales) of the blocks `seq` holds now: its table's blocks
  // (shared ones counted in full) plus its granted tier blocks at their tiers' block size.
  int64_t kv_bytes_held(SeqId seq) const;

  // ---- host swap tier
  // False for a sequence holding demotion tier blocks (it is recomputed instead).
  bool can_swap_out(SeqId seq) const;
  // Copies (device src -> host dst) to run before the freed device blocks are reused;
  // nullopt when the host tier is disabled or full (the scheduler recomputes instead).
  std::optional<std::vector<BlockCopy>> swap_out(SeqId seq);
  bool can_swap_in(SeqId seq) const;
  // Copies (host src -> device dst); nullopt when the device pool cannot hold the
  // sequence. Blocks whose content is still cached on the device are reused, not copied.
  std::optional<std::vector<BlockCopy>> swap_in(SeqId seq);

  // ---- queries
  bool contains(SeqId seq) const { return seq_index_.contains(seq); }
  bool is_swapped(SeqId seq) const;
  // Empty for unknown or swapped-out sequences.
  std::span<const BlockId> block_table(SeqId seq) const;
  // Window table of window group `group` (layer groups); empty when off or unknown.
  std::span<const BlockId> window_table(SeqId seq, int group) const;
  int num_window_groups() const { return num_window_groups_; }
  int32_t group_window() const { return group_window_; }
  int64_t num_tokens(SeqId seq) const;
  int32_t num_committed_blocks(SeqId seq) const;
  // Physical slot of token position `pos` / of a run of positions (the slot mapping).
  int64_t slot(SeqId seq, int64_t pos) const;
  void slot_mapping(SeqId seq, int64_t first_pos, std::span<int64_t> out) const;
  CacheUsage usage() const;

  int block_size() const { return block_size_; }
  size_t bytes_per_block() const { return bytes_per_block_; }
  const KvLayout& layout() const { return layout_; }
  bool prefix_caching_enabled() const { return enable_prefix_caching_; }
  int32_t num_sequences() const { return static_cast<int32_t>(seq_index_.size()); }
  // Tokens the device pool holds when full.
  int64_t max_tokens() const { return static_cast<int64_t>(pool_.num_usable()) * block_size_; }

  // Aborts with the violated invariant (cache_invariants.h) in builds with
  // KVSERVE_DEBUG_CHECKS; a no-op otherwise. The engine calls it once per step.
  void debug_check() const;

  // ---- introspection (invariant checker, tests)
  const BlockPool& block_pool() const { return pool_; }
  const SwapSpace& swap_space() const { return swap_; }
  const HostPrefixCache& host_cache() const { return host_cache_; }
  // Host blocks waiting for the next step before they become free (see the class comment).
  std::span<const BlockId> host_quarantine() const { return quarantine_; }
  const BlockHasher& hasher() const { return hasher_; }
  // f(SeqId, const SequenceKvState&) for every known sequence.
  template <typename F>
  void for_each_sequence(F&& f) const {
    for (const auto& [id, index] : seq_index_) f(id, slots_[index]);
  }

 private:
  friend struct KvCacheManagerTestPeer;  // tests corrupt state to prove the checker catches it

  SequenceKvState* find(SeqId seq);
  const SequenceKvState* find(SeqId seq) const;
  // Creates an empty state for a sequence that must not exist yet.
  SequenceKvState& create(SeqId seq);
  void erase(SeqId seq);
  int32_t blocks_needed(const SequenceKvState& s, int num_new_tokens) const;
  int32_t window_blocks_needed(const SequenceKvState& s, int num_new_tokens) const;
  // allocate()'s window half: every window table grows by num_new_tokens positions.
  void grow_windows(SequenceKvState& s, int num_new_tokens, AllocationDelta& d);
  int32_t shrink_windows(SequenceKvState& s, int64_t new_num_tokens);
  void release_table_tail_first(SequenceKvState& s);
  void release_tier_blocks(SequenceKvState& s);
  // pool_.allocate(), offloading the evicted content to the host tier first.
  std::optional<BlockId> allocate_device_block();
  void offload(BlockId device_block);
  // Drops the host tier's LRU entry (written back to the remote tier unless `for_swap`).
  // False when the LRU entry is read by a copy of this step.
  bool evict_host_lru(bool for_swap);
  // Gives a host block back to the pool, or to quarantine when this step's copies read it.
  void release_host(BlockId b);
  bool host_busy(BlockId b) const { return host_busy_step_[b.value()] == step_; }
  void publish_device(BlockId b, BlockHash h, uint64_t tenant_salt, bool remote_ok);

  const int block_size_;
  const size_t bytes_per_block_;
  const KvLayout layout_;
  const bool enable_prefix_caching_;
  const int32_t num_window_groups_;
  const int32_t group_window_;
  base::Logger logger_;
  BlockPool pool_;
  std::vector<BlockPool> tier_pools_;  // demotion tiers; refcount 1 while granted
  std::vector<size_t> tier_block_bytes_;
  BlockHasher hasher_;
  SwapSpace swap_;
  HostPrefixCache host_cache_;
  const RemoteWrites remote_writes_mode_;
  int64_t step_ = 0;
  std::vector<int64_t> host_busy_step_;  // per host block: last step a copy read it
  std::vector<BlockId> quarantine_;
  std::vector<BlockId> host_scratch_;
  std::vector<BlockCopy> tier_to_host_;
  std::vector<BlockCopy> tier_to_device_;
  std::vector<RemoteWrite> remote_writes_;
  // Per device block, valid while it holds a hash: tenant salt and remote eligibility.
  std::vector<uint64_t> device_salt_;
  std::vector<uint8_t> device_remote_ok_;

  std::vector<SequenceKvState> slots_;
  std::vector<int32_t> free_slots_;
  struct SeqIdHash {
    size_t operator()(SeqId s) const { return absl::Hash<int64_t>{}(s.value()); }
  };
  absl::flat_hash_map<SeqId, int32_t, SeqIdHash> seq_index_;

  // Cumulative counters (see CacheUsage).
  uint64_t prefix_queries_ = 0;
  uint64_t prefix_query_tokens_ = 0;
  uint64_t prefix_hit_tokens_ = 0;
  uint64_t prefix_query_blocks_ = 0;
  uint64_t prefix_hit_blocks_ = 0;
  uint64_t allocated_blocks_ = 0;
  uint64_t cow_copies_ = 0;
  uint64_t window_released_blocks_ = 0;
  uint64_t swapped_out_blocks_ = 0;
  uint64_t swapped_in_blocks_ = 0;
  uint64_t swap_in_reused_blocks_ = 0;
  uint64_t host_hit_blocks_ = 0;
  uint64_t host_query_blocks_ = 0;
  uint64_t remote_hit_blocks_ = 0;
  uint64_t offloaded_blocks_ = 0;
  uint64_t offload_skipped_ = 0;
  uint64_t host_evicted_blocks_ = 0;
  uint64_t host_yielded_blocks_ = 0;
};

}  // namespace kvserve::cache
