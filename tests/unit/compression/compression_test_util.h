// Shared helpers of the compression tests: a host paged pool with scattered block tables,
// random KV in any dtype, per-row snapshots/checksums, random TriAttention statistics and a
// float64 RoPE.
#pragma once

#include <algorithm>
#include <atomic>
#include <cmath>
#include <complex>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <span>
#include <vector>

#include "base/clock.h"
#include "cache/kv_layout.h"
#include "compression/compression_policy.h"
#include "compression/host_kv_access.h"
#include "compression/slot_state.h"
#include "compression/triattention_stats.h"
#include "kernels/cpu/kv_quant.h"

namespace kvserve::compression::testing {

inline constexpr config::KvDtype kAllDtypes[] = {config::KvDtype::kFp32, config::KvDtype::kFp16,
                                                 config::KvDtype::kBf16, config::KvDtype::kFp8E4M3,
                                                 config::KvDtype::kInt8};

// RoPE inverse frequencies theta^(-2f/d), as model/RopeInvFreq computes without scaling.
inline std::vector<float> InvFreq(int head_dim, double theta = 10000.0) {
  std::vector<float> f(static_cast<size_t>(head_dim / 2));
  for (int i = 0; i < head_dim / 2; ++i) f[i] = static_cast<float>(std::pow(theta, -2.0 * i / head_dim));
  return f;
}

// Rotates a pre-RoPE vector x (head_dim, half layout) to position p, times s, in float64.
inline std::vector<double> RopeF64(std::span<const double> x, int64_t p, std::span<const float> inv_freq, double s) {
  const int F = static_cast<int>(inv_freq.size());
  std::vector<double> y(x.size());
  for (int f = 0; f < F; ++f) {
    const double a = static_cast<double>(p) * static_cast<double>(inv_freq[f]);
    const double c = std::cos(a), sn = std::sin(a);
    y[f] = s * (x[f] * c - x[f + F] * sn);
    y[f + F] = s * (x[f + F] * c + x[f] * sn);
  }
  return y;
}

// A host pool in the cache/kv_layout.h layout with block ids handed out in shuffled order.
class TestPool {
 public:
  TestPool(const cache::KvLayout& layout, int64_t num_blocks, uint32_t seed = 11)
      : layout_(layout), num_blocks_(num_blocks), rng_(seed) {
    const size_t bytes = static_cast<size_t>(num_blocks) * layout.block_data_bytes();
    for (int l = 0; l < layout.num_layers; ++l) {
      data_.emplace_back((bytes + 3) / 4, 0.0f);
      data_ptrs_.push_back(reinterpret_cast<std::byte*>(data_.back().data()));
      if (layout.has_scales()) {
        scales_.emplace_back(static_cast<size_t>(num_blocks) * layout.block_scales(), 0.0f);
        scale_ptrs_.push_back(scales_.back().data());
      }
    }
    free_.resize(static_cast<size_t>(num_blocks));
    std::iota(free_.begin(), free_.end(), 0);
    std::shuffle(free_.begin(), free_.end(), rng_);
    access_ = std::make_unique<HostKvAccess>(layout_, data_ptrs_, scale_ptrs_);
  }

  const cache::KvLayout& layout() const { return layout_; }
  std::mt19937& rng() { return rng_; }

  // A block table for `len` slots from the free list.
  std::vector<int32_t> Allocate(int64_t len) {
    std::vector<int32_t> t;
    for (int64_t i = 0; i < (len + layout_.block_size - 1) / layout_.block_size; ++i) {
      t.push_back(free_.back());
      free_.pop_back();
    }
    return t;
  }

  std::span<std::byte* const> layer_data() const { return data_ptrs_; }
  std::span<float* const> layer_scales() const { return scale_ptrs_; }
  // The pool as compression sees it (every sequence's table goes with each call).
  HostKvAccess& access() { return *access_; }

  // Writes row (layer, kv, head) of physical index i of a sequence.
  void Write(const std::vector<int32_t>& table, int layer, int kv, int head, int64_t i, const float* src) {
    kernels::cpu::WriteKvRow(layout_, data_ptrs_[layer], layout_.has_scales() ? scale_ptrs_[layer] : nullptr,
                             table[i / layout_.block_size], kv, head, static_cast<int>(i % layout_.block_size), src);
  }
  std::vector<float> Read(const std::vector<int32_t>& table, int layer, int kv, int head, int64_t i) const {
    std::vector<float> out(static_cast<size_t>(layout_.head_dim));
    kernels::cpu::ReadKvRow(layout_, data_ptrs_[layer], layout_.has_scales() ? scale_ptrs_[layer] : nullptr,
                            table[i / layout_.block_size], kv, head, static_cast<int>(i % layout_.block_size),
                            out.data());
    return out;
  }

  // Random N(0,1) K and V for every row of slots [0, len).
  void FillRandom(const std::vector<int32_t>& table, int64_t len) {
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> row(static_cast<size_t>(layout_.head_dim));
    for (int l = 0; l < layout_.num_layers; ++l)
      for (int kv = 0; kv < 2; ++kv)
        for (int h = 0; h < layout_.num_kv_heads; ++h)
          for (int64_t i = 0; i < len; ++i) {
            for (float& x : row) x = nd(rng_);
            Write(table, l, kv, h, i, row.data());
          }
  }

  // Raw bytes (data then per-row scales) of physical index i's (layer, kv, head) row. int4
  // keys: the codes only (their scales are per block).
  std::vector<std::byte> RawRow(const std::vector<int32_t>& table, int layer, int kv, int head, int64_t i) const {
    const size_t rb = layout_.row_bytes(kv);
    const int64_t block = table[i / layout_.block_size];
    const int off = static_cast<int>(i % layout_.block_size);
    const std::byte* p = data_ptrs_[layer] + layout_.run_byte_offset(block, kv, head) + off * rb;
    std::vector<std::byte> out(p, p + rb);
    const config::KvDtype d = layout_.side_dtype(kv);
    size_t ns = 0;
    if (d == config::KvDtype::kFp8E4M3 || d == config::KvDtype::kInt8) ns = 1;
    if (d == config::KvDtype::kInt4 && kv == 1) ns = static_cast<size_t>(layout_.v_groups());
    if (ns > 0) {
      const auto* sb = reinterpret_cast<const std::byte*>(scale_ptrs_[layer] + layout_.run_scale_offset(block, kv, head) +
                                                          off * ns);
      out.insert(out.end(), sb, sb + ns * sizeof(float));
    }
    return out;
  }

  // Whole blocks' bytes (every layer, data and scales), to prove they were not touched.
  std::vector<std::byte> BlockBytes(std::span<const int32_t> blocks) const {
    std::vector<std::byte> out;
    const size_t db = layout_.block_data_bytes();
    for (int l = 0; l < layout_.num_layers; ++l) {
      for (int32_t b : blocks) {
        const std::byte* p = data_ptrs_[l] + b * db;
        out.insert(out.end(), p, p + db);
        if (layout_.has_scales()) {
          const auto* s = reinterpret_cast<const std::byte*>(scale_ptrs_[l] + b * layout_.block_scales());
          out.insert(out.end(), s, s + layout_.block_scales() * sizeof(float));
        }
      }
    }
    return out;
  }
  std::vector<std::byte> AllBytes() const {
    std::vector<int32_t> all(static_cast<size_t>(num_blocks_));
    std::iota(all.begin(), all.end(), 0);
    return BlockBytes(all);
  }

 private:
  cache::KvLayout layout_;
  int64_t num_blocks_;
  std::mt19937 rng_;
  std::vector<std::vector<float>> data_, scales_;
  std::vector<std::byte*> data_ptrs_;
  std::vector<float*> scale_ptrs_;
  std::vector<int32_t> free_;
  std::unique_ptr<HostKvAccess> access_;
};

// A KvAccess that forwards to a host pool's and counts the rows read: the base of the test
// doubles that stand for a backend scoring where its KV lives (they override a Score* hook).
class DelegatingKvAccess : public KvAccess {
 public:
  explicit DelegatingKvAccess(HostKvAccess& host) : host_(host) {}
  const cache::KvLayout& layout() const override { return host_.layout(); }
  void ReadRows(std::span<const int32_t> table, int layer, int kv, int head, int64_t begin, int64_t end,
                float* out) override {
    ++reads;
    host_.ReadRows(table, layer, kv, head, begin, end, out);
  }
  CompactStats Compact(std::span<const int32_t> table, const KeepPlan& plan) override {
    return host_.Compact(table, plan);
  }
  HostKvAccess& host() { return host_; }
  int reads = 0;  // ReadRows calls made by the code under test

 private:
  HostKvAccess& host_;
};

// FNV-1a over a row's bytes, order-sensitive when chained.
inline uint64_t Fnv(std::span<const std::byte> b, uint64_t h = 0xcbf29ce484222325ull) {
  for (std::byte x : b) {
    h ^= static_cast<uint8_t>(x);
    h *= 0x100000001b3ull;
  }
  return h;
}

// Random statistics with M >= |A| (as real means are).
inline TriAttentionStats RandomStats(int layers, int q_heads, int kv_heads, int head_dim,
                                     std::span<const float> inv_freq, std::mt19937& rng, double scaling = 1.0) {
  TriAttentionStats s;
  s.num_layers = layers;
  s.num_q_heads = q_heads;
  s.num_kv_heads = kv_heads;
  s.head_dim = head_dim;
  s.attention_scaling = scaling;
  s.num_tokens = 1234;
  s.source = "random test stats";
  s.inv_freq.assign(inv_freq.begin(), inv_freq.end());
  std::normal_distribution<double> nd(0.0, 1.0);
  std::uniform_real_distribution<double> extra(0.0, 1.5);
  s.entries.resize(static_cast<size_t>(layers) * q_heads * (head_dim / 2));
  for (FreqStat& e : s.entries) {
    e.a_re = nd(rng);
    e.a_im = nd(rng);
    e.m = std::hypot(e.a_re, e.a_im) + extra(rng);
  }
  return s;
}

// The paper's score in the inverted-RoPE form (needs the key's position p): with k the
// pre-RoPE key recovered from the cached key by undoing its rotation (and s),
//   S = mean_delta sum_f s^2 Re(A conj(k) e^{i w (t + delta - p)}) + sum_f s^2 max(0, M - |A|) |k|.
inline double ReferenceScore(const TriAttentionStats& st, int layer, int head, std::span<const float> cached,
                             int64_t p, int64_t t) {
  const int F = st.num_freqs();
  const double s = st.attention_scaling;
  double trig = 0.0, norm = 0.0;
  for (int f = 0; f < F; ++f) {
    const double w = st.inv_freq[f];
    const std::complex<double> kappa(cached[f] / s, cached[f + F] / s);
    const std::complex<double> k = kappa * std::polar(1.0, -static_cast<double>(p) * w);  // inverse RoPE
    const FreqStat& e = st.at(layer, head, f);
    const std::complex<double> a(e.a_re, e.a_im);
    for (int m = 0; m <= 16; ++m) {
      const double dist = static_cast<double>(t + (int64_t{1} << m) - p);
      trig += s * s * std::real(a * std::conj(k) * std::polar(1.0, w * dist));
    }
    norm += s * s * std::max(0.0, e.m - std::abs(a)) * std::abs(k);
  }
  return trig / 17.0 + norm;
}

// A sequence in a TestPool whose keys are RoPE(random pre-key, position), so tests know every
// key's position; values are random too.
struct TestSeq {
  TestPool* pool = nullptr;
  std::vector<int32_t> table;  // must cover every slot appended
  SlotState slots;
  int64_t next_position = 0;

  void Append(int64_t count) {
    const cache::KvLayout& l = pool->layout();
    std::normal_distribution<double> nd(0.0, 1.0);
    std::vector<double> pre(static_cast<size_t>(l.head_dim));
    std::vector<float> row(static_cast<size_t>(l.head_dim));
    const std::vector<float> inv = InvFreq(l.head_dim);
    for (int64_t c = 0; c < count; ++c) {
      const int64_t slot = slots.size() + c;
      for (int layer = 0; layer < l.num_layers; ++layer)
        for (int h = 0; h < l.num_kv_heads; ++h) {
          for (double& x : pre) x = nd(pool->rng());
          const std::vector<double> k = RopeF64(pre, next_position + c, inv, 1.0);
          std::copy(k.begin(), k.end(), row.begin());
          pool->Write(table, layer, 0, h, slot, row.data());
          for (float& x : row) x = static_cast<float>(nd(pool->rng()));
          pool->Write(table, layer, 1, h, slot, row.data());
        }
    }
    slots.Append(next_position, count);
    next_position += count;
  }
  RoundInput Input() { return {&pool->access(), table, slots.size(), &slots, next_position}; }
};

// Independent TriAttention selection: reference scores, z-normalised per query head
// (population std, clamp 1e-6), max over the KV group, top-k with ties to the lowest slot,
// ascending. Returns [layers][kv_heads][k] slots.
inline std::vector<int32_t> ReferenceTriKeep(const TestSeq& seq, const TriAttentionStats& st, int64_t lo,
                                             int64_t k) {
  const cache::KvLayout& l = seq.pool->layout();
  const int64_t n = seq.slots.size();
  const int group = st.num_q_heads / st.num_kv_heads;
  std::vector<int32_t> out;
  for (int layer = 0; layer < l.num_layers; ++layer)
    for (int kv = 0; kv < l.num_kv_heads; ++kv) {
      const std::span<const int32_t> pos = seq.slots.positions(layer, kv);
      std::vector<double> best(static_cast<size_t>(n - lo), -1e300);
      for (int g = 0; g < group; ++g) {
        std::vector<double> s;
        for (int64_t j = lo; j < n; ++j) {
          s.push_back(ReferenceScore(st, layer, kv * group + g, seq.pool->Read(seq.table, layer, 0, kv, j), pos[j],
                                     seq.next_position));
        }
        double mean = 0, var = 0;
        for (double v : s) mean += v;
        mean /= static_cast<double>(s.size());
        for (double v : s) var += (v - mean) * (v - mean);
        const double sd = std::max(std::sqrt(var / static_cast<double>(s.size())), 1e-6);
        for (size_t j = 0; j < s.size(); ++j) best[j] = std::max(best[j], (s[j] - mean) / sd);
      }
      std::vector<int32_t> idx(best.size());
      std::iota(idx.begin(), idx.end(), 0);
      std::stable_sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) { return best[a] > best[b]; });
      idx.resize(static_cast<size_t>(k));
      std::sort(idx.begin(), idx.end());
      for (int32_t i : idx) out.push_back(static_cast<int32_t>(lo + i));
    }
  return out;
}

// A clock that advances 1 us per reading, so every timed phase measures > 0.
class TickClock final : public base::Clock {
 public:
  base::Nanos now_ns() const override { return t_.fetch_add(1000) + 1000; }

 private:
  mutable std::atomic<base::Nanos> t_{0};
};

inline PolicyContext MakeContext(const cache::KvLayout& layout, int q_heads, std::span<const float> inv_freq,
                                 const TriAttentionStats* stats, const base::Clock* clock) {
  PolicyContext c;
  c.num_layers = layout.num_layers;
  c.num_q_heads = q_heads;
  c.num_kv_heads = layout.num_kv_heads;
  c.head_dim = layout.head_dim;
  c.rope_inv_freq = inv_freq;
  c.triattention_stats = stats;
  c.clock = clock;
  return c;
}

}  // namespace kvserve::compression::testing
