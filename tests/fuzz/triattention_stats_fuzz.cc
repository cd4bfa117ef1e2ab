// libFuzzer target: the TriAttention statistics file (binary header, per-head query centres
// and norms) on arbitrary bytes. Every input gives statistics that pass ValidateStats or a
// clean error; sizes in a corrupt header must never drive an allocation or a read past the end.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "compression/triattention_stats.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto s = kvserve::compression::ParseStats(bytes, "stats.bin");
  if (s.ok() && !kvserve::compression::ValidateStats(*s).ok()) __builtin_trap();
  return 0;
}
