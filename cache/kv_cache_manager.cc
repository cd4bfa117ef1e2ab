#include "cache/kv_cache_manager.h"

#include <algorithm>
#include <limits>
#include <string>

#include "base/check.h"
#include "cache/cache_invariants.h"
#include "config/fields.h"

namespace kvserve::cache {

KvCacheManager::KvCacheManager(const KvCacheManagerOptions& options, base::Logger logger)
    : block_size_(options.layout.block_size),
      bytes_per_block_(options.layout.block_size > 0 ? options.layout.bytes_per_block() : 0),
      layout_(options.layout),
      enable_prefix_caching_(options.enable_prefix_caching),
      num_window_groups_(options.num_window_groups),
      group_window_(options.group_window),
      logger_(std::move(logger)),
      pool_(options.num_blocks),
      hasher_(options.hash_seed),
      swap_(options.num_host_blocks),
      host_cache_(options.num_host_blocks, options.host_cache_blocks),
      remote_writes_mode_(options.remote_writes),
      host_busy_step_(static_cast<size_t>(options.num_host_blocks), -1),
      device_salt_(static_cast<size_t>(options.num_blocks), 0),
      device_remote_ok_(static_cast<size_t>(options.num_blocks), 0) {
  KVS_CHECK(block_size_ > 0 && (block_size_ & (block_size_ - 1)) == 0,
            "block_size must be a power of two, got ", block_size_);
  KVS_CHECK(num_window_groups_ == 0 || (group_window_ > 0 && !host_cache_.enabled()),
            "layer groups need a window and no host prefix tier");
  slots_.reserve(options.expected_sequences);
  free_slots_.reserve(options.expected_sequences);
  seq_index_.reserve(options.expected_sequences);
  const KvLayout& l = options.layout;
  logger_.info(
      "kv cache: %d blocks of %d tokens (+1 null block), %d bytes per block, max %d tokens, "
      "dtype %s (%.1f bytes/token), prefix caching %s, host pool %d blocks (prefix tier up to %d)",
      pool_.num_usable(), block_size_, static_cast<int64_t>(l.bytes_per_block()), max_tokens(),
      std::string(config::Name(l.dtype)), l.block_size > 0 ? l.bytes_per_token() : 0.0,
      enable_prefix_caching_ ? "on" : "off", swap_.num_blocks(), host_cache_.capacity());
  quarantine_.reserve(static_cast<size_t>(options.num_host_blocks));
  for (int32_t blocks : options.demote_tier_blocks) {
    KVS_CHECK(blocks >= 1, "demotion tier pool of ", blocks, " blocks");
    tier_pools_.emplace_back(blocks + 1);
  }
  tier_block_bytes_ = options.demote_tier_block_bytes;
  tier_block_bytes_.resize(tier_pools_.size(), 0);
}

// ------------------------------------------------------------------ sequence states

SequenceKvState* KvCacheManager::find(SeqId seq) {
  auto it = seq_index_.find(seq);
  return it == seq_index_.end() ? nullptr : &slots_[it->second];
}

const SequenceKvState* KvCacheManager::find(SeqId seq) const {
  auto it = seq_index_.find(seq);
  return it == seq_index_.end() ? nullptr : &slots_[it->second];
}

SequenceKvState& KvCacheManager::create(SeqId seq) {
  int32_t slot;
  if (!free_slots_.empty()) {
    slot = free_slots_.back();
    free_slots_.pop_back();
  } else {
    slot = static_cast<int32_t>(slots_.size());
    slots_.emplace_back(block_size_);
  }
  const bool inserted = seq_index_.try_emplace(seq, slot).second;
  KVS_CHECK(inserted, "sequence ", seq.value(), " already exists");
  SequenceKvState& s = slots_[slot];
  s.reset();
  while (s.window.size() < static_cast<size_t>(num_window_groups_))
    s.window.emplace_back(block_size_);
  return s;
}

void KvCacheManager::erase(SeqId seq) {
  auto it = seq_index_.find(seq);
  KVS_DCHECK(it != seq_index_.end(), "erase of unknown sequence ", seq.value());
  slots_[it->second].reset();  // keeps vector capacity for the next sequence
  free_slots_.push_back(it->second);
  seq_index_.erase(it);
}

void KvCacheManager::release_tier_blocks(SequenceKvState& s) {
  for (size_t t = 0; t < s.tier_blocks.size(); ++t) {
    for (BlockId b : s.tier_blocks[t]) tier_pools_[t].release(b);
    s.tier_blocks[t].clear();
  }
}

void KvCacheManager::release_table_tail_first(SequenceKvState& s) {
  // NOTE: tail first, so that with LRU eviction the end of a cached prefix chain goes
  // before its beginning (which more requests share).
  while (!s.table.empty()) {
    const BlockId b = s.table.pop_block();
    if (b != kNullBlock) pool_.release(b);  // released_front entries hold no reference
  }
  s.table.clear();
  s.released_front = 0;
  shrink_windows(s, 0);
}

// ------------------------------------------------------------------ prefix cache

PrefixMatch KvCacheManager::match_prefix(SeqId seq, std::span<const int32_t> prompt_tokens,
                                         const PrefixKey& key) {
  SequenceKvState* existing = find(seq);
  SequenceKvState& s = existing ? *existing : create(seq);
  KVS_CHECK(!s.swapped && s.table.empty() && s.table.num_tokens() == 0, "match_prefix on sequence ",
            seq.value(), " that already holds KV");
  s.root = hasher_.root(key);
  s.tenant_salt = TenantSalt(key);
  s.hashes.clear();
  ++prefix_queries_;
  prefix_query_tokens_ += prompt_tokens.size();
  if (!enable_prefix_caching_ || prompt_tokens.empty()) return {};

  // NOTE: cap at prompt_len - 1: the last prompt token must be computed to produce the
  // logits of the first output token, so a full-prompt hit still recomputes one block.
  const int32_t max_blocks = static_cast<int32_t>((prompt_tokens.size() - 1) / block_size_);
  prefix_query_blocks_ += max_blocks;
  BlockHash parent = s.root;
  int32_t n = 0;
  for (; n < max_blocks; ++n) {
    const BlockHash h = hasher_.chain(
        parent, prompt_tokens.subspan(static_cast<size_t>(n) * block_size_, block_size_));
    const std::optional<BlockId> b = pool_.find_cached(h);
    if (!b) break;
    pool_.retain(*b);
    s.table.append_block(*b);
    s.hashes.push_back(h);
    parent = h;
  }
  // Layer groups: the hit ends where every window group also holds the window before it.
  if (num_window_groups_ > 0) n = match_windows(s, n);
  // The host tier continues the chain: each hit takes a fresh device block and a copy.
  int32_t host_hits = 0, remote_hits = 0;
  if (host_cache_.enabled()) host_query_blocks_ += max_blocks - n;
  for (; n < max_blocks && host_cache_.enabled(); ++n) {
    const BlockHash h = hasher_.chain(
        parent, prompt_tokens.subspan(static_cast<size_t>(n) * block_size_, block_size_));
    const std::optional<BlockId> host = host_cache_.find(h);
    if (!host || pool_.num_free() == 0) break;
    // Busy and most recently used first: allocating below may offload and evict the LRU.
    host_cache_.touch(*host);
    host_busy_step_[host->value()] = step_;
    const BlockId dev = *allocate_device_block();
    HostBlockInfo& info = host_cache_.mutable_info(*host);
    publish_device(dev, h, info.tenant_salt, info.remote_ok);
    if (info.from_remote) {
      info.from_remote = false;
      ++remote_hits;
    }
    tier_to_device_.push_back({*host, dev});
    s.table.append_block(dev);
    s.hashes.push_back(h);
    ++allocated_blocks_;
    ++host_hits;
    parent = h;
  }
  const int64_t tokens = static_cast<int64_t>(n) * block_size_;
  s.table.set_num_tokens(tokens);
  prefix_hit_blocks_ += n;
  prefix_hit_tokens_ += tokens;
  host_hit_blocks_ += host_hits;
  remote_hit_blocks_ += remote_hits;
  return {n, tokens, host_hits, remote_hits};
}

void KvCacheManager::commit_full_blocks(SeqId seq, std::span<const int32_t> tokens) {
  SequenceKvState* s = find(seq);
  if (!enable_prefix_caching_ || s == nullptr || s->swapped || s->root == kNoHash) return;
  const int64_t limit_tokens = std::min<int64_t>(
      {s->table.num_tokens(), static_cast<int64_t>(tokens.size()), s->publish_limit_tokens});
  const int32_t limit_blocks = static_cast<int32_t>(limit_tokens / block_size_);
  for (int32_t i = s->num_committed_blocks(); i < limit_blocks; ++i) {
    const BlockHash parent = i == 0 ? s->root : s->hashes[i - 1];
    const BlockHash h =
        hasher_.chain(parent, tokens.subspan(static_cast<size_t>(i) * block_size_, block_size_));
    const BlockId b = s->table[i];
    const BlockHash current = pool_.hash(b);
    if (current == kNoHash) {
      // NOTE: a compressing sequence (publish limit set) is never handed to the remote tier:
      // other replicas would need the same limit to use it safely; keep it local.
      const bool remote_ok = s->publish_limit_tokens == std::numeric_limits<int64_t>::max();
      publish_device(b, h, s->tenant_salt, remote_ok);
      if (remote_ok && remote_writes_mode_ == RemoteWrites::kWriteThrough) {
        remote_writes_.push_back({h, s->tenant_salt, b, false});
      }
    } else {
      // Shared with a fork sibling that committed it first: same tokens, same hash.
      KVS_DCHECK(current == h, "block ", b.value(), " of sequence ", seq.value(),
                 " already published with different content");
    }
    s->hashes.push_back(h);
  }
  if (num_window_groups_ > 0) commit_windows(*s);
}

void KvCacheManager::set_publish_limit(SeqId seq, int64_t max_tokens) {
  SequenceKvState* existing = find(seq);
  SequenceKvState& s = existing ? *existing : create(seq);
  s.publish_limit_tokens = std::max<int64_t>(0, max_tokens);
}

// ------------------------------------------------------------------ allocation

int32_t KvCacheManager::blocks_needed(const SequenceKvState& s, int num_new_tokens) const {
  int32_t need = s.table.BlocksFor(s.table.num_tokens() + num_new_tokens) - s.table.num_blocks();
  // A partially filled tail block shared with another sequence is copied before writing.
  if (num_new_tokens > 0 && s.table.tail_fill() != 0 && pool_.refcount(s.table.back()) > 1) ++need;
  return need + window_blocks_needed(s, num_new_tokens);
}

int32_t KvCacheManager::blocks_needed(SeqId seq, int num_new_tokens) const {
  KVS_CHECK(num_new_tokens >= 0, "negative token count ", num_new_tokens);
  const SequenceKvState* s = find(seq);
  if (s == nullptr)
    return static_cast<int32_t>((num_new_tokens + block_size_ - 1) / block_size_) *
           (1 + num_window_groups_);
  KVS_CHECK(!s->swapped, "blocks_needed on swapped-out sequence ", seq.value());
  return blocks_needed(*s, num_new_tokens);
}

bool KvCacheManager::can_allocate(SeqId seq, int num_new_tokens) const {
  const SequenceKvState* s = find(seq);
  if (s != nullptr && s->swapped) return false;
  return blocks_needed(seq, num_new_tokens) <= pool_.num_free();
}

std::optional<AllocationDelta> KvCacheManager::allocate(SeqId seq, int num_new_tokens) {
  KVS_CHECK(num_new_tokens >= 0, "negative token count ", num_new_tokens);
  SequenceKvState* existing = find(seq);
  KVS_CHECK(existing == nullptr || !existing->swapped, "allocate on swapped-out sequence ",
            seq.value());
  const int32_t need =
      existing ? blocks_needed(*existing, num_new_tokens)
               : static_cast<int32_t>((num_new_tokens + block_size_ - 1) / block_size_) *
                     (1 + num_window_groups_);
  if (need > pool_.num_free()) return std::nullopt;
  SequenceKvState& s = existing ? *existing : create(seq);
  BlockTable& t = s.table;

  AllocationDelta d;
  d.first_pos = t.num_tokens();
  d.num_tokens = num_new_tokens;
  d.first_changed_block = t.num_blocks();
  if (num_new_tokens > 0 && t.tail_fill() != 0) {
    // The tail block is about to receive new rows: it must be private and unpublished.
    const BlockId tail = t.back();
    const int32_t tail_index = t.num_blocks() - 1;
    KVS_DCHECK(tail_index >= s.num_committed_blocks(), "partial tail block ", tail.value(),
               " counted as committed");
    if (pool_.refcount(tail) > 1) {
      const BlockId copy = *allocate_device_block();
      pool_.release(tail);
      t.replace_block(tail_index, copy);
      d.first_changed_block = tail_index;
      d.blocks.push_back(copy);
      d.cow = BlockCopy{tail, copy};
      ++cow_copies_;
      ++allocated_blocks_;
    } else if (pool_.hash(tail) != kNoHash) {
      // Published full block that truncate() made partial again: its cached content is
      // about to change, so it leaves the prefix index first.
      pool_.unpublish(tail);
    }
  }
  const int32_t target = t.BlocksFor(t.num_tokens() + num_new_tokens);
  while (t.num_blocks() < target) {
    const BlockId b = *allocate_device_block();  // availability checked above
    t.append_block(b);
    d.blocks.push_back(b);
    ++allocated_blocks_;
  }
  t.set_num_tokens(t.num_tokens() + num_new_tokens);
  grow_windows(s, num_new_tokens, d);
  return d;
}

void KvCacheManager::fork(SeqId parent, SeqId child) {
  KVS_CHECK(find(parent) != nullptr, "fork of unknown sequence ", parent.value());
  KVS_CHECK(!find(parent)->swapped, "fork of swapped-out sequence ", parent.value());
  SequenceKvState& c = create(child);  // may move slots_: look the parent up again after
  const SequenceKvState& p = *find(parent);
  c.table.assign(p.table);
  c.hashes.assign(p.hashes.begin(), p.hashes.end());
  c.root = p.root;
  c.publish_limit_tokens = p.publish_limit_tokens;
  c.released_front = p.released_front;
  for (BlockId b : c.table.blocks()) {
    if (b != kNullBlock) pool_.retain(b);
  }
  for (size_t j = 0; j < c.window.size(); ++j) {
    c.window[j].assign(p.window[j]);
    for (BlockId b : c.window[j].blocks()) {
      if (b != kNullBlock) pool_.retain(b);
    }
  }
  c.window_released_front = p.window_released_front;
  c.window_committed = p.window_committed;
}

int32_t KvCacheManager::release_before(SeqId seq, int64_t first_needed) {
  SequenceKvState* s = find(seq);
  KVS_CHECK(s != nullptr && !s->swapped, "release_before on unknown or swapped-out sequence ",
            seq.value());
  if (!s->window.empty()) {
    // Every window block wholly before goes (prefix caching published the full ones in
    // commit_full_blocks, which the scheduler runs first: they stay cached until evicted).
    const int32_t wend = static_cast<int32_t>(std::min<int64_t>(
        std::max<int64_t>(first_needed, 0) / block_size_, s->window[0].num_full_blocks()));
    int32_t released = 0;
    for (BlockTable& w : s->window) {
      for (int32_t i = s->window_released_front; i < wend; ++i) {
        pool_.release(w[i]);
        w.replace_block(i, kNullBlock);
        ++released;
      }
    }
    s->window_released_front = std::max(s->window_released_front, wend);
    window_released_blocks_ += released;
    return released;
  }
  int32_t end = static_cast<int32_t>(std::min<int64_t>(
      std::max<int64_t>(first_needed, 0) / block_size_, s->table.num_full_blocks()));
  if (enable_prefix_caching_ && s->root != kNoHash) end = std::min(end, s->num_committed_blocks());
  int32_t released = 0;
  for (int32_t i = s->released_front; i < end; ++i) {
    pool_.release(s->table[i]);
    s->table.replace_block(i, kNullBlock);
    ++released;
  }
  s->released_front = std::max(s->released_front, end);
  window_released_blocks_ += released;
  return released;
}

int32_t KvCacheManager::truncate(SeqId seq, int64_t new_num_tokens) {
  SequenceKvState* s = find(seq);
  KVS_CHECK(s != nullptr, "truncate of unknown sequence ", seq.value());
  KVS_CHECK(!s->swapped, "truncate of swapped-out sequence ", seq.value());
  KVS_CHECK(new_num_tokens >= 0 && new_num_tokens <= s->table.num_tokens(), "truncate of sequence ",
            seq.value(), " to ", new_num_tokens, " tokens, it holds ", s->table.num_tokens());
  const int32_t keep = s->table.BlocksFor(new_num_tokens);
  int32_t released = 0;
  while (s->table.num_blocks() > keep) {
    const BlockId b = s->table.pop_block();
    if (b == kNullBlock) continue;  // released by release_before already
    pool_.release(b);
    ++released;
  }
  s->released_front = std::min(s->released_front, keep);
  s->table.set_num_tokens(new_num_tokens);
  const size_t full = static_cast<size_t>(new_num_tokens / block_size_);
  if (s->hashes.size() > full) s->hashes.resize(full);
  return released;
}

int32_t KvCacheManager::free(SeqId seq) {
  SequenceKvState* s = find(seq);
  if (s == nullptr) return 0;
  int32_t released;
  if (s->swapped) {
    released = static_cast<int32_t>(s->host_blocks.size());
    for (BlockId h : s->host_blocks) release_host(h);
  } else {
    released = s->table.num_blocks() - s->released_front;
    for (const BlockTable& w : s->window) released += w.num_blocks() - s->window_released_front;
    release_table_tail_first(*s);
  }
  release_tier_blocks(*s);
  erase(seq);
  return released;
}

// ------------------------------------------------------------------ demotion tiers

std::optional<std::span<const BlockId>> KvCacheManager::reserve_tier_blocks(SeqId seq, int tier,
                                                                            int32_t num_blocks) {
  SequenceKvState* s = find(seq);
  KVS_CHECK(s != nullptr && !s->swapped, "reserve_tier_blocks on unknown or swapped-out sequence ",
            seq.value());
  KVS_CHECK(tier >= 0 && tier < num_demote_tiers() && num_blocks >= 0, "reserve_tier_blocks: tier ",
            tier, ", ", num_blocks, " blocks");
  BlockPool& pool = tier_pools_[static_cast<size_t>(tier)];
  if (num_blocks > pool.num_free()) return std::nullopt;
  if (s->tier_blocks.size() < tier_pools_.size()) s->tier_blocks.resize(tier_pools_.size());
  std::vector<BlockId>& held = s->tier_blocks[static_cast<size_t>(tier)];
  const size_t first = held.size();
  for (int32_t i = 0; i < num_blocks; ++i) held.push_back(*pool.allocate());
  return std::span<const BlockId>(held).subspan(first);
}

int64_t KvCacheManager::kv_bytes_held(SeqId seq) const {
  const SequenceKvState* s = find(seq);
  if (s == nullptr) return 0;
  const int64_t blocks = s->swapped ? static_cast<int64_t>(s->host_blocks.size())
                                    : s->table.num_blocks() - s->released_front;
  int64_t window_blocks = 0;
  for (const BlockTable& w : s->window) window_blocks += w.num_blocks() - s->window_released_front;
  int64_t bytes = (blocks + window_blocks) * static_cast<int64_t>(bytes_per_block_);
  for (size_t t = 0; t < s->tier_blocks.size(); ++t) {
    bytes += static_cast<int64_t>(s->tier_blocks[t].size() * tier_block_bytes_[t]);
  }
  return bytes;
}

std::span<const BlockId> KvCacheManager::tier_blocks(SeqId seq, int tier) const {
  const SequenceKvState* s = find(seq);
  if (s == nullptr || static_cast<size_t>(tier) >= s->tier_blocks.size()) return {};
  return s->tier_blocks[static_cast<size_t>(tier)];
}

// ------------------------------------------------------------------ host swap tier

bool KvCacheManager::can_swap_out(SeqId seq) const {
  // Swap has priority over the prefix tier: its blocks count as available (swap_out makes
  // them yield; entries busy this step cannot, and then swap_out answers nullopt).
  const SequenceKvState* s = find(seq);
  return s != nullptr && !s->swapped && !s->holds_tier_blocks() && s->released_front == 0 &&
         !s->holds_window_blocks() &&
         s->table.num_blocks() <= swap_.num_free() + host_cache_.size() && swap_.num_blocks() > 0;
}

std::optional<std::vector<BlockCopy>> KvCacheManager::swap_out(SeqId seq) {
  SequenceKvState* s = find(seq);
  KVS_CHECK(s != nullptr, "swap_out of unknown sequence ", seq.value());
  KVS_CHECK(!s->swapped, "sequence ", seq.value(), " is already swapped out");
  if (!can_swap_out(seq)) return std::nullopt;
  const int32_t n = s->table.num_blocks();
  while (swap_.num_free() < n && host_cache_.size() > 0) {
    if (!evict_host_lru(/*for_swap=*/true)) break;
  }
  if (swap_.num_free() < n) return std::nullopt;
  s->host_blocks.clear();
  KVS_CHECK(swap_.allocate(n, s->host_blocks), "swap space lost blocks");
  std::vector<BlockCopy> copies;
  copies.reserve(n);
  for (int32_t i = 0; i < n; ++i) copies.push_back({s->table[i], s->host_blocks[i]});
  s->swapped_num_tokens = s->table.num_tokens();
  release_table_tail_first(*s);
  s->swapped = true;
  swapped_out_blocks_ += n;
  return copies;
}

bool KvCacheManager::can_swap_in(SeqId seq) const {
  const SequenceKvState* s = find(seq);
  return s != nullptr && s->swapped &&
         static_cast<int32_t>(s->host_blocks.size()) <= pool_.num_free();
}

std::optional<std::vector<BlockCopy>> KvCacheManager::swap_in(SeqId seq) {
  SequenceKvState* s = find(seq);
  KVS_CHECK(s != nullptr, "swap_in of unknown sequence ", seq.value());
  KVS_CHECK(s->swapped, "sequence ", seq.value(), " is not swapped out");
  if (!can_swap_in(seq)) return std::nullopt;
  const int32_t n = static_cast<int32_t>(s->host_blocks.size());
  std::vector<BlockCopy> copies;
  copies.reserve(n);
  for (int32_t i = 0; i < n; ++i) {
    const bool committed = enable_prefix_caching_ && i < s->num_committed_blocks();
    if (committed) {
      // The block may still sit in the device cache (freed by swap_out, not yet evicted,
      // or shared by another sequence): take it instead of copying it back.
      if (const std::optional<BlockId> cached = pool_.find_cached(s->hashes[i])) {
        pool_.retain(*cached);
        s->table.append_block(*cached);
        ++swap_in_reused_blocks_;
        continue;
      }
    }
    const BlockId b = *allocate_device_block();  // each step takes at most one free block
    s->table.append_block(b);
    copies.push_back({s->host_blocks[i], b});
    host_busy_step_[s->host_blocks[i].value()] = step_;
    ++allocated_blocks_;
    // Full, committed content: findable again once the copy has run (copies run before
    // the next forward pass, see kv_storage.h).
    if (committed) {
      publish_device(b, s->hashes[i], s->tenant_salt,
                     s->publish_limit_tokens == std::numeric_limits<int64_t>::max());
    }
  }
  for (BlockId h : s->host_blocks) release_host(h);
  s->host_blocks.clear();
  s->table.set_num_tokens(s->swapped_num_tokens);
  s->swapped_num_tokens = 0;
  s->swapped = false;
  swapped_in_blocks_ += copies.size();
  return copies;
}

// ------------------------------------------------------------------ tiers

void KvCacheManager::publish_device(BlockId b, BlockHash h, uint64_t tenant_salt, bool remote_ok) {
  pool_.publish(b, h);
  device_salt_[b.value()] = tenant_salt;
  device_remote_ok_[b.value()] = remote_ok ? 1 : 0;
}

std::optional<BlockId> KvCacheManager::allocate_device_block() {
  if (host_cache_.enabled()) {
    const std::optional<BlockId> front = pool_.free_queue().front();
    if (front && pool_.hash(*front) != kNoHash) offload(*front);
  }
  return pool_.allocate();
}

void KvCacheManager::offload(BlockId device_block) {
  const BlockHash h = pool_.hash(device_block);
  if (const std::optional<BlockId> held = host_cache_.find(h)) {
    host_cache_.touch(*held);  // already there (loaded from it, or a duplicate device copy)
    return;
  }
  if (host_cache_.full()) {
    // Evict only if that buys a block: a victim written back stays out of circulation
    // until the next step, so then a free block must exist already.
    const std::optional<BlockId> victim = host_cache_.lru();
    const bool quarantined = victim && remote_writes_mode_ == RemoteWrites::kWriteBack &&
                             host_cache_.info(*victim).remote_ok;
    if ((quarantined && swap_.num_free() == 0) || !evict_host_lru(/*for_swap=*/false)) {
      ++offload_skipped_;
      return;
    }
  }
  host_scratch_.clear();
  if (!swap_.allocate(1, host_scratch_)) {  // every free block is taken by swap
    ++offload_skipped_;
    return;
  }
  const BlockId host = host_scratch_[0];
  HostBlockInfo info;
  info.hash = h;
  info.tenant_salt = device_salt_[device_block.value()];
  info.remote_ok = device_remote_ok_[device_block.value()] != 0;
  host_cache_.insert(host, info);
  tier_to_host_.push_back({device_block, host});
  ++offloaded_blocks_;
}

bool KvCacheManager::evict_host_lru(bool for_swap) {
  const std::optional<BlockId> victim = host_cache_.lru();
  if (!victim || host_busy(*victim)) return false;
  const HostBlockInfo info = host_cache_.info(*victim);
  host_cache_.erase(*victim);
  if (for_swap) {
    ++host_yielded_blocks_;
  } else {
    ++host_evicted_blocks_;
  }
  if (!for_swap && info.remote_ok && remote_writes_mode_ == RemoteWrites::kWriteBack) {
    // Its bytes are read after this step runs: keep the block out of circulation until then.
    remote_writes_.push_back({info.hash, info.tenant_salt, *victim, true});
    quarantine_.push_back(*victim);
    return true;
  }
  release_host(*victim);
  return true;
}

void KvCacheManager::release_host(BlockId b) {
  if (host_busy(b)) {
    quarantine_.push_back(b);
  } else {
    const BlockId one[] = {b};
    swap_.release(one);
  }
}

void KvCacheManager::begin_step() {
  ++step_;
  swap_.release(quarantine_);
  quarantine_.clear();
}

void KvCacheManager::take_tier_copies(std::vector<BlockCopy>& to_host,
                                      std::vector<BlockCopy>& to_device) {
  to_host.insert(to_host.end(), tier_to_host_.begin(), tier_to_host_.end());
  to_device.insert(to_device.end(), tier_to_device_.begin(), tier_to_device_.end());
  tier_to_host_.clear();
  tier_to_device_.clear();
}

void KvCacheManager::take_remote_writes(std::vector<RemoteWrite>& out) {
  out.insert(out.end(), remote_writes_.begin(), remote_writes_.end());
  remote_writes_.clear();
}

PrefixProbe KvCacheManager::probe_prefix(std::span<const int32_t> prompt_tokens,
                                         const PrefixKey& key) const {
  PrefixProbe p;
  if (!enable_prefix_caching_ || prompt_tokens.empty()) return p;
  p.eligible_blocks = static_cast<int32_t>((prompt_tokens.size() - 1) / block_size_);
  BlockHash parent = hasher_.root(key);
  for (; p.cached_blocks < p.eligible_blocks; ++p.cached_blocks) {
    const BlockHash h = hasher_.chain(
        parent,
        prompt_tokens.subspan(static_cast<size_t>(p.cached_blocks) * block_size_, block_size_));
    if (!pool_.find_cached(h) && !host_cache_.find(h)) break;
    parent = h;
  }
  return p;
}

void KvCacheManager::prefix_hashes(std::span<const int32_t> tokens, const PrefixKey& key,
                                   int32_t from, int32_t to, std::vector<BlockHash>& out) const {
  KVS_CHECK(from >= 0 && to >= from && static_cast<size_t>(to) * block_size_ <= tokens.size(),
            "prefix_hashes of blocks [", from, ",", to, ") of ", tokens.size(), " tokens");
  BlockHash parent = hasher_.root(key);
  for (int32_t i = 0; i < to; ++i) {
    parent =
        hasher_.chain(parent, tokens.subspan(static_cast<size_t>(i) * block_size_, block_size_));
    if (i >= from) out.push_back(parent);
  }
}

std::optional<BlockId> KvCacheManager::insert_remote_block(BlockHash hash, uint64_t tenant_salt) {
  if (!host_cache_.enabled() || host_cache_.find(hash)) return std::nullopt;
  if (host_cache_.full()) {
    const std::optional<BlockId> victim = host_cache_.lru();
    const bool quarantined = victim && remote_writes_mode_ == RemoteWrites::kWriteBack &&
                             host_cache_.info(*victim).remote_ok;
    if ((quarantined && swap_.num_free() == 0) || !evict_host_lru(/*for_swap=*/false))
      return std::nullopt;
  }
  host_scratch_.clear();
  if (!swap_.allocate(1, host_scratch_)) return std::nullopt;
  HostBlockInfo info;
  info.hash = hash;
  info.tenant_salt = tenant_salt;
  info.remote_ok = false;  // it came from there
  info.from_remote = true;
  host_cache_.insert(host_scratch_[0], info);
  return host_scratch_[0];
}

// ------------------------------------------------------------------ queries

void KvCacheManager::debug_check() const {
#if defined(KVSERVE_DEBUG_CHECKS)
  const absl::Status st = CheckCacheInvariants(*this);
  KVS_CHECK(st.ok(), st.ToString());
#endif
}

bool KvCacheManager::is_swapped(SeqId seq) const {
  const SequenceKvState* s = find(seq);
  return s != nullptr && s->swapped;
}

std::span<const BlockId> KvCacheManager::block_table(SeqId seq) const {
  const SequenceKvState* s = find(seq);
  if (s == nullptr) return {};
  return s->table.blocks();
}

int64_t KvCacheManager::num_tokens(SeqId seq) const {
  const SequenceKvState* s = find(seq);
  return s == nullptr ? 0 : s->num_tokens();
}

int32_t KvCacheManager::num_committed_blocks(SeqId seq) const {
  const SequenceKvState* s = find(seq);
  return s == nullptr ? 0 : s->num_committed_blocks();
}

int64_t KvCacheManager::slot(SeqId seq, int64_t pos) const {
  const SequenceKvState* s = find(seq);
  KVS_CHECK(s != nullptr && !s->swapped, "slot of unknown or swapped-out sequence ", seq.value());
  KVS_CHECK(pos >= 0 && pos < static_cast<int64_t>(s->table.num_blocks()) * block_size_,
            "position ", pos, " outside the table of sequence ", seq.value());
  return s->table.slot(pos);
}

void KvCacheManager::slot_mapping(SeqId seq, int64_t first_pos, std::span<int64_t> out) const {
  const SequenceKvState* s = find(seq);
  KVS_CHECK(s != nullptr && !s->swapped, "slot mapping of unknown or swapped-out sequence ",
            seq.value());
  s->table.slot_mapping(first_pos, out);
}

CacheUsage KvCacheManager::usage() const {
  CacheUsage u;
  u.block_size = block_size_;
  u.total_blocks = pool_.num_usable();
  u.free_blocks = pool_.num_free();
  u.used_blocks = pool_.num_used();
  u.cached_free_blocks = pool_.num_cached_free();
  u.num_sequences = num_sequences();
  u.prefix_queries = prefix_queries_;
  u.prefix_query_tokens = prefix_query_tokens_;
  u.prefix_hit_tokens = prefix_hit_tokens_;
  u.prefix_query_blocks = prefix_query_blocks_;
  u.prefix_hit_blocks = prefix_hit_blocks_;
  u.allocated_blocks = allocated_blocks_;
  u.evicted_blocks = pool_.num_evictions();
  u.cow_copies = cow_copies_;
  u.window_released_blocks = window_released_blocks_;
  u.swap_total_blocks = swap_.num_blocks();
  u.swap_used_blocks = swap_.num_used();
  u.swapped_out_blocks = swapped_out_blocks_;
  u.swapped_in_blocks = swapped_in_blocks_;
  u.swap_in_reused_blocks = swap_in_reused_blocks_;
  u.host_cache_capacity_blocks = host_cache_.capacity();
  u.host_cache_blocks = host_cache_.size();
  u.host_hit_blocks = host_hit_blocks_;
  u.host_query_blocks = host_query_blocks_;
  u.remote_hit_blocks = remote_hit_blocks_;
  u.offloaded_blocks = offloaded_blocks_;
  u.offload_skipped_blocks = offload_skipped_;
  u.host_evicted_blocks = host_evicted_blocks_;
  u.host_yielded_blocks = host_yielded_blocks_;
  for (const BlockPool& p : tier_pools_) {
    u.demote_total_blocks += p.num_usable();
    u.demote_used_blocks += p.num_used();
  }
  return u;
}

}  // namespace kvserve::cache
