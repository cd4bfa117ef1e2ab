#include "kernels/cpu/quant/quant_linear.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/cpu/compute_pool.h"
#include "kernels/cpu/packed_linear.h"
#include "kernels/cpu/quant/panel_format.h"
#include "kernels/cpu/quant/panel_kernels.h"
#include "kernels/cpu/quant/repack.h"

namespace kvserve::kernels::cpu::quant {

using kvserve::quant::BlockType;

// One segment: output rows [row0, row0 + rows) of one type, repacked.
struct Segment {
  const TypeEntry* entry = nullptr;
  int64_t row0 = 0;
  int64_t rows = 0;
  // Quantized: panels x panel_bytes, 64-byte aligned at packed_at.
  int64_t panels = 0;
  int64_t panel_bytes = 0;
  int64_t units = 0;
  std::vector<uint8_t> storage;
  const uint8_t* packed = nullptr;
  int order = -1;  // index into Impl::orders, -1: input order
  // Dense (F32 / F16 / BF16): packed_linear panels.
  std::vector<float> dense_f32;
  std::vector<uint16_t> dense_16;
};

struct QuantMatrix::Impl {
  int64_t in = 0;
  int64_t in_pad = 0;  // activation row length the kernels read (a multiple of 64)
  int64_t out = 0;
  size_t bytes = 0;
  bool any_quantized = false;
  bool identity_used = false;  // a quantized segment reads the activations in input order
  std::vector<std::vector<int32_t>> orders;  // distinct input orders of quantized segments
  std::vector<Segment> segments;
};

QuantMatrix::QuantMatrix(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
QuantMatrix::QuantMatrix(QuantMatrix&&) noexcept = default;
QuantMatrix& QuantMatrix::operator=(QuantMatrix&&) noexcept = default;
QuantMatrix::~QuantMatrix() = default;
int64_t QuantMatrix::out_features() const { return impl_->out; }
int64_t QuantMatrix::in_features() const { return impl_->in; }
size_t QuantMatrix::bytes() const { return impl_->bytes; }

namespace {

void PackQuantized(const QuantSource& src, int64_t in, Segment& seg) {
  const PanelFormat& f = seg.entry->format;
  const int ub = UnitBlocks(f.scales);
  const int64_t nblocks = in / kBlock;
  seg.units = (nblocks + ub - 1) / ub;
  seg.panels = (src.rows + kPanelRows - 1) / kPanelRows;
  seg.panel_bytes = seg.units * UnitBytes(f.codes, f.scales);
  seg.storage.assign(static_cast<size_t>(seg.panels * seg.panel_bytes) + 64, 0);
  uint8_t* base = seg.storage.data();
  base += (64 - reinterpret_cast<uintptr_t>(base) % 64) % 64;
  seg.packed = base;
  BlockCodes code;
  for (int64_t p = 0; p < seg.panels; ++p) {
    for (int64_t u = 0; u < seg.units; ++u) {
      uint8_t* unit = base + p * seg.panel_bytes + u * UnitBytes(f.codes, f.scales);
      for (int b = 0; b < ub && u * ub + b < nblocks; ++b) {
        std::memset(code, 0, sizeof code);
        for (int r = 0; r < kPanelRows; ++r) {
          const int64_t row = p * kPanelRows + r;
          if (row >= src.rows) break;
          seg.entry->pack(src.data + row * src.row_stride, u * ub + b, r, code[r], unit,
                          unit + ScalesAt(f.scales, b));
        }
        WriteCodes(f.codes, code, unit + CodesAt(f.codes, f.scales, b));
      }
    }
  }
}

void PackDense(const QuantSource& src, int64_t in, Segment& seg) {
  const int out = static_cast<int>(src.rows), n = static_cast<int>(in);
  const size_t packed = PackedLinearFloats(out, n);
  if (src.type == BlockType::kF32) {
    std::vector<float> w(static_cast<size_t>(out) * n);
    for (int r = 0; r < out; ++r)
      std::memcpy(&w[static_cast<size_t>(r) * n], src.data + r * src.row_stride, 4 * n);
    seg.dense_f32.resize(packed);
    PackLinearWeights(w.data(), out, n, seg.dense_f32.data());
    return;
  }
  std::vector<uint16_t> w(static_cast<size_t>(out) * n);
  for (int r = 0; r < out; ++r)
    std::memcpy(&w[static_cast<size_t>(r) * n], src.data + r * src.row_stride, 2 * n);
  seg.dense_16.resize(packed);
  if (src.type == BlockType::kF16) {
    PackLinearWeightsFp16(w.data(), out, n, seg.dense_16.data());
  } else {
    PackLinearWeightsBf16(w.data(), out, n, seg.dense_16.data());
  }
}

}  // namespace

absl::StatusOr<QuantMatrix> QuantMatrix::Pack(std::span<const QuantSource> segments, int64_t in) {
  if (in <= 0 || in > std::numeric_limits<int>::max()) {
    return absl::InvalidArgumentError(
        absl::StrCat("quantized linear: bad input feature count ", in));
  }
  if (segments.empty()) return absl::InvalidArgumentError("quantized linear: no segments");
  auto impl = std::make_unique<Impl>();
  impl->in = in;
  impl->in_pad = (in + 63) / 64 * 64;
  for (size_t i = 0; i < segments.size(); ++i) {
    const QuantSource& src = segments[i];
    const TypeEntry* entry = FindTypeEntry(src.type);
    if (entry == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("quantized linear: segment ", i, ": block type id ",
                       static_cast<uint32_t>(src.type), " has no kernel"));
    }
    if (in % entry->block_elements != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "quantized linear: segment ", i, " (", entry->name, "): ", in,
          " input features are not a multiple of its block of ", entry->block_elements));
    }
    const int64_t row_bytes = in / entry->block_elements * entry->block_bytes;
    if (src.rows <= 0 || src.data == nullptr || src.row_stride < row_bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("quantized linear: segment ", i, " (", entry->name,
                       "): needs rows > 0, data and a row stride >= ", row_bytes,
                       " bytes (got rows ", src.rows, ", stride ", src.row_stride, ")"));
    }
    if (entry->pack == nullptr && src.rows > std::numeric_limits<int>::max()) {
      return absl::InvalidArgumentError(
          absl::StrCat("quantized linear: segment ", i, ": too many rows"));
    }
    Segment seg;
    if (src.input_order != nullptr) {
      if (entry->pack == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat("quantized linear: segment ", i, " (",
                                                       entry->name,
                                                       "): an input order needs a quantized type"));
      }
      std::vector<int32_t> order(src.input_order, src.input_order + in);
      std::vector<bool> seen(static_cast<size_t>(in), false);
      for (int32_t k : order) {
        if (k < 0 || k >= in || seen[k]) {
          return absl::InvalidArgumentError(
              absl::StrCat("quantized linear: segment ", i,
                           ": input order is not a permutation of [0, ", in, ")"));
        }
        seen[k] = true;
      }
      auto same = std::find(impl->orders.begin(), impl->orders.end(), order);
      seg.order = static_cast<int>(same - impl->orders.begin());
      if (same == impl->orders.end()) impl->orders.push_back(std::move(order));
    }
    seg.entry = entry;
    seg.row0 = impl->out;
    seg.rows = src.rows;
    if (entry->pack != nullptr) {
      PackQuantized(src, in, seg);
      impl->bytes += static_cast<size_t>(seg.panels * seg.panel_bytes);
      impl->any_quantized = true;
      impl->identity_used |= seg.order < 0;
    } else {
      PackDense(src, in, seg);
      impl->bytes += seg.dense_f32.size() * 4 + seg.dense_16.size() * 2;
    }
    impl->out += src.rows;
    impl->segments.push_back(std::move(seg));
  }
  return QuantMatrix(std::move(impl));
}

namespace {

// Per calling thread: the quantized activations of the current call (grown, never shrunk).
struct Scratch {
  std::vector<int8_t> q;
  std::vector<ActBlock> blocks;
  std::vector<int64_t> chunk_end;  // per segment: the first chunk after it
};
Scratch& CallScratch() {
  thread_local Scratch scratch;
  return scratch;
}

// Quantizes x[0..in) per 32 elements (panel_format.h); blocks past `in` up to in_pad are zero.
void QuantizeRow(const float* x, int64_t in, int64_t in_pad, int8_t* q, ActBlock* blocks) {
  for (int64_t kb = 0; kb < in_pad / kBlock; ++kb) {
    int8_t* qb = q + kb * kBlock;
    ActBlock& ab = blocks[kb];
    if (kb * kBlock >= in) {
      std::memset(qb, 0, kBlock);
      ab = ActBlock{};
      continue;
    }
    const float* xb = x + kb * kBlock;
    float amax = 0;
    for (int i = 0; i < kBlock; ++i) amax = std::max(amax, std::fabs(xb[i]));
    const float dx = amax / 127.0f;
    const float inv = dx > 0 ? 1.0f / dx : 0.0f;
    int32_t lo = 0, hi = 0;
    // Round to nearest, ties to even, by the 1.5 * 2^23 trick (|x * inv| <= 127 + ulp): no libm
    // call per element, and the loop vectorizes.
    constexpr float kMagic = 12582912.0f;
    for (int i = 0; i < kBlock; ++i) {
      const float v = (xb[i] * inv + kMagic) - kMagic;
      qb[i] = static_cast<int8_t>(std::clamp(static_cast<int>(v), -127, 127));
    }
    for (int i = 0; i < 16; ++i) lo += qb[i];
    for (int i = 16; i < kBlock; ++i) hi += qb[i];
    ab.dx = dx;
    ab.sx = dx * static_cast<float>(lo + hi);
    ab.sx_lo = dx * static_cast<float>(lo);
    ab.sx_hi = dx * static_cast<float>(hi);
    ab.bs_lo32 = 32 * lo;
    ab.bs_hi32 = 32 * hi;
  }
}

constexpr int64_t kChunkMacs = 1 << 18;
constexpr int64_t kMaxChunks = 32;
constexpr int64_t kSliceBytes = 384 << 10;  // activation bytes (codes + block sums) per row slice

int PIndex(int p) { return p == 4 ? 2 : p - 1; }

// The kernel family of a call; one per process for QuantLinear (see Family()).
enum class Family { kVnni, kAvx2, kPortable };

const QKernelTable& TableOf(Family f, const PanelFormat& format) {
  switch (f) {
    case Family::kVnni:
      return Avx512VnniKernels(format);
    case Family::kAvx2:
      return Avx2Kernels(format);
    case Family::kPortable:
      break;
  }
  return PortableKernels();
}

void QuantLinearWith(Family family, const float* x, int64_t x_stride, const QuantMatrix& w,
                     const float* bias, float* y, int64_t y_stride, int64_t rows, bool accumulate) {
  if (rows <= 0) return;
  const bool portable = family == Family::kPortable;
  const QuantMatrix::Impl& m = w.impl();
  const int in = static_cast<int>(m.in);
  // Dense segments: packed_linear (its own parallel loop).
  for (const Segment& s : m.segments) {
    if (s.entry->pack != nullptr) continue;
    const float* b = bias != nullptr ? bias + s.row0 : nullptr;
    float* ys = y + s.row0;
    const int out = static_cast<int>(s.rows);
    if (s.entry->type == BlockType::kF32) {
      (portable ? cpu::internal::PackedLinearPortable : PackedLinear)(
          x, x_stride, s.dense_f32.data(), b, ys, y_stride, rows, in, out, accumulate);
    } else if (s.entry->type == BlockType::kF16) {
      (portable ? cpu::internal::PackedLinearFp16Portable : PackedLinearFp16)(
          x, x_stride, s.dense_16.data(), b, ys, y_stride, rows, in, out, accumulate);
    } else {
      (portable ? cpu::internal::PackedLinearBf16Portable : PackedLinearBf16)(
          x, x_stride, s.dense_16.data(), b, ys, y_stride, rows, in, out, accumulate);
    }
  }
  if (!m.any_quantized) return;

  // Activations, once per call and input order: set 0 in input order, set 1 + i gathered by
  // orders[i] (QuantSource::input_order); a segment reads set 1 + its order.
  Scratch& scratch = CallScratch();
  const int64_t nb = m.in_pad / kBlock;
  const int64_t sets = 1 + static_cast<int64_t>(m.orders.size());
  if (static_cast<int64_t>(scratch.q.size()) < sets * rows * m.in_pad) {
    scratch.q.resize(sets * rows * m.in_pad);
  }
  if (static_cast<int64_t>(scratch.blocks.size()) < sets * rows * nb) {
    scratch.blocks.resize(sets * rows * nb);
  }
  int8_t* xq = scratch.q.data();
  ActBlock* xb = scratch.blocks.data();
  const int64_t first_set = m.identity_used ? 0 : 1;
  ParallelFor((sets - first_set) * rows, SplitFor((sets - first_set) * rows * m.in * 8),
              [&](int64_t t, int) {
                const int64_t set = first_set + t / rows, r = t % rows;
                const float* xr = x + r * x_stride;
                if (set > 0) {
                  // Gathered per worker thread into its own buffer (grown once, then reused).
                  thread_local std::vector<float> gathered;
                  if (static_cast<int64_t>(gathered.size()) < m.in) gathered.resize(m.in);
                  const int32_t* order = m.orders[set - 1].data();
                  for (int64_t k = 0; k < m.in; ++k) gathered[k] = xr[order[k]];
                  xr = gathered.data();
                }
                QuantizeRow(xr, m.in, m.in_pad, xq + (set * rows + r) * m.in_pad,
                            xb + (set * rows + r) * nb);
              });

  // Tiles: one row -> 4 panels per kernel call, 2..4 rows -> 2 panels, more -> 1 panel x 8 rows.
  // (4 rows x 2 panels measured the same as 8 x 1 at 512 rows for Q8_0/Q4_K and slower for
  // Q6_K, whose two int32 sums per output then spill.)
  const int group = rows == 1 ? 4 : rows <= 4 ? 2 : 1;
  const int max_rows = rows == 1 ? 1 : rows <= 4 ? 4 : kMaxTileRows;
  // Chunks: per segment, cut by work into panel-group ranges (shape-only).
  scratch.chunk_end.resize(m.segments.size());
  int64_t total = 0, macs_total = 0;
  for (size_t i = 0; i < m.segments.size(); ++i) {
    const Segment& s = m.segments[i];
    if (s.entry->pack != nullptr) {
      const int64_t groups = (s.panels + group - 1) / group;
      const int64_t macs = rows * m.in * s.rows;
      macs_total += macs;
      total += std::clamp<int64_t>(macs / kChunkMacs, 1, std::min<int64_t>(groups, kMaxChunks));
    }
    scratch.chunk_end[i] = total;
  }
  const int64_t* chunk_end = scratch.chunk_end.data();
  ParallelFor(total, SplitFor(macs_total / 4), [&](int64_t c, int) {
    size_t si = 0;
    while (chunk_end[si] <= c) ++si;
    const Segment& s = m.segments[si];
    const int64_t first = si == 0 ? 0 : chunk_end[si - 1];
    const int64_t chunks = chunk_end[si] - first, sc = c - first;
    const int64_t groups = (s.panels + group - 1) / group;
    const int64_t p0 = groups * sc / chunks * group;
    const int64_t p1 = std::min(s.panels, groups * (sc + 1) / chunks * group);
    const QKernelTable& kt = TableOf(family, s.entry->format);
    // Rows in slices that keep their activations in L2 next to the chunk's panels
    // (prefill: 512 rows x 4096 inputs are 3.5 MB of codes and block sums).
    const int64_t slice =
        std::max<int64_t>(max_rows, (kSliceBytes / (m.in_pad * 2)) / max_rows * max_rows);
    for (int64_t rs = 0; rs < rows; rs += slice) {
      const int64_t re = std::min(rows, rs + slice);
      for (int64_t p = p0; p < p1;) {
        int np = static_cast<int>(std::min<int64_t>(group, p1 - p));
        if (np == 3) np = 2;
        const int64_t col = s.row0 + p * kPanelRows;
        const int valid =
            static_cast<int>(std::min<int64_t>(np * kPanelRows, s.row0 + s.rows - col));
        for (int64_t r0 = rs; r0 < re; r0 += max_rows) {
          const int nr = static_cast<int>(std::min<int64_t>(max_rows, re - r0));
          const int64_t set_row = (s.order + 1) * rows + r0;
          const QTile t{xq + set_row * m.in_pad,
                        m.in_pad,
                        xb + set_row * nb,
                        nb,
                        s.packed + p * s.panel_bytes,
                        s.panel_bytes,
                        s.units,
                        s.entry->format,
                        y + r0 * y_stride + col,
                        y_stride,
                        bias != nullptr ? bias + col : nullptr,
                        valid,
                        accumulate};
          kt.fn[PIndex(np)][nr - 1](t);
        }
        p += np;
      }
    }
  });
}

Family ProcessFamily() {
  static const Family f = CpuHasAvx512Vnni() ? Family::kVnni
                          : CpuHasAvx2()     ? Family::kAvx2
                                             : Family::kPortable;
  return f;
}

}  // namespace

void QuantLinear(const float* x, int64_t x_stride, const QuantMatrix& w, const float* bias,
                 float* y, int64_t y_stride, int64_t rows, bool accumulate) {
  QuantLinearWith(ProcessFamily(), x, x_stride, w, bias, y, y_stride, rows, accumulate);
}

const char* QuantKernelName(BlockType type) {
  const TypeEntry* e = FindTypeEntry(type);
  if (e == nullptr) return "none";
  if (e->pack == nullptr) return PackedLinearKernelName();
  switch (ProcessFamily()) {
    case Family::kVnni:
      return e->generic ? "avx512-vnni (generic, slower)" : "avx512-vnni";
    case Family::kAvx2:
      return e->generic ? "avx2 (generic, slower)" : "avx2";
    case Family::kPortable:
      break;
  }
  return e->generic ? "portable (generic, slower)" : "portable";
}

namespace internal {
void QuantLinearPortable(const float* x, int64_t x_stride, const QuantMatrix& w, const float* bias,
                         float* y, int64_t y_stride, int64_t rows, bool accumulate) {
  QuantLinearWith(Family::kPortable, x, x_stride, w, bias, y, y_stride, rows, accumulate);
}
bool HasAvx2Kernels() { return CpuHasAvx2(); }
void QuantLinearAvx2(const float* x, int64_t x_stride, const QuantMatrix& w, const float* bias,
                     float* y, int64_t y_stride, int64_t rows, bool accumulate) {
  QuantLinearWith(Family::kAvx2, x, x_stride, w, bias, y, y_stride, rows, accumulate);
}
}  // namespace internal

}  // namespace kvserve::kernels::cpu::quant
