#include "cuda/device_array.h"

#include <cuda_runtime.h>

#include <algorithm>

namespace kvserve::cuda {

void* DeviceAlloc(size_t bytes, bool zero) {
  void* p = nullptr;
  if (cudaMalloc(&p, bytes) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  if (zero && cudaMemset(p, 0, bytes) != cudaSuccess) {
    cudaFree(p);
    return nullptr;
  }
  return p;
}

void DeviceFree(void* p) {
  if (p != nullptr) cudaFree(p);
}

bool CopyToDevice(void* dst, const void* src, size_t bytes) {
  return cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice) == cudaSuccess;
}

bool CopyToHost(void* dst, const void* src, size_t bytes) {
  // Whatever stream wrote `src`, its work is done before the read.
  if (cudaDeviceSynchronize() != cudaSuccess) return false;
  return cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost) == cudaSuccess;
}

namespace {

std::vector<int32_t> RowSeq(std::span<const int32_t> seq_starts) {
  std::vector<int32_t> rows;
  for (size_t s = 0; s + 1 < seq_starts.size(); ++s) {
    for (int32_t r = seq_starts[s]; r < seq_starts[s + 1]; ++r) rows.push_back(static_cast<int32_t>(s));
  }
  return rows;
}

}  // namespace

UploadedPagedSeqs::UploadedPagedSeqs(std::span<const int32_t> seq_starts, std::span<const int32_t> kv_lens,
                                     std::span<const int32_t> block_table_offsets,
                                     std::span<const int32_t> block_tables)
    : starts_(seq_starts),
      lens_(kv_lens),
      offsets_(block_table_offsets),
      tables_(block_tables),
      row_seq_(RowSeq(seq_starts)) {
  view_.num_seqs = seq_starts.empty() ? 0 : static_cast<int>(seq_starts.size()) - 1;
  view_.num_rows = seq_starts.empty() ? 0 : seq_starts.back();
  view_.max_kv_len = kv_lens.empty() ? 0 : *std::max_element(kv_lens.begin(), kv_lens.end());
  view_.seq_starts = starts_.get();
  view_.kv_lens = lens_.get();
  view_.block_table_offsets = offsets_.get();
  view_.block_tables = tables_.get();
  view_.row_seq = row_seq_.get();
}

}  // namespace kvserve::cuda
