// Helpers of the gguf tests: a per-test temp directory, and RawGguf, a GGUF byte builder
// written from the format description alone (reference/quantized-weights.md §1.1), with no
// code shared with gguf/. Tests build well-formed files with it to check the writer's bytes,
// and malformed ones (one field wrong at a time) to check the reader's refusals.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace kvserve::gguf::testing {

class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string leaf = "gguf_" + std::to_string(::getpid()) + "_" +
                       (info ? std::string(info->test_suite_name()) + "." + info->name() : "x");
    std::replace(leaf.begin(), leaf.end(), '/', '_');
    path_ = ::testing::TempDir() + "/" + leaf;
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline std::vector<std::byte> RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::byte> out(n);
  for (auto& b : out) b = static_cast<std::byte>(rng() & 0xff);
  return out;
}

// Little-endian appenders.
inline void PutRaw(std::string* s, const void* p, size_t n) {
  s->append(static_cast<const char*>(p), n);
}
template <typename T>
void Put(std::string* s, T x) {
  PutRaw(s, &x, sizeof(T));
}
inline void PutString(std::string* s, const std::string& v) {
  Put<uint64_t>(s, v.size());
  s->append(v);
}

// GGUF value type ids, from the specification (not from gguf/).
enum RawType : uint32_t {
  kValU8 = 0,
  kValI8 = 1,
  kValU16 = 2,
  kValI16 = 3,
  kValU32 = 4,
  kValI32 = 5,
  kValF32 = 6,
  kValBool = 7,
  kValString = 8,
  kValArray = 9,
  kValU64 = 10,
  kValI64 = 11,
  kValF64 = 12,
};

// One key/value entry: key, type id, and the value's bytes as given.
inline std::string RawKv(const std::string& key, uint32_t type, const std::string& value_bytes) {
  std::string s;
  PutString(&s, key);
  Put<uint32_t>(&s, type);
  s += value_bytes;
  return s;
}
inline std::string RawKvU32(const std::string& key, uint32_t v) {
  std::string b;
  Put(&b, v);
  return RawKv(key, kValU32, b);
}
inline std::string RawKvString(const std::string& key, const std::string& v) {
  std::string b;
  PutString(&b, v);
  return RawKv(key, kValString, b);
}

// ggml type ids and block sizes from the reference's tables (§1.2, §2.1).
struct RawBlock {
  uint32_t id;
  int64_t elements;
  int64_t bytes;
};
constexpr RawBlock kRawF32{0, 1, 4}, kRawF16{1, 1, 2}, kRawQ4_0{2, 32, 18}, kRawQ4_1{3, 32, 20},
    kRawQ5_0{6, 32, 22}, kRawQ5_1{7, 32, 24}, kRawQ8_0{8, 32, 34}, kRawQ2_K{10, 256, 84},
    kRawQ3_K{11, 256, 110}, kRawQ4_K{12, 256, 144}, kRawQ5_K{13, 256, 176}, kRawQ6_K{14, 256, 210},
    kRawIQ4_NL{20, 32, 18}, kRawIQ4_XS{23, 256, 136}, kRawBF16{30, 1, 2}, kRawMXFP4{39, 32, 17};

inline uint64_t RawBytes(const RawBlock& b, const std::vector<int64_t>& ne) {
  uint64_t n = static_cast<uint64_t>(ne[0] / b.elements * b.bytes);
  for (size_t d = 1; d < ne.size(); ++d) n *= static_cast<uint64_t>(ne[d]);
  return n;
}

struct RawTensor {
  std::string name;
  std::vector<int64_t> ne;
  uint32_t type = 0;
  uint64_t offset = 0;
  uint64_t data_bytes = 0;  // written at data_start + offset (pattern bytes)
};

// A whole file; every field can be set wrong on purpose.
struct RawSpec {
  std::string magic = "GGUF";
  uint32_t version = 3;
  std::optional<uint64_t> n_tensors;  // default: tensors.size()
  std::optional<uint64_t> n_kv;       // default: kvs.size()
  std::vector<std::string> kvs;       // RawKv entries
  std::vector<RawTensor> tensors;
  uint64_t alignment = 32;  // padding used when laying out (not written as a key)
  uint64_t trailing = 0;    // extra bytes after the data region
};

inline uint64_t RawAlign(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

// The file's bytes. The data region is as long as the furthest tensor end, padded.
inline std::string BuildRaw(const RawSpec& spec) {
  std::string s = spec.magic;
  Put<uint32_t>(&s, spec.version);
  Put<uint64_t>(&s, spec.n_tensors.value_or(spec.tensors.size()));
  Put<uint64_t>(&s, spec.n_kv.value_or(spec.kvs.size()));
  for (const auto& kv : spec.kvs) s += kv;
  for (const RawTensor& t : spec.tensors) {
    PutString(&s, t.name);
    Put<uint32_t>(&s, static_cast<uint32_t>(t.ne.size()));
    for (int64_t d : t.ne) Put<int64_t>(&s, d);
    Put<uint32_t>(&s, t.type);
    Put<uint64_t>(&s, t.offset);
  }
  s.resize(RawAlign(s.size(), spec.alignment), '\0');
  const size_t data_start = s.size();
  uint64_t end = 0;
  for (const auto& t : spec.tensors) end = std::max(end, t.offset + t.data_bytes);
  s.resize(data_start + RawAlign(end, spec.alignment), '\0');
  for (size_t i = 0; i < spec.tensors.size(); ++i) {
    const RawTensor& t = spec.tensors[i];
    for (uint64_t j = 0; j < t.data_bytes; ++j)
      s[data_start + t.offset + j] = static_cast<char>(i * 31 + j);
  }
  s.append(spec.trailing, 'x');
  return s;
}

// A valid two-tensor file: "a" F32 [8, 2] (64 bytes at 0), "b" Q8_0 [64, 3] (204 bytes at 64).
inline RawSpec ValidSpec() {
  RawSpec spec;
  spec.kvs = {RawKvString("general.architecture", "llama"), RawKvU32("llama.block_count", 2)};
  spec.tensors = {{"a", {8, 2}, kRawF32.id, 0, 64}, {"b", {64, 3}, kRawQ8_0.id, 64, 204}};
  return spec;
}

inline std::span<const std::byte> AsBytes(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

}  // namespace kvserve::gguf::testing
