#include "engine/embedding_pool.h"

namespace kvserve::engine {

void EmbeddingPool::Add(const scheduler::HiddenPart& part) {
  if (taken_ || pooling_ == scheduler::Pooling::kNone) return;
  if (pooling_ == scheduler::Pooling::kLast) {
    sum_ = part.values;
    rows_ = 1;
    return;
  }
  if (part.first_position != rows_) return;  // already pooled (a recomputed chunk)
  if (sum_.empty()) sum_.assign(part.values.size(), 0.0f);
  for (size_t k = 0; k < sum_.size() && k < part.values.size(); ++k) sum_[k] += part.values[k];
  rows_ += part.num_rows;
}

std::vector<float> EmbeddingPool::Take() {
  if (taken_ || rows_ == 0) return {};
  taken_ = true;
  const float scale = 1.0f / static_cast<float>(rows_);
  for (float& v : sum_) v *= scale;
  return std::move(sum_);
}

}  // namespace kvserve::engine
