#include "cache/layer_groups.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace kvserve::cache {

LayerGroups PlanLayerGroups(std::span<const int32_t> layer_window, int64_t max_context) {
  LayerGroups g;
  const int n = static_cast<int>(layer_window.size());
  int num_global = 0;
  int num_window = 0;
  int32_t window = 0;
  for (int32_t w : layer_window) {
    if (w > 0 && w < max_context) {
      ++num_window;
      window = std::max(window, w);
    } else {
      ++num_global;
    }
  }
  g.group.assign(static_cast<size_t>(n), -1);
  g.slot.resize(static_cast<size_t>(n));
  if (num_global == 0 || num_window == 0) {
    for (int l = 0; l < n; ++l) g.slot[static_cast<size_t>(l)] = static_cast<int16_t>(l);
    return g;
  }
  g.group_size = num_global;
  g.num_window_groups = (num_window + num_global - 1) / num_global;
  g.window = window;
  int next_global = 0;
  int next_window = 0;
  for (int l = 0; l < n; ++l) {
    const int32_t w = layer_window[static_cast<size_t>(l)];
    if (w > 0 && w < max_context) {
      g.group[static_cast<size_t>(l)] = static_cast<int16_t>(next_window / num_global);
      g.slot[static_cast<size_t>(l)] = static_cast<int16_t>(next_window % num_global);
      ++next_window;
    } else {
      g.slot[static_cast<size_t>(l)] = static_cast<int16_t>(next_global++);
    }
  }
  return g;
}

std::string LayerGroups::ToString() const {
  if (!enabled()) return "one table";
  return absl::StrCat(group_size, " global layers + ", num_window_groups, " window group(s) of ",
                      group_size, " slots, window ", window);
}

}  // namespace kvserve::cache
