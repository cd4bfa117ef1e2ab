#include "kernels/cpu/kv_tier.h"

#include <vector>

#include "base/check.h"
#include "kernels/cpu/kv_quant.h"
#include "kernels/cpu/low_rank_keys.h"

namespace kvserve::kernels::cpu {

void ReadTierRow(const KvTierStorage& t, int layer, int64_t block, int kv, int head, int offset, float* dst) {
  const float* scales = t.layer_scales != nullptr ? t.layer_scales[layer] : nullptr;
  if (kv == 1 || t.layout.key_rank == 0) {
    ReadKvRow(t.layout, t.layer_data[layer], scales, block, kv, head, offset, dst);
    return;
  }
  KVS_DCHECK(t.key_basis != nullptr, "low-rank tier without a basis");
  const int r = t.layout.key_rank;
  thread_local std::vector<float> coeffs;  // one coefficient row; grows once per thread
  coeffs.resize(static_cast<size_t>(r));
  ReadKvRow(t.layout, t.layer_data[layer], scales, block, 0, head, offset, coeffs.data());
  ReconstructKeys(TierHeadBasis(t, layer, head), t.layout.head_dim, r, coeffs.data(), 1, dst);
}

void WriteTierRows(const KvTierStorage& t, int layer, int64_t block, int kv, int head, int offset, int n,
                   const float* src, int64_t src_stride) {
  float* scales = t.layer_scales != nullptr ? t.layer_scales[layer] : nullptr;
  if (kv == 1 || t.layout.key_rank == 0) {
    WriteKvRows(t.layout, t.layer_data[layer], scales, block, kv, head, offset, n, src, src_stride);
    return;
  }
  KVS_DCHECK(t.key_basis != nullptr, "low-rank tier without a basis");
  const int r = t.layout.key_rank;
  thread_local std::vector<float> coeffs;  // one block of coefficient rows; grows once
  coeffs.resize(static_cast<size_t>(n) * r);
  ProjectKeys(TierHeadBasis(t, layer, head), t.layout.head_dim, r, src, src_stride, n, coeffs.data());
  WriteKvRows(t.layout, t.layer_data[layer], scales, block, 0, head, offset, n, coeffs.data(), r);
}

}  // namespace kvserve::kernels::cpu
