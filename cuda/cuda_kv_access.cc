#include "cuda/cuda_kv_access.h"

#include <cuda_runtime.h>

#include <algorithm>

#include "base/check.h"
#include "compression/selection.h"
#include "kernels/cpu/kv_quant.h"
#include "kernels/cuda/kv_compression.h"

namespace kvserve::cuda {
namespace {

// KvAccess has no error channel: a failing copy means the device is lost, which no round can
// recover from.
void Check(cudaError_t err, const char* what) {
  KVS_CHECK(err == cudaSuccess, "cuda kv access: ", what, ": ", cudaGetErrorName(err), ": ", cudaGetErrorString(err));
}

}  // namespace

void CudaKvAccess::ReadRows(std::span<const int32_t> table, int layer, int kv, int head, int64_t begin, int64_t end,
                            float* out) {
  const cache::KvLayout& l = storage_.layout();
  KVS_CHECK(begin >= 0 && begin <= end && static_cast<int64_t>(table.size()) * l.block_size >= end,
            "cuda kv access: rows [", begin, ", ", end, ") outside a table of ", table.size(), " blocks");
  if (begin == end) return;
  // Rows come over segment by segment (the rows of one block) with the scales they decode
  // with, and are dequantized on the host by the CPU's DequantizeRun, so every layout reads
  // back exactly as the CPU backend's: per-row scales (fp8, int8), the groups of an int4 value
  // row, or the run's per-channel int4 key scales (whole, for every segment).
  const config::KvDtype dtype = l.side_dtype(kv);
  const bool scaled = cache::KvDtypeHasScales(dtype);
  const bool channel_scales = dtype == config::KvDtype::kInt4 && kv == 0;
  const size_t rb = l.row_bytes(kv);
  const size_t row_slots = !scaled || channel_scales ? 0 : l.run_scales(kv) / static_cast<size_t>(l.block_size);
  const auto n_rows = static_cast<size_t>(end - begin);
  const size_t segments = static_cast<size_t>((end - 1) / l.block_size - begin / l.block_size + 1);
  rows_.resize(n_rows * rb);
  row_scales_.resize(channel_scales ? segments * static_cast<size_t>(l.head_dim) : n_rows * row_slots);
  auto stream = static_cast<cudaStream_t>(storage_.stream());
  const std::byte* data = storage_.device_layer_data(layer);
  const float* scales = storage_.device_layer_scales(layer);
  for (int64_t i = begin, seg = 0; i < end; ++seg) {
    const int64_t block = table[static_cast<size_t>(i / l.block_size)];
    const int off = static_cast<int>(i % l.block_size);
    const int n = static_cast<int>(std::min<int64_t>(end - i, l.block_size - off));
    const size_t dst = static_cast<size_t>(i - begin);
    Check(cudaMemcpyAsync(rows_.data() + dst * rb, data + l.run_byte_offset(block, kv, head) + off * rb,
                          static_cast<size_t>(n) * rb, cudaMemcpyDeviceToHost, stream),
          "reading K/V rows");
    if (scaled) {
      const float* run_scales = scales + l.run_scale_offset(block, kv, head);
      float* to = channel_scales ? row_scales_.data() + static_cast<size_t>(seg) * l.head_dim
                                 : row_scales_.data() + dst * row_slots;
      const size_t count = channel_scales ? static_cast<size_t>(l.head_dim) : static_cast<size_t>(n) * row_slots;
      Check(cudaMemcpyAsync(to, channel_scales ? run_scales : run_scales + off * row_slots, count * sizeof(float),
                            cudaMemcpyDeviceToHost, stream),
            "reading K/V scales");
    }
    i += n;
  }
  Check(cudaStreamSynchronize(stream), "synchronizing row reads");
  for (int64_t i = begin, seg = 0; i < end; ++seg) {
    const int off = static_cast<int>(i % l.block_size);
    const int n = static_cast<int>(std::min<int64_t>(end - i, l.block_size - off));
    const size_t dst = static_cast<size_t>(i - begin);
    // The staged segment is a run whose rows start at 0 (its per-row scales likewise).
    const float* seg_scales = !scaled ? nullptr
                              : channel_scales ? row_scales_.data() + static_cast<size_t>(seg) * l.head_dim
                                               : row_scales_.data() + dst * row_slots;
    kernels::cpu::DequantizeRun(l, kv, rows_.data() + dst * rb, seg_scales, 0, n, out + dst * l.head_dim);
    i += n;
  }
}

CudaKvAccess::~CudaKvAccess() {
  for (DeviceScratch* d : {&d_layers_, &d_table_, &d_keep_, &d_weights_, &d_scores_, &d_window_}) cudaFree(d->ptr);
}

const int32_t* CudaKvAccess::UploadTable(std::span<const int32_t> table, int64_t num_blocks, void* stream) {
  const size_t bytes = static_cast<size_t>(num_blocks) * sizeof(int32_t);
  auto* d_table = static_cast<int32_t*>(Ensure(d_table_, bytes));
  Check(cudaMemcpyAsync(d_table, table.data(), bytes, cudaMemcpyHostToDevice, static_cast<cudaStream_t>(stream)),
        "block table to the device");
  return d_table;
}

void* CudaKvAccess::Ensure(DeviceScratch& s, size_t bytes) {
  if (bytes <= s.bytes) return s.ptr;
  // Growth: whatever used the old buffer has finished (every call ends synchronized).
  cudaFree(s.ptr);
  s.ptr = nullptr;
  s.bytes = 0;
  const size_t want = std::max<size_t>(bytes + bytes / 2, 4096);
  Check(cudaMalloc(&s.ptr, want), "allocating compression scratch");
  s.bytes = want;
  return s.ptr;
}

compression::CompactStats CudaKvAccess::Compact(std::span<const int32_t> table, const compression::KeepPlan& plan) {
  const cache::KvLayout& l = storage_.layout();
  const int64_t nb = (plan.phys_len + l.block_size - 1) / l.block_size;
  KVS_CHECK(static_cast<int64_t>(table.size()) >= nb, "cuda kv access: table shorter than the plan's phys_len");
  auto stream = static_cast<cudaStream_t>(storage_.stream());
  const auto layers = static_cast<size_t>(l.num_layers);
  if (layer_ptrs_.size() != layers) {
    layer_ptrs_.resize(layers);
    scale_ptrs_.resize(layers);
    for (size_t i = 0; i < layers; ++i) {
      layer_ptrs_[i] = storage_.device_layer_data(static_cast<int>(i));
      scale_ptrs_[i] = storage_.device_layer_scales(static_cast<int>(i));
    }
    auto* d = static_cast<std::byte*>(Ensure(d_layers_, 2 * layers * sizeof(void*)));
    Check(cudaMemcpy(d, layer_ptrs_.data(), layers * sizeof(void*), cudaMemcpyHostToDevice), "layer pointers");
    Check(cudaMemcpy(d + layers * sizeof(void*), scale_ptrs_.data(), layers * sizeof(void*), cudaMemcpyHostToDevice),
          "scale pointers");
  }
  const size_t keep_n = layers * static_cast<size_t>(l.num_kv_heads) * static_cast<size_t>(plan.num_keep);
  const int32_t* d_table = UploadTable(table, nb, stream);
  auto* d_keep = static_cast<int32_t*>(Ensure(d_keep_, std::max<size_t>(keep_n, 1) * 4));
  if (keep_n > 0) {
    Check(cudaMemcpyAsync(d_keep, plan.keep, keep_n * 4, cudaMemcpyHostToDevice, stream), "keep lists to the device");
  }
  auto* d_ptrs = static_cast<std::byte*>(d_layers_.ptr);
  Check(static_cast<cudaError_t>(kernels::cuda::CompactKv(
            l, reinterpret_cast<std::byte* const*>(d_ptrs),
            l.has_scales() ? reinterpret_cast<float* const*>(d_ptrs + layers * sizeof(void*)) : nullptr, d_table,
            plan.lo, plan.scored_end, plan.phys_len, plan.num_keep, d_keep, stream)),
        "compaction gather");
  // The statistics kernels::cpu::CompactKv reports, counted from the plan on the host.
  compression::CompactStats stats;
  stats.new_len = plan.new_len();
  const int64_t shift = plan.scored_end - (plan.lo + plan.num_keep);
  const int64_t rows = static_cast<int64_t>(layers) * l.num_kv_heads;
  for (int64_t r = 0; r < rows; ++r) {
    const int32_t* keep = plan.keep + r * plan.num_keep;
    int64_t i = 0;
    while (i < plan.num_keep && keep[i] == plan.lo + i) ++i;
    stats.rows_moved += (plan.num_keep - i) + (shift > 0 ? plan.phys_len - plan.scored_end : 0);
  }
  // Per moved row, as kernels::cpu::CompactKv counts it: K and V codes plus their per-row
  // scales; int4 keys are re-encoded block by block from the first block a row moves into.
  int64_t per_row_bytes = static_cast<int64_t>(l.row_bytes(0) + l.row_bytes(1));
  for (int kv = 0; kv < 2; ++kv) {
    const config::KvDtype d = l.side_dtype(kv);
    if (d == config::KvDtype::kFp8E4M3 || d == config::KvDtype::kInt8) per_row_bytes += sizeof(float);
    if (d == config::KvDtype::kInt4 && kv == 1) per_row_bytes += l.v_groups() * static_cast<int64_t>(sizeof(float));
  }
  stats.bytes_moved = stats.rows_moved * per_row_bytes;
  if (l.k_dtype() == config::KvDtype::kInt4) {
    const int64_t tail = plan.phys_len - plan.scored_end;
    for (int64_t r = 0; r < rows; ++r) {
      const int32_t* keep = plan.keep + r * plan.num_keep;
      int64_t i = 0;
      while (i < plan.num_keep && keep[i] == plan.lo + i) ++i;
      if (i == plan.num_keep && !(shift > 0 && tail > 0)) continue;
      const int64_t first_dst = i < plan.num_keep ? plan.lo + i : plan.lo + plan.num_keep;
      stats.rows_recoded += stats.new_len - (first_dst / l.block_size) * l.block_size;
    }
  }
  // The table and keep uploads read host memory the caller may reuse: finish before returning.
  Check(cudaStreamSynchronize(stream), "synchronizing the compaction");
  return stats;
}

bool CudaKvAccess::ScoreTriAttention(std::span<const int32_t> table, int layer, int kv_head, int64_t begin,
                                     int64_t end, const compression::TriKeyWeights& weights,
                                     std::span<double> pooled) {
  const cache::KvLayout& l = storage_.layout();
  KVS_CHECK(begin >= 0 && begin <= end && static_cast<int64_t>(table.size()) * l.block_size >= end &&
                static_cast<int64_t>(pooled.size()) >= end - begin,
            "cuda kv access: scoring rows [", begin, ", ", end, ") outside a table of ", table.size(), " blocks");
  const int64_t n = end - begin;
  if (n == 0) return true;
  auto stream = static_cast<cudaStream_t>(storage_.stream());
  const int64_t nb = (end + l.block_size - 1) / l.block_size;
  const int32_t* d_table = UploadTable(table, nb, stream);
  host_weights_.assign(weights.w.begin(), weights.w.end());
  host_weights_.insert(host_weights_.end(), weights.c.begin(), weights.c.end());
  auto* d_w = static_cast<double*>(Ensure(d_weights_, std::max<size_t>(host_weights_.size(), 1) * sizeof(double)));
  Check(cudaMemcpyAsync(d_w, host_weights_.data(), host_weights_.size() * sizeof(double), cudaMemcpyHostToDevice,
                        stream),
        "scoring weights to the device");
  const auto group = static_cast<size_t>(weights.group);
  auto* d_scores =
      static_cast<double*>(Ensure(d_scores_, (group + 1) * static_cast<size_t>(n) * sizeof(double)));
  double* d_pooled = d_scores + group * static_cast<size_t>(n);
  kernels::cuda::DeviceTriWeights dw;
  dw.group = weights.group;
  dw.pools = weights.pools;
  dw.trig = weights.trig;
  dw.norm = weights.norm;
  dw.w = d_w;
  dw.c = d_w + weights.w.size();
  Check(static_cast<cudaError_t>(kernels::cuda::TriAttentionScores(l, storage_.device_layer_data(layer),
                                                                  storage_.device_layer_scales(layer), d_table,
                                                                  kv_head, begin, end, dw, d_scores, stream)),
        "triattention scores");
  Check(static_cast<cudaError_t>(
            kernels::cuda::ZNormMaxPool(d_scores, weights.group, n, compression::kMinStd, d_pooled, stream)),
        "z-normalisation and GQA max");
  Check(cudaMemcpyAsync(pooled.data(), d_pooled, static_cast<size_t>(n) * sizeof(double), cudaMemcpyDeviceToHost,
                        stream),
        "pooled scores to the host");
  Check(cudaStreamSynchronize(stream), "synchronizing the scores");
  return true;
}

bool CudaKvAccess::ScoreTriAttentionAll(std::span<const int32_t> table, int64_t begin, int64_t end,
                                        std::span<const compression::TriKeyWeights> weights,
                                        std::span<double> pooled) {
  const cache::KvLayout& l = storage_.layout();
  const auto heads = static_cast<size_t>(l.num_layers) * static_cast<size_t>(l.num_kv_heads);
  const int64_t n = end - begin;
  KVS_CHECK(begin >= 0 && begin <= end && static_cast<int64_t>(table.size()) * l.block_size >= end &&
                weights.size() == heads && pooled.size() >= heads * static_cast<size_t>(n),
            "cuda kv access: batched scoring of rows [", begin, ", ", end, ") for ", weights.size(), " heads");
  if (n == 0) return true;
  auto stream = static_cast<cudaStream_t>(storage_.stream());
  const int64_t nb = (end + l.block_size - 1) / l.block_size;
  const int32_t* d_table = UploadTable(table, nb, stream);
  // All heads' weights in one upload: head i's w then c at offsets[i].
  host_weights_.clear();
  std::vector<size_t> offsets(heads);
  size_t max_group = 1;
  for (size_t i = 0; i < heads; ++i) {
    offsets[i] = host_weights_.size();
    host_weights_.insert(host_weights_.end(), weights[i].w.begin(), weights[i].w.end());
    host_weights_.insert(host_weights_.end(), weights[i].c.begin(), weights[i].c.end());
    max_group = std::max(max_group, static_cast<size_t>(weights[i].group));
  }
  auto* d_w = static_cast<double*>(Ensure(d_weights_, std::max<size_t>(host_weights_.size(), 1) * sizeof(double)));
  Check(cudaMemcpyAsync(d_w, host_weights_.data(), host_weights_.size() * sizeof(double), cudaMemcpyHostToDevice,
                        stream),
        "scoring weights to the device");
  // Scratch: every head's pooled row (what comes back), then one head's per-query-head scores
  // (reused: the stream orders each head's kernels after the previous head's).
  const auto un = static_cast<size_t>(n);
  auto* d_pooled = static_cast<double*>(Ensure(d_scores_, (heads + max_group) * un * sizeof(double)));
  double* d_scores = d_pooled + heads * un;
  for (size_t i = 0; i < heads; ++i) {
    const compression::TriKeyWeights& w = weights[i];
    kernels::cuda::DeviceTriWeights dw;
    dw.group = w.group;
    dw.pools = w.pools;
    dw.trig = w.trig;
    dw.norm = w.norm;
    dw.w = d_w + offsets[i];
    dw.c = d_w + offsets[i] + w.w.size();
    const int layer = static_cast<int>(i / static_cast<size_t>(l.num_kv_heads));
    const int kv_head = static_cast<int>(i % static_cast<size_t>(l.num_kv_heads));
    Check(static_cast<cudaError_t>(kernels::cuda::TriAttentionScores(l, storage_.device_layer_data(layer),
                                                                    storage_.device_layer_scales(layer), d_table,
                                                                    kv_head, begin, end, dw, d_scores, stream)),
          "triattention scores");
    Check(static_cast<cudaError_t>(kernels::cuda::ZNormMaxPool(d_scores, w.group, n, compression::kMinStd,
                                                               d_pooled + i * un, stream)),
          "z-normalisation and GQA max");
  }
  Check(cudaMemcpyAsync(pooled.data(), d_pooled, heads * un * sizeof(double), cudaMemcpyDeviceToHost, stream),
        "pooled scores to the host");
  Check(cudaStreamSynchronize(stream), "synchronizing the scores");
  return true;
}

bool CudaKvAccess::ScoreSnapKvLayer(std::span<const int32_t> table, int layer, int64_t lo, int64_t n,
                                    std::span<const compression::SnapKvWindow> windows, std::span<double> rows) {
  const cache::KvLayout& l = storage_.layout();
  const size_t heads = windows.size();
  const auto width = static_cast<size_t>(n - lo);
  KVS_CHECK(heads == static_cast<size_t>(l.num_kv_heads) && lo >= 0 && lo <= n &&
                static_cast<int64_t>(table.size()) * l.block_size >= n && rows.size() >= heads * width,
            "cuda kv access: snapkv scoring of [", lo, ", ", n, ") for ", heads, " heads");
  for (const compression::SnapKvWindow& w : windows) {
    KVS_CHECK(static_cast<int64_t>(w.seen.size()) == w.num_queries, "cuda kv access: snapkv window extents");
  }
  if (n == lo) return true;
  auto stream = static_cast<cudaStream_t>(storage_.stream());
  const int64_t nb = (n + l.block_size - 1) / l.block_size;
  const int32_t* d_table = UploadTable(table, nb, stream);
  // Every head's queries packed [rows][group * head_dim], then every head's extents: one upload
  // each. Buffers are sized for all heads before anything is queued (growing one would free
  // memory queued kernels still read).
  std::vector<size_t> q_off(heads), s_off(heads);
  size_t q_floats = 0, seen_count = 0, ws_bytes = 0;
  for (size_t i = 0; i < heads; ++i) {
    const compression::SnapKvWindow& w = windows[i];
    q_off[i] = q_floats;
    s_off[i] = seen_count;
    q_floats += static_cast<size_t>(w.num_queries) * static_cast<size_t>(w.group) * static_cast<size_t>(l.head_dim);
    seen_count += static_cast<size_t>(w.num_queries);
    ws_bytes = std::max(ws_bytes, kernels::cuda::SnapKvWorkspaceBytes(w.group, w.num_queries, w.prefix_end));
  }
  host_queries_.resize(q_floats);
  host_seen_.resize(seen_count);
  for (size_t i = 0; i < heads; ++i) {
    const compression::SnapKvWindow& w = windows[i];
    const size_t per_row = static_cast<size_t>(w.group) * static_cast<size_t>(l.head_dim);
    for (size_t r = 0; r < static_cast<size_t>(w.num_queries); ++r) {
      const float* src = w.queries + static_cast<int64_t>(r) * w.q_stride;
      std::copy(src, src + per_row, host_queries_.begin() + static_cast<std::ptrdiff_t>(q_off[i] + r * per_row));
    }
    std::copy(w.seen.begin(), w.seen.end(), host_seen_.begin() + static_cast<std::ptrdiff_t>(s_off[i]));
  }
  const size_t q_bytes = (q_floats * sizeof(float) + 255) / 256 * 256;
  auto* d_win = static_cast<std::byte*>(Ensure(d_window_, q_bytes + std::max<size_t>(seen_count, 1) * sizeof(int64_t)));
  if (q_floats > 0) {
    Check(cudaMemcpyAsync(d_win, host_queries_.data(), q_floats * sizeof(float), cudaMemcpyHostToDevice, stream),
          "window queries to the device");
  }
  if (seen_count > 0) {
    Check(cudaMemcpyAsync(d_win + q_bytes, host_seen_.data(), seen_count * sizeof(int64_t), cudaMemcpyHostToDevice,
                          stream),
          "window extents to the device");
  }
  // One workspace for every head (the stream orders them), then every head's row.
  const size_t ws_aligned = (ws_bytes + 255) / 256 * 256;
  auto* d_ws = static_cast<std::byte*>(Ensure(d_scores_, ws_aligned + heads * width * sizeof(double)));
  auto* d_rows = reinterpret_cast<double*>(d_ws + ws_aligned);
  for (size_t i = 0; i < heads; ++i) {
    const compression::SnapKvWindow& w = windows[i];
    kernels::cuda::DeviceSnapKvWindow dw;
    dw.group = w.group;
    dw.num_queries = w.num_queries;
    dw.queries = reinterpret_cast<const float*>(d_win) + q_off[i];
    dw.q_stride = static_cast<int64_t>(w.group) * l.head_dim;
    dw.seen = reinterpret_cast<const int64_t*>(d_win + q_bytes) + s_off[i];
    dw.prefix_end = w.prefix_end;
    dw.pool_kernel = w.pool_kernel;
    dw.scale = w.scale;
    Check(static_cast<cudaError_t>(kernels::cuda::SnapKvScores(l, storage_.device_layer_data(layer),
                                                              storage_.device_layer_scales(layer), d_table,
                                                              static_cast<int>(i), lo, n, dw, d_ws, d_rows + i * width,
                                                              stream)),
          "snapkv scores");
  }
  Check(cudaMemcpyAsync(rows.data(), d_rows, heads * width * sizeof(double), cudaMemcpyDeviceToHost, stream),
        "snapkv scores to the host");
  Check(cudaStreamSynchronize(stream), "synchronizing the scores");
  return true;
}

bool CudaKvAccess::ScoreSnapKv(std::span<const int32_t> table, int layer, int kv_head, int64_t lo, int64_t n,
                               const compression::SnapKvWindow& window, std::span<double> row) {
  const cache::KvLayout& l = storage_.layout();
  KVS_CHECK(lo >= 0 && lo <= n && static_cast<int64_t>(table.size()) * l.block_size >= n &&
                static_cast<int64_t>(row.size()) >= n - lo &&
                static_cast<int64_t>(window.seen.size()) == window.num_queries,
            "cuda kv access: snapkv scoring of [", lo, ", ", n, ") outside a table of ", table.size(), " blocks");
  if (n == lo) return true;
  auto stream = static_cast<cudaStream_t>(storage_.stream());
  const int64_t nb = (n + l.block_size - 1) / l.block_size;
  const int32_t* d_table = UploadTable(table, nb, stream);
  // The group's queries of each window row, packed: [rows][group * head_dim].
  const size_t per_row = static_cast<size_t>(window.group) * static_cast<size_t>(l.head_dim);
  const auto rows = static_cast<size_t>(window.num_queries);
  host_queries_.resize(rows * per_row);
  for (size_t r = 0; r < rows; ++r) {
    const float* src = window.queries + static_cast<int64_t>(r) * window.q_stride;
    std::copy(src, src + per_row, host_queries_.begin() + static_cast<std::ptrdiff_t>(r * per_row));
  }
  const size_t q_bytes = (rows * per_row * sizeof(float) + 255) / 256 * 256;
  auto* d_win = static_cast<std::byte*>(Ensure(d_window_, q_bytes + std::max<size_t>(rows, 1) * sizeof(int64_t)));
  if (rows > 0) {
    Check(cudaMemcpyAsync(d_win, host_queries_.data(), rows * per_row * sizeof(float), cudaMemcpyHostToDevice, stream),
          "window queries to the device");
    Check(cudaMemcpyAsync(d_win + q_bytes, window.seen.data(), rows * sizeof(int64_t), cudaMemcpyHostToDevice, stream),
          "window extents to the device");
  }
  const size_t ws_bytes = kernels::cuda::SnapKvWorkspaceBytes(window.group, window.num_queries, window.prefix_end);
  const size_t ws_aligned = (ws_bytes + 255) / 256 * 256;
  auto* d_ws = static_cast<std::byte*>(
      Ensure(d_scores_, ws_aligned + static_cast<size_t>(n - lo) * sizeof(double)));
  auto* d_row = reinterpret_cast<double*>(d_ws + ws_aligned);
  kernels::cuda::DeviceSnapKvWindow dw;
  dw.group = window.group;
  dw.num_queries = window.num_queries;
  dw.queries = reinterpret_cast<const float*>(d_win);
  dw.q_stride = static_cast<int64_t>(per_row);
  dw.seen = reinterpret_cast<const int64_t*>(d_win + q_bytes);
  dw.prefix_end = window.prefix_end;
  dw.pool_kernel = window.pool_kernel;
  dw.scale = window.scale;
  Check(static_cast<cudaError_t>(kernels::cuda::SnapKvScores(l, storage_.device_layer_data(layer),
                                                            storage_.device_layer_scales(layer), d_table, kv_head, lo,
                                                            n, dw, d_ws, d_row, stream)),
        "snapkv scores");
  Check(cudaMemcpyAsync(row.data(), d_row, static_cast<size_t>(n - lo) * sizeof(double), cudaMemcpyDeviceToHost,
                        stream),
        "snapkv scores to the host");
  Check(cudaStreamSynchronize(stream), "synchronizing the scores");
  return true;
}

}  // namespace kvserve::cuda
