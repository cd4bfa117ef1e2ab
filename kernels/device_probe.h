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
  int device = 0;               // the device index probed (after CUDA_VISIBLE_DEVICES)
  std::string device_name;      // of that device
  int compute_major = 0;
  int compute_minor = 0;
  uint64_t total_bytes = 0;
  uint64_t free_bytes = 0;
  int runtime_version = 0;
  int driver_version = 0;
  std::string reason;           // why no device is usable, when !usable()

  bool usable() const { return device >= 0 && device < device_count; }
};

// Never throws and never aborts, also without a driver (libcuda is loaded lazily).
// `device` indexes the devices this process sees (CUDA_VISIBLE_DEVICES applies): engine.device.
DeviceProbe ProbeCudaDevice(int device = 0);

}  // namespace kvserve::kernels
