#include "model/moe_layer.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/check.h"
#include "kernels/cpu/clamped_swiglu.h"
#include "kernels/cpu/packed_linear.h"
#include "kernels/cpu/swiglu.h"

namespace kvserve::model {
namespace {

// The k highest of score[0, n) into idx[0, k), decreasing, ties to the lower index (k <= n).
void TopK(const float* score, int n, int k, int32_t* idx) {
  for (int j = 0; j < k; ++j) {
    int best = -1;
    for (int e = 0; e < n; ++e) {
      bool taken = false;
      for (int i = 0; i < j; ++i) taken = taken || idx[i] == e;
      if (!taken && (best < 0 || score[e] > score[best])) best = e;
    }
    idx[j] = best;
  }
}

}  // namespace

void RouteTokens(const MoeConfig& moe, float* logits, int64_t rows, int32_t* experts,
                 float* weights) {
  const int n = moe.num_experts, k = moe.top_k;
  for (int64_t r = 0; r < rows; ++r) {
    float* z = logits + r * n;
    int32_t* idx = experts + r * k;
    float* w = weights + r * k;
    if (moe.routing == MoeRouting::kTopKSoftmax) {
      TopK(z, n, k, idx);
      const float m = z[idx[0]];
      float sum = 0.0f;
      for (int j = 0; j < k; ++j) sum += (w[j] = std::exp(z[idx[j]] - m));
      for (int j = 0; j < k; ++j) w[j] /= sum;
      continue;
    }
    // Softmax over all experts, in place.
    float* p = z;
    const float m = *std::max_element(p, p + n);
    float sum = 0.0f;
    for (int e = 0; e < n; ++e) sum += (p[e] = std::exp(p[e] - m));
    for (int e = 0; e < n; ++e) p[e] /= sum;
    TopK(p, n, k, idx);
    float kept = 0.0f;
    for (int j = 0; j < k; ++j) kept += (w[j] = p[idx[j]]);
    if (moe.renormalize) {
      for (int j = 0; j < k; ++j) w[j] /= kept;
    }
  }
}

MoeLayer::MoeLayer(const ModelConfig& c, int max_tokens)
    : moe_(c.moe), hidden_(c.hidden_size), top_k_(c.moe.top_k), max_tokens_(max_tokens) {
  KVS_CHECK(moe_.num_experts > 0 && top_k_ > 0 && top_k_ <= moe_.num_experts,
            "MoeLayer: bad expert counts");
  const auto m = static_cast<size_t>(max_tokens), e = static_cast<size_t>(moe_.num_experts);
  const auto k = static_cast<size_t>(top_k_), d = static_cast<size_t>(hidden_);
  const auto ie = static_cast<size_t>(moe_.intermediate_size);
  logits_.resize(m * e);
  weights_.resize(m * k);
  chosen_.resize(m * k);
  offsets_.resize(e + 1);
  fill_.resize(e);
  slot_row_.resize(m * k);
  row_token_.resize(m * k);
  xg_.resize(m * k * d);
  gate_up_.resize(m * k * 2 * ie);
  act_.resize(m * k * ie);
  yg_.resize(m * k * d);
}

size_t MoeLayer::scratch_bytes() const {
  return (logits_.size() + weights_.size() + xg_.size() + gate_up_.size() + act_.size() +
          yg_.size()) *
             sizeof(float) +
         (chosen_.size() + offsets_.size() + fill_.size() + slot_row_.size() + row_token_.size()) *
             sizeof(int32_t);
}

void GroupByExpert(const int32_t* chosen, int64_t rows, int top_k, int num_experts, int32_t* offsets,
                   int32_t* fill, int32_t* slot_row, int32_t* row_token) {
  const int64_t slots = rows * top_k;
  std::fill(offsets, offsets + num_experts + 1, 0);
  for (int64_t s = 0; s < slots; ++s) ++offsets[chosen[s] + 1];
  for (int e = 0; e < num_experts; ++e) offsets[e + 1] += offsets[e];
  std::copy(offsets, offsets + num_experts, fill);
  for (int64_t s = 0; s < slots; ++s) {
    const int32_t row = fill[chosen[s]]++;
    slot_row[s] = row;
    row_token[row] = static_cast<int32_t>(s / top_k);
  }
}

void MoeLayer::AddExpertLora(const LoraRows& lora, int layer, int m, const float* x, int in,
                             float* y, int out) {
  const size_t per = static_cast<size_t>(moe_.num_experts) * static_cast<size_t>(lora.num_slots);
  const auto views = lora.expert_views.subspan(
      (static_cast<size_t>(layer) * 2 + static_cast<size_t>(m)) * per, per);
  kernels::cpu::LoraShrinkExpand(lora_groups_, views, x, in, in, y, out, lora_scratch_);
}

void MoeLayer::Forward(const MoeLayerWeights& w, const float* h, int64_t rows, float* x,
                       const LoraRows* lora, int layer) {
  KVS_CHECK(rows >= 0 && rows <= max_tokens_, "MoeLayer: more rows than max_tokens");
  KVS_CHECK(static_cast<int>(w.experts.size()) == moe_.num_experts,
            "MoeLayer: weights and config disagree");
  if (rows == 0) return;
  const int d = hidden_, n = moe_.num_experts, k = top_k_, ie = moe_.intermediate_size;
  const int64_t slots = rows * k;

  Project(h, d, w.router, w.router_bias, logits_.data(), n, rows, d, n, false);
  RouteTokens(moe_, logits_.data(), rows, chosen_.data(), weights_.data());

  GroupByExpert(chosen_.data(), rows, k, n, offsets_.data(), fill_.data(), slot_row_.data(), row_token_.data());
  for (int64_t r = 0; r < slots; ++r) {
    std::memcpy(xg_.data() + r * d,
                h + static_cast<int64_t>(row_token_[static_cast<size_t>(r)]) * d,
                static_cast<size_t>(d) * sizeof(float));
  }

  // LoRA: grouped row r of expert e carries bucket e * slots + (its token's slot), so one
  // grouped shrink/expand serves every (expert, adapter) pair; -1 rows get the base alone.
  bool expert_lora = false;
  if (lora != nullptr && !lora->expert_views.empty()) {
    const int num_slots = lora->num_slots;
    const int buckets = n * num_slots;
    KVS_CHECK(buckets < 32768, "MoeLayer: too many (expert, adapter) pairs");
    if (lora_buckets_.size() < static_cast<size_t>(slots)) {
      lora_buckets_.resize(static_cast<size_t>(max_tokens_) * static_cast<size_t>(k));
      lora_groups_.Reserve(static_cast<int64_t>(lora_buckets_.size()), buckets);
    }
    int widest = 0;
    const size_t per = static_cast<size_t>(buckets);
    for (const auto& v :
         lora->expert_views.subspan(static_cast<size_t>(layer) * 2 * per, 2 * per)) {
      widest = std::max(widest, (v.rank + 7) / 8 * 8);
    }
    for (int e = 0; e < n; ++e) {
      for (int32_t r = offsets_[static_cast<size_t>(e)]; r < offsets_[static_cast<size_t>(e) + 1];
           ++r) {
        const int16_t s = lora->row_slots[static_cast<size_t>(row_token_[static_cast<size_t>(r)])];
        lora_buckets_[static_cast<size_t>(r)] =
            s < 0 ? int16_t{-1} : static_cast<int16_t>(e * num_slots + s);
      }
    }
    lora_groups_.Build(std::span<const int16_t>(lora_buckets_.data(), static_cast<size_t>(slots)),
                       buckets);
    const size_t need = kernels::cpu::LoraScratchFloats(lora_groups_.num_rows(), widest);
    if (lora_scratch_.size() < need) {
      lora_scratch_.resize(
          kernels::cpu::LoraScratchFloats(static_cast<int64_t>(lora_buckets_.size()), widest));
    }
    expert_lora = widest > 0 && !lora_groups_.empty();
  }

  // One GEMM per chosen expert over all of its rows, then the activation over every row.
  for (int e = 0; e < n; ++e) {
    const int64_t begin = offsets_[static_cast<size_t>(e)],
                  count = offsets_[static_cast<size_t>(e) + 1] - begin;
    if (count == 0) continue;
    const ExpertWeights& ex = w.experts[static_cast<size_t>(e)];
    Project(xg_.data() + begin * d, d, ex.gate_up, ex.gate_up_bias,
            gate_up_.data() + begin * 2 * ie, 2 * ie, count, d, 2 * ie, false);
  }
  if (expert_lora) AddExpertLora(*lora, layer, 0, xg_.data(), d, gate_up_.data(), 2 * ie);
  if (moe_.activation == ExpertActivation::kClampedSwiglu) {
    kernels::cpu::ClampedSwiglu(gate_up_.data(), slots, ie, static_cast<float>(moe_.swiglu_limit),
                                static_cast<float>(moe_.swiglu_alpha), act_.data());
  } else {
    kernels::cpu::SiluMul(gate_up_.data(), slots, ie, act_.data());
  }
  for (int e = 0; e < n; ++e) {
    const int64_t begin = offsets_[static_cast<size_t>(e)],
                  count = offsets_[static_cast<size_t>(e) + 1] - begin;
    if (count == 0) continue;
    const ExpertWeights& ex = w.experts[static_cast<size_t>(e)];
    Project(act_.data() + begin * ie, ie, ex.down, ex.down_bias, yg_.data() + begin * d, d, count,
            ie, d, false);
  }
  if (expert_lora) AddExpertLora(*lora, layer, 1, act_.data(), ie, yg_.data(), d);

  // Each token's weighted sum over its own slots in routing order, then the residual add.
  for (int64_t t = 0; t < rows; ++t) {
    float* xt = x + t * d;
    const float* wt = weights_.data() + t * k;
    const int32_t* rt = slot_row_.data() + t * k;
    for (int i = 0; i < d; ++i) {
      float acc = 0.0f;
      for (int j = 0; j < k; ++j) acc += wt[j] * yg_[static_cast<size_t>(rt[j]) * d + i];
      xt[i] += acc;
    }
  }
}

}  // namespace kvserve::model
