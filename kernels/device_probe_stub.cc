#include "kernels/device_probe.h"

namespace kvserve::kernels {

DeviceProbe ProbeCudaDevice(int device) {
  DeviceProbe p;
  p.device = device;
  p.reason = "this binary was built without CUDA (KVSERVE_CUDA=OFF or no nvcc at build time)";
  return p;
}

}  // namespace kvserve::kernels
