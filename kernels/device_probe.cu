#include <cuda_runtime.h>

#include <string>

#include "kernels/device_probe.h"

namespace kvserve::kernels {

DeviceProbe ProbeCudaDevice(int device) {
  DeviceProbe p;
  p.device = device;
  p.compiled_with_cuda = true;
  cudaRuntimeGetVersion(&p.runtime_version);
  cudaDriverGetVersion(&p.driver_version);  // 0 when no driver is installed
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    // Without libcuda this is cudaErrorInsufficientDriver (35), not cudaErrorNoDevice:
    // any error means "no usable GPU".
    p.reason = std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err);
    cudaGetLastError();
    return p;
  }
  if (count == 0) {
    p.reason = "no CUDA device found";
    return p;
  }
  if (device < 0 || device >= count) {
    p.device_count = count;
    p.reason = std::string("engine.device=") + std::to_string(device) + " but this process sees " +
               std::to_string(count) + " CUDA device(s) (CUDA_VISIBLE_DEVICES applies)";
    return p;
  }
  cudaDeviceProp prop{};
  err = cudaGetDeviceProperties(&prop, device);
  if (err != cudaSuccess) {
    p.reason = std::string("cudaGetDeviceProperties: ") + cudaGetErrorString(err);
    cudaGetLastError();
    return p;
  }
  size_t free_b = 0, total_b = 0;
  if (cudaSetDevice(device) == cudaSuccess && cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) {
    p.free_bytes = free_b;
    p.total_bytes = total_b;
  } else {
    cudaGetLastError();
  }
  p.device_count = count;
  p.device_name = prop.name;
  p.compute_major = prop.major;
  p.compute_minor = prop.minor;
  return p;
}

}  // namespace kvserve::kernels
