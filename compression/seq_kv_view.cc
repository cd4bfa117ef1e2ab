#include "compression/seq_kv_view.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/kv_quant.h"

namespace kvserve::compression {

absl::Status ValidateSeqKvView(const SeqKvView& v) {
  const int layers = v.layout.num_layers;
  if (static_cast<int>(v.layer_data.size()) != layers) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv view: ", v.layer_data.size(), " layer arrays for ", layers, " layers"));
  }
  if (v.layout.has_scales() && static_cast<int>(v.layer_scales.size()) != layers) {
    return absl::InvalidArgumentError("kv view: the KV dtype has scales but the view has none");
  }
  if (v.phys_len < 0 || static_cast<int64_t>(v.block_table.size()) < v.blocks_for(v.phys_len)) {
    return absl::InvalidArgumentError(absl::StrCat("kv view: block table of ", v.block_table.size(),
                                                   " blocks cannot hold ", v.phys_len, " slots"));
  }
  return absl::OkStatus();
}

void ReadRows(const SeqKvView& v, int layer, int kv, int head, int64_t begin, int64_t end, float* out) {
  const cache::KvLayout& l = v.layout;
  const std::byte* data = v.layer_data[layer];
  const float* scales = l.has_scales() ? v.layer_scales[layer] : nullptr;
  const size_t eb = l.elem_bytes();
  // One DequantizeRows call per run of consecutive slots inside a block.
  for (int64_t i = begin; i < end;) {
    const int64_t block = v.block_table[i / l.block_size];
    const int off = static_cast<int>(i % l.block_size);
    const int n = static_cast<int>(std::min<int64_t>(end - i, l.block_size - off));
    kernels::cpu::DequantizeRows(data + l.elem_offset(block, kv, head, off) * eb,
                                 scales != nullptr ? scales + l.scale_offset(block, kv, head, off) : nullptr, n,
                                 l.head_dim, l.dtype, out + (i - begin) * l.head_dim);
    i += n;
  }
}

}  // namespace kvserve::compression
