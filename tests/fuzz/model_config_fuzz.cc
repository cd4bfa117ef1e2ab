// libFuzzer target: a model's config.json (Llama, Mistral, Qwen2 fields, RoPE scaling) on
// arbitrary bytes. Every input gives a config or a clean InvalidArgument; nothing may crash.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "model/model_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto c = kvserve::model::ParseModelConfig(text, "config.json");
  if (!c.ok() && c.status().code() != absl::StatusCode::kInvalidArgument) __builtin_trap();
  return 0;
}
