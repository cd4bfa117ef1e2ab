// gguf_write_random OUT.gguf [--type Q4_K_M] [--shape llama3-8b|small] [--tokenizer tokenizer.json]
// Writes a random-weight Llama GGUF (random_gguf.h); llama3-8b is Llama-3.1-8B's exact shape.
#include <cstdio>
#include <cstring>
#include <string>

#include "tests/support/gguf/random_gguf.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: gguf_write_random OUT.gguf [--type T] [--shape llama3-8b|small] "
                 "[--tokenizer FILE]\n");
    return 2;
  }
  kvserve::testing::RandomGgufSpec spec;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--type") {
      spec.type = value;
    } else if (flag == "--tokenizer") {
      spec.tokenizer_json = value;
    } else if (flag == "--shape" && value == "llama3-8b") {
      spec.hidden = 4096, spec.intermediate = 14336, spec.layers = 32, spec.heads = 32,
      spec.kv_heads = 8;
      spec.head_dim = 128, spec.vocab = 128256, spec.context = 131072;
    } else if (flag != "--shape" || value != "small") {
      std::fprintf(stderr, "gguf_write_random: unknown flag %s %s\n", flag.c_str(), value.c_str());
      return 2;
    }
  }
  auto bytes = kvserve::testing::WriteRandomGguf(spec, argv[1]);
  if (!bytes.ok()) {
    std::fprintf(stderr, "gguf_write_random: %s\n", std::string(bytes.status().message()).c_str());
    return 1;
  }
  std::printf("%s: %llu bytes\n", argv[1], static_cast<unsigned long long>(*bytes));
  return 0;
}
