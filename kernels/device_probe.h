// Finds out whether a CUDA device is usable. Plain C++ header: no CUDA types, so
// every target may include it. Built from device_probe.cu when the CUDA toolkit is
// present and from device_probe_stub.cc otherwise (same behaviour: "no device").
#pragma once

#include <cstdint>
#include <string>

namespace kvserve::kernels {

struct DeviceProbe {
  bool compiled_with_cuda = false;
  int device_count = 0;
  std::string device_name;      // of device 0
  int compute_major = 0;
  int compute_minor = 0;
  uint64_t total_bytes = 0;
  uint64_t free_bytes = 0;
  int runtime_version = 0;
  int driver_version = 0;
  std::string reason;           // why no device is usable, when device_count == 0

  bool usable() const { return device_count > 0; }
};

// Never throws and never aborts, also without a driver (libcuda is loaded lazily).
DeviceProbe ProbeCudaDevice();

}  // namespace kvserve::kernels
