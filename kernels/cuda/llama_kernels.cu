#include "kernels/cuda/llama_kernels.h"

#include <cuda_runtime.h>

#include <climits>
#include <cmath>

#include "kernels/cuda/kv_codes.cuh"

namespace kvserve::kernels::cuda {
namespace {

cudaStream_t AsStream(void* s) { return static_cast<cudaStream_t>(s); }

unsigned GridFor(int64_t n, int threads) { return static_cast<unsigned>((n + threads - 1) / threads); }

int LastError() { return static_cast<int>(cudaGetLastError()); }

// ------------------------------------------------------------------ embedding

__global__ void EmbeddingKernel(const float* embed, int dim, const int32_t* token_ids, int64_t rows, float* out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * dim) return;
  const int64_t r = i / dim;
  const int64_t c = i - r * dim;
  out[i] = embed[static_cast<int64_t>(token_ids[r]) * dim + c];
}

// ------------------------------------------------------------------ RMSNorm

constexpr int kNormThreads = 256;

// StoreAs (kv_codes.cuh): fp32 results, or their bf16 codes for a bf16 GEMM's input.

// 1 / sqrt(mean(xr^2) + eps) over one row of `dim` floats, the same in every thread of the
// block (kNormThreads threads). As the CPU: each step rounded (no FMA).
__device__ float RowInvRms(const float* xr, int dim, float eps) {
  float sum = 0.0f;
  for (int i = static_cast<int>(threadIdx.x); i < dim; i += kNormThreads) sum += xr[i] * xr[i];
  __shared__ float partial[kNormThreads / 32];
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = sum;
  __syncthreads();
  float total = 0.0f;
  for (int w = 0; w < kNormThreads / 32; ++w) total += partial[w];
  return __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(total, static_cast<float>(dim)), eps)));
}

// Per-head RMSNorm in place: block r normalises head r % heads of token r / heads.
__global__ void __launch_bounds__(kNormThreads) HeadRmsNormKernel(float* x, int64_t row_stride, int heads,
                                                                  int head_dim, const float* weight, float eps) {
  const int64_t r = blockIdx.x;
  float* xr = x + (r / heads) * row_stride + (r % heads) * static_cast<int64_t>(head_dim);
  const float inv = RowInvRms(xr, head_dim, eps);
  // Each thread rewrites only the elements it read, after the block-wide sum: in place is safe.
  for (int i = static_cast<int>(threadIdx.x); i < head_dim; i += kNormThreads) {
    xr[i] = __fmul_rn(__fmul_rn(xr[i], inv), weight[i]);
  }
}

template <typename Out>
__global__ void __launch_bounds__(kNormThreads) RmsNormKernel(const float* x, int64_t x_stride,
                                                              const int32_t* rows_index, const float* weight,
                                                              Out* out, int64_t out_stride, int dim, float eps) {
  const int64_t r = blockIdx.x;
  const int64_t src = rows_index != nullptr ? rows_index[r] : r;
  const float* xr = x + src * x_stride;
  // As the CPU: inv = 1 / sqrt(sum / dim + eps); out = x * inv * w, each step rounded (no FMA).
  const float inv = RowInvRms(xr, dim, eps);
  Out* yr = out + r * out_stride;
  for (int i = static_cast<int>(threadIdx.x); i < dim; i += kNormThreads) {
    StoreAs(yr, i, __fmul_rn(__fmul_rn(xr[i], inv), weight[i]));
  }
}

// ------------------------------------------------------------------ RoPE

__global__ void RopeKernel(float* x, int64_t rows, int num_heads, int head_dim, int rotary_dim, int64_t row_stride,
                           const float* cos_sin) {
  const int half = rotary_dim / 2;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t per_row = static_cast<int64_t>(num_heads) * half;
  if (i >= rows * per_row) return;
  const int64_t r = i / per_row;
  const int rem = static_cast<int>(i - r * per_row);
  const int h = rem / half, f = rem % half;
  float* lo = x + r * row_stride + static_cast<int64_t>(h) * head_dim;
  const float c = cos_sin[r * rotary_dim + f];
  const float s = cos_sin[r * rotary_dim + half + f];
  const float a = lo[f], b = lo[half + f];
  // Separately rounded products, as the CPU kernel (compiled without FMA contraction).
  lo[f] = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
  lo[half + f] = __fadd_rn(__fmul_rn(b, c), __fmul_rn(a, s));
}

// ------------------------------------------------------------------ KV write

// One warp per (row, KV head, K|V): lane l handles elements l, l + 32, ... Sides stored as
// int4 are skipped here (WriteInt4ValuesKernel, WriteInt4KeysKernel).
__global__ void WriteKvKernel(KvGeometry geo, std::byte* data, float* scales, const float* k, const float* v,
                              int64_t kv_stride, const int64_t* slot_mapping, int64_t rows) {
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int heads = geo.num_kv_heads;
  if (warp >= rows * heads * 2) return;
  const int which = static_cast<int>(warp % 2);  // 0 = K, 1 = V
  const int64_t rh = warp / 2;
  const int64_t r = rh / heads;
  const int head = static_cast<int>(rh - r * heads);
  const int64_t slot = slot_mapping[r];
  if (slot < 0) return;
  const int64_t block = slot / geo.block_size;
  const int off = static_cast<int>(slot - block * geo.block_size);
  const int hd = geo.head_dim;
  const float* src = (which == 0 ? k : v) + r * kv_stride + static_cast<int64_t>(head) * hd;
  std::byte* row = data + KvRunByteOffset(geo, block, which, head) + off * geo.row_bytes[which];
  const config::KvDtype dtype = geo.dtype[which];
  switch (dtype) {
    case config::KvDtype::kFp32: {
      float* dst = reinterpret_cast<float*>(row);
      for (int i = lane; i < hd; i += 32) dst[i] = src[i];
      return;
    }
    case config::KvDtype::kFp16: {
      uint16_t* dst = reinterpret_cast<uint16_t*>(row);
      for (int i = lane; i < hd; i += 32) dst[i] = FloatToHalfCode(src[i]);
      return;
    }
    case config::KvDtype::kBf16: {
      uint16_t* dst = reinterpret_cast<uint16_t*>(row);
      for (int i = lane; i < hd; i += 32) dst[i] = FloatToBf16Code(src[i]);
      return;
    }
    case config::KvDtype::kFp8E4M3:
    case config::KvDtype::kInt8: {
      float m = 0.0f;
      for (int i = lane; i < hd; i += 32) m = fmaxf(m, fabsf(src[i]));
      for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
      const bool fp8 = dtype == config::KvDtype::kFp8E4M3;
      const float s = __fdiv_rn(m, fp8 ? kFp8E4M3MaxCode : kInt8MaxCode);
      const float inv = s > 0.0f ? __fdiv_rn(1.0f, s) : 0.0f;
      uint8_t* dst = reinterpret_cast<uint8_t*>(row);
      for (int i = lane; i < hd; i += 32) {
        const float x = __fmul_rn(src[i], inv);
        dst[i] = fp8 ? FloatToFp8E4M3Code(x) : FloatToInt8Code(x);
      }
      if (lane == 0) scales[KvRunScaleOffset(geo, block, which, head) + off] = s;
      return;
    }
    case config::KvDtype::kInt4:
      return;
  }
}

// int4 values: one thread per (row, KV head) quantizes the row group by group
// (kv_quant.cc's QuantizeInt4Row; groups of odd size share bytes, so one thread owns a row).
__global__ void WriteInt4ValuesKernel(KvGeometry geo, std::byte* data, float* scales, const float* v,
                                      int64_t kv_stride, const int64_t* slot_mapping, int64_t rows) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * geo.num_kv_heads) return;
  const int64_t r = i / geo.num_kv_heads;
  const int head = static_cast<int>(i - r * geo.num_kv_heads);
  const int64_t slot = slot_mapping[r];
  if (slot < 0) return;
  const int64_t block = slot / geo.block_size;
  const int off = static_cast<int>(slot - block * geo.block_size);
  auto* row = reinterpret_cast<uint8_t*>(data + KvRunByteOffset(geo, block, 1, head) + off * geo.row_bytes[1]);
  float* row_scales = scales + KvRunScaleOffset(geo, block, 1, head) + static_cast<int64_t>(off) * geo.v_groups;
  QuantizeInt4Row(v + r * kv_stride + static_cast<int64_t>(head) * geo.head_dim, geo.head_dim, geo.int4_group, row,
                  row_scales);
}

// int4 keys (kv_write.cc): per KV head, the step's tokens are written a run of consecutive
// slots of one block at a time, so a block's per-channel range widens once per run and a
// prefilled block is encoded once, as on the CPU. One thread per (token, KV head, channel
// pair); only the thread of a run's first token works: it owns that run's byte column. Runs
// of one step never share a block (a sequence's new tokens occupy consecutive slots, and
// blocks shared through the prefix cache are full and never written).
__global__ void WriteInt4KeysKernel(KvGeometry geo, std::byte* data, float* scales, const float* k, int64_t kv_stride,
                                    const int64_t* slot_mapping, int64_t rows) {
  const int pairs = (geo.head_dim + 1) / 2;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * geo.num_kv_heads * pairs) return;
  const int pair = static_cast<int>(i % pairs);
  const int64_t th = i / pairs;
  const int head = static_cast<int>(th % geo.num_kv_heads);
  const int64_t t = th / geo.num_kv_heads;
  const int64_t slot = slot_mapping[t];
  if (slot < 0) return;
  const int64_t block = slot / geo.block_size;
  const int offset = static_cast<int>(slot - block * geo.block_size);
  // A run starts where the previous token is not the previous slot of this block.
  if (t > 0 && offset > 0 && slot_mapping[t - 1] == slot - 1) return;
  int n = 1;
  while (t + n < rows && offset + n < geo.block_size && slot_mapping[t + n] == slot + n) ++n;
  auto* run = reinterpret_cast<uint8_t*>(data + KvRunByteOffset(geo, block, 0, head));
  WriteInt4KeyPair(run, scales + KvRunScaleOffset(geo, block, 0, head), geo.head_dim, offset, n,
                   k + t * kv_stride + static_cast<int64_t>(head) * geo.head_dim, kv_stride, pair);
}

// ------------------------------------------------------------------ SwiGLU, bias, bf16

template <typename Out>
__global__ void SiluMulKernel(const float* gate_up, int64_t rows, int inter, Out* out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * inter) return;
  const int64_t r = i / inter;
  const int64_t c = i - r * inter;
  const float g = gate_up[r * 2 * inter + c];
  const float u = gate_up[r * 2 * inter + inter + c];
  StoreAs(out, i, __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, expf(-g))), u));
}

__global__ void AddBiasKernel(float* y, int64_t y_stride, const float* bias, int64_t rows, int cols) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * cols) return;
  const int64_t r = i / cols;
  const int64_t c = i - r * cols;
  y[r * y_stride + c] = __fadd_rn(y[r * y_stride + c], bias[c]);
}

__global__ void ToBf16Kernel(const float* x, int64_t x_stride, int64_t rows, int cols, uint16_t* out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * cols) return;
  const int64_t r = i / cols;
  const int64_t c = i - r * cols;
  out[i] = FloatToBf16Code(x[r * x_stride + c]);
}

// ------------------------------------------------------------------ greedy sampling

constexpr int kSampleThreads = 256;

__device__ __forceinline__ bool Better(float v, int i, float bv, int bi) { return v > bv || (v == bv && i < bi); }

// Block-wide first maximum (value, then lowest id) of each thread's candidate; every thread
// gets the result. `slot` selects one of two shared buffers so two reductions may follow
// each other without a barrier in between.
__device__ __forceinline__ void BlockBest(float& bv, int& bi, int slot) {
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
    const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
    if (Better(ov, oi, bv, bi)) {
      bv = ov;
      bi = oi;
    }
  }
  __shared__ float wv[2][kSampleThreads / 32];
  __shared__ int wi[2][kSampleThreads / 32];
  if (threadIdx.x % 32 == 0) {
    wv[slot][threadIdx.x / 32] = bv;
    wi[slot][threadIdx.x / 32] = bi;
  }
  __syncthreads();
  bv = wv[slot][0];
  bi = wi[slot][0];
  for (int w = 1; w < kSampleThreads / 32; ++w) {
    if (Better(wv[slot][w], wi[slot][w], bv, bi)) {
      bv = wv[slot][w];
      bi = wi[slot][w];
    }
  }
}

// masks == nullptr or mask_index[row] < 0: every token. Otherwise the argmax runs over the
// tokens whose bit is set in masks[mask_index[row] * mask_words ...] (as model::Sampler's
// allowed mask), while the logprob stays the raw row's log-softmax, shifted by the raw
// maximum as on the CPU.
__global__ void __launch_bounds__(kSampleThreads) GreedyKernel(const float* logits, int vocab,
                                                               const int32_t* mask_index, const uint64_t* masks,
                                                               int mask_words, int32_t* tokens, float* logprobs) {
  const float* row = logits + static_cast<int64_t>(blockIdx.x) * vocab;
  const int mi = mask_index != nullptr ? mask_index[blockIdx.x] : -1;
  const uint64_t* mask = mi >= 0 ? masks + static_cast<int64_t>(mi) * mask_words : nullptr;
  float bv = -INFINITY, rv = -INFINITY;  // best allowed, best overall
  int bi = INT_MAX, ri = INT_MAX;
  for (int i = static_cast<int>(threadIdx.x); i < vocab; i += kSampleThreads) {
    if (Better(row[i], i, rv, ri)) {
      rv = row[i];
      ri = i;
    }
    if (mask != nullptr && !((mask[i >> 6] >> (i & 63)) & 1u)) continue;
    if (Better(row[i], i, bv, bi)) {
      bv = row[i];
      bi = i;
    }
  }
  BlockBest(bv, bi, 0);
  BlockBest(rv, ri, 1);
  __shared__ double ws[kSampleThreads / 32];
  // An all-NaN row, or (masked) no allowed token above -inf: the CPU's max_element lands on
  // id 0 (every candidate compares equal to the first).
  if (bi == INT_MAX || (mask != nullptr && bv == -INFINITY)) bi = 0;
  // log-softmax of the token, the sum in double as the CPU sampler.
  const double mx = static_cast<double>(mask != nullptr ? rv : bv);
  double sum = 0.0;
  for (int i = static_cast<int>(threadIdx.x); i < vocab; i += kSampleThreads) {
    sum += exp(static_cast<double>(row[i]) - mx);
  }
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  if (threadIdx.x % 32 == 0) ws[threadIdx.x / 32] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    double total = 0.0;
    for (int w = 0; w < kSampleThreads / 32; ++w) total += ws[w];
    const double lse = mx + log(total);
    tokens[blockIdx.x] = bi;
    logprobs[blockIdx.x] = static_cast<float>(static_cast<double>(row[bi]) - lse);
  }
}

// ------------------------------------------------------------------ random fill

__device__ __forceinline__ float HashUniform(uint64_t seed, int64_t i) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(i + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<float>(z >> 40) * 0x1.0p-23f - 1.0f;  // [-1, 1)
}

__global__ void RandomF32Kernel(float* out, int64_t n, uint64_t seed, float scale, float shift) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = scale * HashUniform(seed, i) + shift;
}

__global__ void RandomBf16Kernel(uint16_t* out, int64_t n, uint64_t seed, float scale, float shift) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = FloatToBf16Code(scale * HashUniform(seed, i) + shift);
}

}  // namespace

int EmbeddingGather(const float* embed, int dim, const int32_t* token_ids, int64_t rows, float* out, void* stream) {
  if (rows == 0) return 0;
  EmbeddingKernel<<<GridFor(rows * dim, 256), 256, 0, AsStream(stream)>>>(embed, dim, token_ids, rows, out);
  return LastError();
}

namespace {
template <typename Out>
int LaunchRmsNorm(const float* x, int64_t x_stride, const int32_t* rows_index, const float* weight, Out* out,
                  int64_t out_stride, int64_t rows, int dim, float eps, void* stream) {
  if (rows == 0) return 0;
  RmsNormKernel<<<static_cast<unsigned>(rows), kNormThreads, 0, AsStream(stream)>>>(x, x_stride, rows_index, weight,
                                                                                    out, out_stride, dim, eps);
  return LastError();
}
}  // namespace

int RmsNorm(const float* x, int64_t x_stride, const int32_t* rows_index, const float* weight, float* out,
            int64_t out_stride, int64_t rows, int dim, float eps, void* stream) {
  return LaunchRmsNorm(x, x_stride, rows_index, weight, out, out_stride, rows, dim, eps, stream);
}

int RmsNormBf16(const float* x, int64_t x_stride, const int32_t* rows_index, const float* weight, uint16_t* out,
                int64_t out_stride, int64_t rows, int dim, float eps, void* stream) {
  return LaunchRmsNorm(x, x_stride, rows_index, weight, out, out_stride, rows, dim, eps, stream);
}

int HeadRmsNorm(float* x, int64_t rows, int64_t row_stride, int heads, int head_dim, const float* weight, float eps,
                void* stream) {
  if (rows == 0 || heads == 0) return 0;
  HeadRmsNormKernel<<<static_cast<unsigned>(rows * heads), kNormThreads, 0, AsStream(stream)>>>(
      x, row_stride, heads, head_dim, weight, eps);
  return LastError();
}

int ApplyRope(float* x, int64_t rows, int num_heads, int head_dim, int64_t row_stride, const float* cos_sin,
              void* stream, int rotary_dim) {
  if (rotary_dim == 0) rotary_dim = head_dim;
  if (rotary_dim < 2 || rotary_dim > head_dim || rotary_dim % 2 != 0) return static_cast<int>(cudaErrorInvalidValue);
  const int64_t n = rows * num_heads * (rotary_dim / 2);
  if (n == 0) return 0;
  RopeKernel<<<GridFor(n, 256), 256, 0, AsStream(stream)>>>(x, rows, num_heads, head_dim, rotary_dim, row_stride,
                                                            cos_sin);
  return LastError();
}

int WriteKv(const cache::KvLayout& layout, std::byte* layer_data, float* layer_scales, const float* k, const float* v,
            int64_t kv_stride, const int64_t* slot_mapping, int64_t rows, void* stream) {
  if (rows == 0) return 0;
  if (layout.has_scales() && layer_scales == nullptr) return static_cast<int>(cudaErrorInvalidValue);
  const KvGeometry geo = MakeKvGeometry(layout);
  const int64_t threads = rows * layout.num_kv_heads * 2 * 32;
  WriteKvKernel<<<GridFor(threads, 128), 128, 0, AsStream(stream)>>>(geo, layer_data, layer_scales, k, v, kv_stride,
                                                                     slot_mapping, rows);
  if (layout.v_dtype() == config::KvDtype::kInt4) {
    WriteInt4ValuesKernel<<<GridFor(rows * layout.num_kv_heads, 128), 128, 0, AsStream(stream)>>>(
        geo, layer_data, layer_scales, v, kv_stride, slot_mapping, rows);
  }
  if (layout.k_dtype() == config::KvDtype::kInt4) {
    const int64_t n = rows * layout.num_kv_heads * ((layout.head_dim + 1) / 2);
    WriteInt4KeysKernel<<<GridFor(n, 128), 128, 0, AsStream(stream)>>>(geo, layer_data, layer_scales, k, kv_stride,
                                                                       slot_mapping, rows);
  }
  return LastError();
}

namespace {
template <typename Out>
int LaunchSiluMul(const float* gate_up, int64_t rows, int inter, Out* out, void* stream) {
  if (rows == 0) return 0;
  SiluMulKernel<<<GridFor(rows * inter, 256), 256, 0, AsStream(stream)>>>(gate_up, rows, inter, out);
  return LastError();
}
}  // namespace

int SiluMul(const float* gate_up, int64_t rows, int inter, float* out, void* stream) {
  return LaunchSiluMul(gate_up, rows, inter, out, stream);
}

int SiluMulBf16(const float* gate_up, int64_t rows, int inter, uint16_t* out, void* stream) {
  return LaunchSiluMul(gate_up, rows, inter, out, stream);
}

int AddBias(float* y, int64_t y_stride, const float* bias, int64_t rows, int cols, void* stream) {
  if (rows == 0) return 0;
  AddBiasKernel<<<GridFor(rows * cols, 256), 256, 0, AsStream(stream)>>>(y, y_stride, bias, rows, cols);
  return LastError();
}

int ToBf16(const float* x, int64_t x_stride, int64_t rows, int cols, uint16_t* out, void* stream) {
  if (rows == 0) return 0;
  ToBf16Kernel<<<GridFor(rows * cols, 256), 256, 0, AsStream(stream)>>>(x, x_stride, rows, cols, out);
  return LastError();
}

int GreedySample(const float* logits, int64_t rows, int vocab, int32_t* tokens, float* logprobs, void* stream) {
  return GreedySampleMasked(logits, rows, vocab, nullptr, nullptr, 0, tokens, logprobs, stream);
}

int GreedySampleMasked(const float* logits, int64_t rows, int vocab, const int32_t* mask_index,
                       const uint64_t* masks, int mask_words, int32_t* tokens, float* logprobs, void* stream) {
  if (rows == 0) return 0;
  if (mask_index != nullptr && (masks == nullptr || static_cast<int64_t>(mask_words) * 64 < vocab)) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  GreedyKernel<<<static_cast<unsigned>(rows), kSampleThreads, 0, AsStream(stream)>>>(
      logits, vocab, mask_index, masks, mask_words, tokens, logprobs);
  return LastError();
}

int RandomFillF32(float* out, int64_t n, uint64_t seed, float scale, float shift, void* stream) {
  if (n == 0) return 0;
  RandomF32Kernel<<<GridFor(n, 256), 256, 0, AsStream(stream)>>>(out, n, seed, scale, shift);
  return LastError();
}

int RandomFillBf16(uint16_t* out, int64_t n, uint64_t seed, float scale, float shift, void* stream) {
  if (n == 0) return 0;
  RandomBf16Kernel<<<GridFor(n, 256), 256, 0, AsStream(stream)>>>(out, n, seed, scale, shift);
  return LastError();
}

}  // namespace kvserve::kernels::cuda
