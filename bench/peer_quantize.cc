// llama.cpp's own quantizer, run from the libllama that node-llama-cpp ships: the second,
// independent maker of GGUF files for the agreement test and the benchmarks (issue 37). Our
// export-gguf writes an F16 file; this turns it into llama.cpp's Q8_0, Q4_K_M, ... exactly as
// `llama-quantize` would (its default parameters: the preset's per-tensor types and fallbacks).
//
//   peer_quantize --lib .../libllama.v0.4.0.so --in MODEL-F16.gguf --out MODEL-Q4_K_M.gguf
//                 --type Q4_K_M [--threads 2] [--requantize]
//
// --requantize lets the input be quantized already: `--type F32 --requantize` writes the
// weights llama.cpp dequantizes from a Q4_K_M file, the exact model that file stands for.
//
// The library is opened at run time (dlopen) so kvserve never links llama.cpp. Only two
// exported C functions are called, with the public ABI of llama.h's
// llama_model_quantize_params: it begins `int32_t nthread; enum llama_ftype ftype; ...`.
// The defaults come from llama_model_quantize_default_params() (returned in memory, the
// SysV x86-64 convention for a struct this size), so fields we do not set keep llama.cpp's
// values whatever the struct's tail holds in a later release; kBlobBytes is well over its
// size (about 88 bytes in the release node-llama-cpp 3.21.1 ships).
#include <dlfcn.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

constexpr size_t kBlobBytes = 512;
struct alignas(16) ParamsBlob {
  unsigned char bytes[kBlobBytes];
};
using DefaultParamsFn = ParamsBlob (*)();
using QuantizeFn = uint32_t (*)(const char*, const char*, const ParamsBlob*);

// llama.h's enum llama_ftype values for the presets the benchmarks use.
struct Ftype {
  const char* name;
  int32_t value;
};
constexpr Ftype kFtypes[] = {{"F32", 0},     {"F16", 1},     {"Q4_0", 2},    {"Q8_0", 7},
                             {"Q4_K_M", 15}, {"Q5_K_M", 17}, {"Q6_K", 18},   {"IQ4_NL", 25},
                             {"IQ4_XS", 30}, {"Q4_K_S", 14}, {"Q3_K_M", 12}, {"Q2_K", 10},
                             {"Q5_0", 8}};

int Usage(const char* why) {
  std::fprintf(
      stderr,
      "peer_quantize: %s\nusage: peer_quantize --lib LIBLLAMA.so --in F16.gguf --out OUT.gguf "
      "--type TYPE [--threads N] [--requantize]\ntypes:",
      why);
  for (const Ftype& f : kFtypes) std::fprintf(stderr, " %s", f.name);
  std::fprintf(stderr, "\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string lib, in, out, type;
  int32_t threads = 2;
  bool requantize = false;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (k == "--requantize") {
      requantize = true;
      continue;
    }
    if (i + 1 >= argc) return Usage(("missing value after " + k).c_str());
    const char* v = argv[++i];
    if (k == "--lib") {
      lib = v;
    } else if (k == "--in") {
      in = v;
    } else if (k == "--out") {
      out = v;
    } else if (k == "--type") {
      type = v;
    } else if (k == "--threads") {
      threads = std::atoi(v);
    } else {
      return Usage(("unknown flag " + k).c_str());
    }
  }
  if (lib.empty() || in.empty() || out.empty() || type.empty())
    return Usage("--lib, --in, --out and --type are required");
  const Ftype* ftype = nullptr;
  for (const Ftype& f : kFtypes) {
    if (type == f.name) ftype = &f;
  }
  if (ftype == nullptr) return Usage(("unknown type " + type).c_str());
  void* handle = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    std::fprintf(stderr, "peer_quantize: cannot load %s: %s\n", lib.c_str(), dlerror());
    return 1;
  }
  auto defaults =
      reinterpret_cast<DefaultParamsFn>(dlsym(handle, "llama_model_quantize_default_params"));
  auto quantize = reinterpret_cast<QuantizeFn>(dlsym(handle, "llama_model_quantize"));
  if (defaults == nullptr || quantize == nullptr) {
    std::fprintf(stderr, "peer_quantize: %s lacks llama_model_quantize(_default_params)\n",
                 lib.c_str());
    return 1;
  }
  ParamsBlob params = defaults();
  std::memcpy(params.bytes, &threads, sizeof threads);
  std::memcpy(params.bytes + sizeof threads, &ftype->value, sizeof ftype->value);
  // bool allow_requantize follows nthread, ftype, output_tensor_type, token_embedding_type.
  if (requantize) params.bytes[16] = 1;
  const uint32_t rc = quantize(in.c_str(), out.c_str(), &params);
  if (rc != 0) {
    std::fprintf(stderr, "peer_quantize: llama_model_quantize(%s -> %s, %s) returned %u\n",
                 in.c_str(), out.c_str(), type.c_str(), rc);
    return 1;
  }
  std::printf("peer_quantize: %s -> %s (%s)\n", in.c_str(), out.c_str(), type.c_str());
  return 0;
}
