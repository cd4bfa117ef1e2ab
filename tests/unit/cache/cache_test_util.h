// Factories and KV data checks shared by the cache tests.
//
// Data checks: every token's K/V rows hold a pattern that depends only on (token id,
// position, layer, K|V, head, channel). A block's content is then a function of the
// tokens and positions it holds, which is exactly what the prefix cache and copy-on-write
// promise: any sequence can verify that its table reads back its own tokens, whichever
// sequence wrote the blocks.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cache/host_kv_storage.h"
#include "cache/kv_cache_manager.h"
#include "cache/kv_layout.h"
#include "kernels/cpu/kv_quant.h"

namespace kvserve::cache::testing {

inline KvLayout SmallLayout(config::KvDtype dtype = config::KvDtype::kFp32, int block_size = 4,
                            int layers = 2, int kv_heads = 2, int head_dim = 8) {
  KvLayout l;
  l.num_layers = layers;
  l.num_kv_heads = kv_heads;
  l.head_dim = head_dim;
  l.block_size = block_size;
  l.dtype = dtype;
  return l;
}

// `num_blocks` usable blocks (the null block is added).
inline std::unique_ptr<KvCacheManager> MakeManager(int32_t num_blocks, int block_size = 4,
                                                   int32_t host_blocks = 0, bool prefix = true,
                                                   config::KvDtype dtype = config::KvDtype::kFp32) {
  KvCacheManagerOptions o;
  o.layout = SmallLayout(dtype, block_size);
  o.num_blocks = num_blocks + 1;
  o.num_host_blocks = host_blocks;
  o.enable_prefix_caching = prefix;
  return std::make_unique<KvCacheManager>(o, base::Logger());
}

inline std::vector<int32_t> Tokens(int n, int32_t first = 1000) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = first + i;
  return t;
}

// The pattern row (before quantization).
inline void PatternRow(int32_t token, int64_t pos, int layer, int kv, int head, int head_dim,
                       float* out) {
  const uint64_t base = static_cast<uint64_t>(static_cast<uint32_t>(token)) * 2654435761u +
                        static_cast<uint64_t>(pos) * 40503u + layer * 977u + kv * 331u + head * 71u;
  for (int d = 0; d < head_dim; ++d) {
    out[d] = static_cast<float>(static_cast<int>((base + d * 13u) % 113u) - 56) / 8.0f;
  }
}

// Writes the pattern of tokens[first_pos, first_pos + n) into their slots.
inline void WritePattern(KvStorage& storage, const KvCacheManager& m, SeqId seq,
                         std::span<const int32_t> tokens, int64_t first_pos, int64_t n) {
  const KvLayout& l = storage.layout();
  const int row = l.num_kv_heads * l.head_dim;
  std::vector<float> k(row), v(row);
  for (int64_t p = first_pos; p < first_pos + n; ++p) {
    const int64_t slot = m.slot(seq, p);
    for (int layer = 0; layer < l.num_layers; ++layer) {
      for (int h = 0; h < l.num_kv_heads; ++h) {
        PatternRow(tokens[p], p, layer, 0, h, l.head_dim, &k[h * l.head_dim]);
        PatternRow(tokens[p], p, layer, 1, h, l.head_dim, &v[h * l.head_dim]);
      }
      WriteKvToken(storage, layer, slot, k.data(), v.data());
    }
  }
}

// Empty string when every stored token of `seq` reads back its own pattern (after the
// dtype's quantize -> dequantize round trip), else a description of the first mismatch.
inline std::string VerifyPattern(const KvStorage& storage, const KvCacheManager& m, SeqId seq,
                                 std::span<const int32_t> tokens) {
  const KvLayout& l = storage.layout();
  const int row = l.num_kv_heads * l.head_dim;
  std::vector<float> k(row), v(row), want(l.head_dim), want_rt(l.head_dim);
  std::vector<std::byte> q(l.head_dim * l.elem_bytes());
  const int64_t n = m.num_tokens(seq);
  for (int64_t p = 0; p < n; ++p) {
    const int64_t slot = m.slot(seq, p);
    for (int layer = 0; layer < l.num_layers; ++layer) {
      ReadKvToken(storage, layer, slot, k.data(), v.data());
      for (int kv = 0; kv < 2; ++kv) {
        for (int h = 0; h < l.num_kv_heads; ++h) {
          PatternRow(tokens[p], p, layer, kv, h, l.head_dim, want.data());
          float scale = 0;
          kernels::cpu::QuantizeRow(want.data(), l.head_dim, l.dtype, q.data(), &scale);
          kernels::cpu::DequantizeRow(q.data(), &scale, l.head_dim, l.dtype, want_rt.data());
          const float* got = (kv == 0 ? k.data() : v.data()) + h * l.head_dim;
          for (int d = 0; d < l.head_dim; ++d) {
            if (got[d] != want_rt[d]) {
              return absl::StrCat("seq ", seq.value(), " pos ", p, " slot ", slot, " layer ",
                                  layer, " kv ", kv, " head ", h, " dim ", d, ": got ", got[d],
                                  " want ", want_rt[d]);
            }
          }
        }
      }
    }
  }
  return "";
}

}  // namespace kvserve::cache::testing
