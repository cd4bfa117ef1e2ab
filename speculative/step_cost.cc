#include "speculative/step_cost.h"

#include <algorithm>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cache/host_kv_cache.h"
#include "model/batch_builder.h"

namespace kvserve::speculative {
namespace {

constexpr int kContext = 32;  // tokens in the KV before the timed rows

}  // namespace

config::CacheConfig PrivatePoolConfig(int block_size, uint64_t kv_bytes) {
  config::CacheConfig c;
  c.block_size = block_size;
  c.kv_bytes = kv_bytes;
  c.kv_dtype = config::KvDtype::kFp32;
  c.enable_prefix_caching = false;
  c.layer_groups = false;
  c.host_swap_bytes = 0;
  c.host_cache_bytes = 0;
  return c;
}

double StepCost::row_cost() const {
  if (fixed_s <= 0.0) return 0.1;
  return std::clamp(row_s / fixed_s, 0.01, 4.0);
}

double StepCost::guess_cost(const StepCost& draft) const {
  if (fixed_s <= 0.0) return 1.0;
  return (draft.fixed_s + draft.row_s) / fixed_s;
}

absl::StatusOr<StepCost> MeasureStepCost(model::LlamaModel& model, const base::Clock& clock,
                                         const StepCostOptions& options) {
  const int rows = std::max(2, options.rows);
  const cache::KvLayout layout = model.KvLayoutFor(options.block_size, config::KvDtype::kFp32);
  const int blocks = (kContext + rows + options.block_size - 1) / options.block_size + 2;
  const config::CacheConfig c = PrivatePoolConfig(
      options.block_size,
      static_cast<uint64_t>(blocks) * static_cast<uint64_t>(layout.bytes_per_block()) + (1u << 16));
  auto kv = cache::MakeHostKvCache(c, layout, base::Logger());
  if (!kv.ok())
    return absl::Status(kv.status().code(), absl::StrCat("step cost: ", kv.status().message()));
  std::vector<std::byte*> data;
  std::vector<float*> scales;
  for (int l = 0; l < layout.num_layers; ++l) {
    data.push_back(kv->storage->layer_data(l));
    scales.push_back(kv->storage->layer_scales(l));
  }
  model::KvCacheView view;
  view.layout = kv->storage->layout();
  view.num_blocks = kv->storage->num_blocks();
  view.layer_data = data;
  if (view.layout.has_scales()) view.layer_scales = scales;
  const int vocab = model.config().vocab_size;
  std::vector<int32_t> tokens(static_cast<size_t>(kContext + rows));
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 37 + 3) % vocab);
  const cache::SeqId id(1);
  model::BatchBuilder builder(c.block_size);
  std::vector<int32_t> table;
  // Rows [first, first + n) of `tokens` after `first` slots, with every row's logits, as a
  // verify step has them (the LM head is part of a row's cost).
  std::vector<float> all_logits(static_cast<size_t>(vocab) *
                                static_cast<size_t>(std::max(kContext, rows)));
  auto forward = [&](int first, int n) -> absl::Status {
    if (!kv->manager->allocate(id, n))
      return absl::ResourceExhaustedError("step cost: scratch pool too small");
    table.clear();
    for (cache::BlockId b : kv->manager->block_table(id)) table.push_back(b.value());
    builder.Clear();
    builder.AddSequence(std::span<const int32_t>(tokens).subspan(static_cast<size_t>(first),
                                                                 static_cast<size_t>(n)),
                        first, first, table, model::LogitsWanted::kAll);
    return model.Forward(
        builder.batch(), view,
        std::span<float>(all_logits.data(), static_cast<size_t>(n) * static_cast<size_t>(vocab)));
  };
  if (absl::Status st = forward(0, kContext); !st.ok()) return st;
  auto fastest = [&](int n) -> absl::StatusOr<double> {
    double best = std::numeric_limits<double>::infinity();
    for (int r = 0; r < std::max(1, options.reps); ++r) {
      const base::Nanos t0 = clock.now_ns();
      if (absl::Status st = forward(kContext, n); !st.ok()) return st;
      best = std::min(best, static_cast<double>(clock.now_ns() - t0) * 1e-9);
      kv->manager->truncate(id, kContext);
    }
    return best;
  };
  auto one = fastest(1);
  if (!one.ok()) return one.status();
  auto many = fastest(rows);
  if (!many.ok()) return many.status();
  StepCost cost;
  cost.row_s = std::max(0.0, (*many - *one) / static_cast<double>(rows - 1));
  cost.fixed_s = std::max(*one - cost.row_s, 1e-9);
  kv->manager->free(id);
  return cost;
}

}  // namespace kvserve::speculative
