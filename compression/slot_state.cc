#include "compression/slot_state.h"

#include <algorithm>
#include <cstring>

#include "base/check.h"

namespace kvserve::compression {

SlotState::SlotState(const SlotStateOptions& options) : options_(options) {
  KVS_CHECK(options.num_layers >= 0 && options.num_kv_heads >= 0 && options.query_window >= 0);
  if (options.query_window > 0) {
    KVS_CHECK(options.num_q_heads > 0 && options.head_dim > 0, "query window needs the query shape");
    const size_t layers = static_cast<size_t>(options.num_layers);
    query_ring_.assign(layers * options.query_window * q_size(), 0.0f);
    query_pos_.assign(layers * options.query_window, 0);
    query_count_.assign(layers, 0);
  }
}

void SlotState::Reserve(int64_t capacity) {
  if (capacity <= capacity_ || !tracks_slots()) return;
  const int64_t rows = static_cast<int64_t>(options_.num_layers) * options_.num_kv_heads;
  std::vector<int32_t> pos(static_cast<size_t>(rows * capacity), 0);
  std::vector<float> mass(options_.track_mass ? static_cast<size_t>(rows * capacity) : 0, 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    std::copy_n(positions_.data() + r * capacity_, size_, pos.data() + r * capacity);
    if (options_.track_mass) std::copy_n(mass_.data() + r * capacity_, size_, mass.data() + r * capacity);
  }
  positions_ = std::move(pos);
  mass_ = std::move(mass);
  capacity_ = capacity;
}

void SlotState::Append(int64_t first_position, int64_t count) {
  KVS_CHECK(count >= 0 && first_position >= 0);
  if (!tracks_slots()) {
    size_ += count;
    return;
  }
  if (size_ + count > capacity_) Reserve(std::max(size_ + count, capacity_ + capacity_ / 2));
  const int64_t rows = static_cast<int64_t>(options_.num_layers) * options_.num_kv_heads;
  for (int64_t r = 0; r < rows; ++r) {
    int32_t* p = positions_.data() + r * capacity_ + size_;
    for (int64_t j = 0; j < count; ++j) p[j] = static_cast<int32_t>(first_position + j);
    if (options_.track_mass) std::fill_n(mass_.data() + r * capacity_ + size_, count, 0.0f);
  }
  size_ += count;
}

void SlotState::Shrink(int64_t new_size) {
  KVS_CHECK(new_size >= 0 && new_size <= size_, "Shrink(", new_size, ") of a state holding ", size_);
  size_ = new_size;
}

std::span<const int32_t> SlotState::positions(int layer, int head) const {
  KVS_DCHECK(tracks_slots());
  return {positions_.data() + row(layer, head) * capacity_, static_cast<size_t>(size_)};
}

std::span<const float> SlotState::mass(int layer, int head) const {
  KVS_DCHECK(options_.track_mass);
  return {mass_.data() + row(layer, head) * capacity_, static_cast<size_t>(size_)};
}

void SlotState::AddMass(int layer, int head, const float* add, int64_t len) {
  KVS_CHECK(options_.track_mass && len <= size_, "AddMass over ", len, " slots of ", size_);
  float* m = mass_.data() + row(layer, head) * capacity_;
  for (int64_t i = 0; i < len; ++i) m[i] += add[i];
}

void SlotState::AddQueries(int layer, const float* q, int64_t q_stride, const int32_t* positions, int64_t num_rows) {
  const int w = options_.query_window;
  if (w == 0) return;
  const int qs = q_size();
  int64_t& count = query_count_[layer];
  for (int64_t r = std::max<int64_t>(0, num_rows - w); r < num_rows; ++r) {
    const int64_t at = count % w;
    std::memcpy(query_ring_.data() + (static_cast<int64_t>(layer) * w + at) * qs, q + r * q_stride,
                static_cast<size_t>(qs) * sizeof(float));
    query_pos_[static_cast<size_t>(layer) * w + at] = positions[r];
    ++count;
  }
}

int SlotState::num_queries(int layer) const {
  if (options_.query_window == 0) return 0;
  return static_cast<int>(std::min<int64_t>(query_count_[layer], options_.query_window));
}

int SlotState::CopyQueries(int layer, float* out, int32_t* pos_out) const {
  const int w = options_.query_window;
  const int n = num_queries(layer);
  const int qs = q_size();
  const int64_t count = n == 0 ? 0 : query_count_[layer];
  for (int i = 0; i < n; ++i) {
    const int64_t at = (count - n + i) % w;  // oldest first
    std::memcpy(out + static_cast<int64_t>(i) * qs, query_ring_.data() + (static_cast<int64_t>(layer) * w + at) * qs,
                static_cast<size_t>(qs) * sizeof(float));
    pos_out[i] = query_pos_[static_cast<size_t>(layer) * w + at];
  }
  return n;
}

namespace {

// One row of a side array under a keep plan (kv_compact.h): [0, lo) stays, keep[i] -> lo + i,
// the tail [scored_end, phys_len) follows in order. In place is safe for the reason given there.
template <typename T>
void CompactRow(T* row, const KeepPlan& plan, const int32_t* keep) {
  for (int64_t i = 0; i < plan.num_keep; ++i) row[plan.lo + i] = row[keep[i]];
  const int64_t shift = plan.scored_end - (plan.lo + plan.num_keep);
  for (int64_t j = plan.scored_end; j < plan.phys_len; ++j) row[j - shift] = row[j];
}

}  // namespace

void SlotState::ApplyKeepPlan(const KeepPlan& plan) {
  KVS_CHECK(plan.phys_len == size_, "keep plan over ", plan.phys_len, " slots applied to a state holding ", size_);
  if (tracks_slots()) {
    const int64_t rows = static_cast<int64_t>(options_.num_layers) * options_.num_kv_heads;
    for (int64_t r = 0; r < rows; ++r) {
      const int32_t* keep = plan.keep + r * plan.num_keep;
      CompactRow(positions_.data() + r * capacity_, plan, keep);
      if (options_.track_mass) CompactRow(mass_.data() + r * capacity_, plan, keep);
    }
  }
  size_ = plan.new_len();
}

}  // namespace kvserve::compression
