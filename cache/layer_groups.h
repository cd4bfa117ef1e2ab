// Layer groups: how a hybrid model's KV (some layers attend the whole context, others only a
// sliding window: Gemma 2/3, gpt-oss, Qwen2 with max_window_layers) shares one block pool
// while its window layers stop growing past the window (docs/architecture.md "Layer groups").
//
// vLLM's hybrid allocator is the anchor: every pool block has the same size, and a block
// holds `group_size` layers' worth of slots. The global layers form one group; the window
// layers are cut into groups of the same size. Gemma 3 1B (26 layers, 1 global in 6):
//
//   global layers  5 11 17 23                 -> group -1, slots 0..3   (the main table)
//   window layers  0 1 2 3 | 4 6 7 8 | ... | 24 25   -> groups 0..5, slots 0..3 (last: 2 of 4)
//   pool block = 4 slot arrays x block_size tokens
//
// A sequence has the main block table (global layers; prefix caching, compression, swap
// work on it as before) and one window table per window group. Window tables are indexed
// by the token's absolute position (its RoPE position), never compacted, and their entries
// before the window go back to the pool (KvCacheManager::release_before). So a token costs
// one block slot per global-layer group for its life, and num_window_groups more only while
// it is inside the window: at 8x the window, Gemma 3 1B keeps ~27 % of full attention's KV.
//
// Invariant: enabled() iff the model has both global layers and window layers whose window
// binds (is shorter than the served context). Otherwise everything is one table (group_size
// 0): a model whose every layer is windowed releases its single table's front instead.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace kvserve::cache {

struct LayerGroups {
  int group_size = 0;          // layers per group = slot arrays per pool block; 0: off
  int num_window_groups = 0;   // window tables per sequence
  int32_t window = 0;          // tokens a window layer attends (the widest window)
  std::vector<int16_t> group;  // [num_layers]: -1 for a global layer, else its window group
  std::vector<int16_t> slot;   // [num_layers]: its slot array in its group's blocks

  bool enabled() const { return group_size > 0; }
  int num_layers() const { return static_cast<int>(group.size()); }
  // Slot arrays of each layer's storage: group_size, or num_layers when off.
  int num_slots() const { return enabled() ? group_size : num_layers(); }
  std::string ToString() const;
};

// The groups for a model with per-layer windows `layer_window` (0: whole context) serving
// contexts up to `max_context` tokens; disabled unless the model is hybrid (see above).
LayerGroups PlanLayerGroups(std::span<const int32_t> layer_window, int64_t max_context);

}  // namespace kvserve::cache
