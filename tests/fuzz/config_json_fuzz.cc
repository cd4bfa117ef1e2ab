// libFuzzer target: kvserve's config loader (the JSON config file path) on arbitrary bytes.
// Every input either applies or gives a clean InvalidArgument naming the field; the result is
// then validated. Nothing may crash, leak or trip a sanitizer.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "config/config_loader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  kvserve::config::Config cfg;
  const absl::Status st = kvserve::config::ApplyJson(text, "fuzz.json", cfg);
  if (!st.ok() && st.code() != absl::StatusCode::kInvalidArgument) __builtin_trap();
  if (st.ok()) (void)kvserve::config::Validate(cfg);
  return 0;
}
