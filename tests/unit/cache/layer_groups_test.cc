// Layer groups (cache/layer_groups.h): the plan for hybrid models, the window tables the
// cache manager keeps per sequence, and the KV a Gemma-3-style model holds at 8x its window.
#include "cache/layer_groups.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <random>
#include <vector>

#include "cache/cache_invariants.h"
#include "cache/kv_cache_manager.h"
#include "tests/unit/cache/cache_test_util.h"

namespace kvserve::cache {
namespace {

#define EXPECT_INVARIANTS(m) EXPECT_TRUE(CheckCacheInvariants(m).ok()) << CheckCacheInvariants(m)

// Gemma 3 1B's layer pattern: 26 layers, every 6th global, the rest a 512-token window.
std::vector<int32_t> Gemma3Windows(int layers = 26, int32_t window = 512) {
  std::vector<int32_t> w(static_cast<size_t>(layers));
  for (int l = 0; l < layers; ++l) w[static_cast<size_t>(l)] = (l + 1) % 6 == 0 ? 0 : window;
  return w;
}

TEST(LayerGroups, PlanCutsWindowLayersIntoGroupsOfTheGlobalLayersSize) {
  const LayerGroups g = PlanLayerGroups(Gemma3Windows(), 32768);
  ASSERT_TRUE(g.enabled());
  EXPECT_EQ(g.group_size, 4);         // layers 5, 11, 17, 23
  EXPECT_EQ(g.num_window_groups, 6);  // 22 window layers in groups of 4 (the last holds 2)
  EXPECT_EQ(g.window, 512);
  EXPECT_EQ(g.num_slots(), 4);
  EXPECT_EQ(g.group[5], -1);
  EXPECT_EQ(g.slot[5], 0);
  EXPECT_EQ(g.slot[23], 3);
  EXPECT_EQ(g.group[0], 0);
  EXPECT_EQ(g.slot[3], 3);
  EXPECT_EQ(g.group[4], 1);  // the 5th window layer
  EXPECT_EQ(g.slot[4], 0);
  EXPECT_EQ(g.group[25], 5);
  EXPECT_EQ(g.slot[25], 1);
  // Every (group, slot) pair is used by exactly one layer.
  std::vector<int> seen(static_cast<size_t>((g.num_window_groups + 1) * g.group_size), 0);
  for (int l = 0; l < g.num_layers(); ++l)
    ++seen[static_cast<size_t>((g.group[l] + 1) * g.group_size + g.slot[l])];
  for (size_t i = 0; i < seen.size(); ++i) EXPECT_LE(seen[i], 1) << i;

  // Not hybrid: no groups (one table).
  EXPECT_FALSE(PlanLayerGroups(std::vector<int32_t>(8, 0), 4096).enabled());      // all global
  EXPECT_FALSE(PlanLayerGroups(std::vector<int32_t>(8, 4096), 32768).enabled());  // Mistral
  EXPECT_FALSE(PlanLayerGroups(Gemma3Windows(), 512).enabled());  // the window covers the context
  EXPECT_EQ(PlanLayerGroups({}, 0).num_slots(), 0);
}

std::unique_ptr<KvCacheManager> GroupedManager(int32_t num_blocks, int groups, int32_t window) {
  KvCacheManagerOptions o;
  o.layout = testing::SmallLayout(config::KvDtype::kFp32, /*block_size=*/4);
  o.layout.layer_slots = 1;
  o.num_blocks = num_blocks + 1;
  o.enable_prefix_caching = false;
  o.num_window_groups = groups;
  o.group_window = window;
  return std::make_unique<KvCacheManager>(o, base::Logger());
}

// allocate() grows every window table with the main one, release_before() gives the window
// tables' front back (never the main table's), rollback() shrinks both, fork() shares and
// copy-on-write copies window tails, and free() returns everything.
TEST(LayerGroups, WindowTablesGrowReleaseRollBackForkAndFree) {
  auto m = GroupedManager(/*num_blocks=*/40, /*groups=*/2, /*window=*/6);
  const SeqId s{1};
  EXPECT_EQ(m->blocks_needed(s, 10), 9);  // 3 main + 2 x 3 window
  auto d = m->allocate(s, 10);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->blocks.size(), 3u);
  EXPECT_EQ(d->window_first_block, 0);
  ASSERT_EQ(d->window_blocks.size(), 6u);  // group-major
  EXPECT_EQ(m->window_table(s, 0)[2], d->window_blocks[2]);
  EXPECT_EQ(m->window_table(s, 1)[0], d->window_blocks[3]);
  EXPECT_INVARIANTS(*m);
  EXPECT_EQ(m->usage().used_blocks, 9);

  // The next row (position 10) attends [5, 10]: window blocks 0 (positions 0-3) can go.
  EXPECT_EQ(m->release_before(s, 10 - 6 + 1), 2);
  EXPECT_EQ(m->window_table(s, 0)[0], kNullBlock);
  EXPECT_EQ(m->window_table(s, 1)[0], kNullBlock);
  EXPECT_EQ(m->block_table(s).size(), 3u);  // the global layers keep everything
  EXPECT_NE(m->block_table(s)[0], kNullBlock);
  EXPECT_EQ(m->kv_bytes_held(s), 7 * static_cast<int64_t>(m->bytes_per_block()));
  EXPECT_FALSE(m->can_swap_out(s));  // recomputed on preemption
  EXPECT_INVARIANTS(*m);

  // A draft of 4 rows (positions 10-13), 1 accepted: 3 rejected, 11 positions left everywhere.
  d = m->allocate(s, 4);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->window_first_block, 3);
  EXPECT_EQ(d->window_blocks.size(), 2u);
  EXPECT_EQ(m->rollback(s, 3), 3);
  EXPECT_EQ(m->num_tokens(s), 11);
  EXPECT_EQ(m->window_table(s, 0).size(), 3u);
  EXPECT_INVARIANTS(*m);

  // A compaction truncates the main table only.
  EXPECT_EQ(m->truncate(s, 5), 1);
  EXPECT_EQ(m->block_table(s).size(), 2u);
  EXPECT_EQ(m->window_table(s, 1).size(), 3u);
  EXPECT_INVARIANTS(*m);

  // n > 1: the child shares every table; writing into the shared window tails copies them.
  m->fork(s, SeqId{2});
  EXPECT_INVARIANTS(*m);
  d = m->allocate(SeqId{2}, 1);
  ASSERT_TRUE(d.has_value());
  ASSERT_EQ(d->window_cow.size(), 2u);
  EXPECT_EQ(d->window_first_block, 2);
  EXPECT_EQ(d->window_cow[0].dst, m->window_table(SeqId{2}, 0)[2]);
  EXPECT_NE(m->window_table(SeqId{2}, 0)[2], m->window_table(s, 0)[2]);
  EXPECT_EQ(m->window_table(SeqId{2}, 0)[0], kNullBlock);  // the released front is shared too
  EXPECT_INVARIANTS(*m);

  m->free(SeqId{2});
  EXPECT_EQ(m->free(s), 2 + 2 * 2);
  EXPECT_EQ(m->usage().used_blocks, 0);
  EXPECT_INVARIANTS(*m);
}

// Random allocate / rollback / release / fork / free on a grouped manager, as the scheduler
// drives it (guesses rolled back before the step's release): after every operation the invariant
// checker passes, every window table still holds every position of the window (release_before never
// drops one a layer reads), and at the end every block is back in the pool.
TEST(LayerGroups, RandomOperationsKeepInvariantsAndTheWindow) {
  constexpr int32_t kWindow = 7;
  constexpr int kGroups = 3;
  auto m = GroupedManager(/*num_blocks=*/120, kGroups, kWindow);
  std::mt19937 rng(7);
  std::map<int64_t, int64_t> seqs;  // id -> positions written (all tables: no compaction here)
  int64_t next_id = 1;
  auto pick = [&]() {
    auto it = seqs.begin();
    std::advance(it, static_cast<long>(rng() % seqs.size()));
    return it;
  };
  for (int step = 0; step < 3000; ++step) {
    const int r = static_cast<int>(rng() % 100);
    if (seqs.empty() || r < 15) {
      const SeqId id{next_id++};
      if (m->allocate(id, 1 + static_cast<int>(rng() % 20))) seqs[id.value()] = m->num_tokens(id);
    } else if (r < 70) {  // a step: rows (some of them guesses, a few rejected), then the release
      auto it = pick();
      const SeqId id{it->first};
      const int n = 1 + static_cast<int>(rng() % (rng() % 4 == 0 ? 12 : 3));
      const int draft = static_cast<int>(rng() % 4);
      if (!m->allocate(id, n + draft)) continue;
      const int accepted = draft == 0 ? 0 : static_cast<int>(rng() % (draft + 1));
      it->second += n + accepted;
      m->rollback(id, draft - accepted);
      m->release_before(id, it->second - kWindow + 1);
    } else if (r < 78) {
      auto it = pick();
      const SeqId child{next_id++};
      m->fork(SeqId{it->first}, child);
      seqs[child.value()] = it->second;
    } else {
      auto it = pick();
      m->free(SeqId{it->first});
      seqs.erase(it);
    }
    ASSERT_TRUE(CheckCacheInvariants(*m).ok())
        << "step " << step << ": " << CheckCacheInvariants(*m);
    for (const auto& [id, len] : seqs) {
      for (int g = 0; g < kGroups; ++g) {
        const auto table = m->window_table(SeqId{id}, g);
        ASSERT_EQ(static_cast<int64_t>(table.size()), (len + 3) / 4) << "step " << step;
        // The next row (position len) attends [len - window + 1, len].
        for (int64_t p = std::max<int64_t>(0, len - kWindow + 1); p < len; ++p) {
          ASSERT_NE(table[static_cast<size_t>(p / 4)], kNullBlock)
              << "step " << step << " seq " << id << " pos " << p;
        }
      }
    }
  }
  for (const auto& [id, len] : seqs) m->free(SeqId{id});
  EXPECT_EQ(m->usage().used_blocks, 0);
  EXPECT_INVARIANTS(*m);
}

// Issue 27's figure: KV bytes per token of a Gemma-3-style model at 8x its window, against
// full attention (one table for every layer), with Gemma 3 1B's geometry (26 layers, one
// KV head of 256, bf16, 512-token window), grown the way the scheduler grows it: 256-token
// prefill chunks, then one token per step, releasing behind the window after each step.
TEST(LayerGroups, Gemma3KeepsAtMost30PercentOfFullAttentionsKvAt8xItsWindow) {
  const int32_t window = 512;
  const LayerGroups g = PlanLayerGroups(Gemma3Windows(26, window), 32768);
  KvLayout full = testing::SmallLayout(config::KvDtype::kBf16, /*block_size=*/16, /*layers=*/26,
                                       /*kv_heads=*/1, /*head_dim=*/256);
  KvLayout grouped = full;
  grouped.layer_slots = g.group_size;
  KvCacheManagerOptions o;
  o.layout = grouped;
  o.num_blocks = 1024;
  o.enable_prefix_caching = false;
  o.num_window_groups = g.num_window_groups;
  o.group_window = g.window;
  KvCacheManager m(o, base::Logger());
  const SeqId s{1};
  const int64_t target = 8 * window;
  int64_t n = 0;
  while (n < target) {
    const int step = n < 2048 ? 256 : 1;  // a 2048-token prompt, then decode
    ASSERT_TRUE(m.allocate(s, step).has_value());
    n += step;
    m.release_before(s, n - window + 1);
  }
  EXPECT_INVARIANTS(m);
  const double grouped_per_token = static_cast<double>(m.kv_bytes_held(s)) / static_cast<double>(n);
  const double full_per_token = full.bytes_per_token();
  const double ratio = grouped_per_token / full_per_token;
  std::printf(
      "gemma3-1b geometry at %lld tokens (8x the window): %.0f bytes/token with layer groups, "
      "%.0f with one table: %.1f %%\n",
      static_cast<long long>(n), grouped_per_token, full_per_token, 100.0 * ratio);
  EXPECT_LE(ratio, 0.30);
  // What the plan promises: 4 of 26 layers for every token, 22 (+2 padding slots) for the window.
  const double ideal = (4.0 * n + 24.0 * (window + 16)) / (26.0 * n);
  EXPECT_NEAR(ratio, ideal, 0.01);
}

}  // namespace
}  // namespace kvserve::cache
