#include "tests/support/hf_models/safetensors_writer.h"

#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"

namespace kvserve::testing::hf {
namespace {

using nlohmann::json;

absl::Status WriteOneFile(const std::vector<const TensorBlob*>& tensors, const std::string& path) {
  json header = json::object();
  header["__metadata__"] = {{"format", "pt"}};
  uint64_t offset = 0;
  for (const TensorBlob* t : tensors) {
    header[t->name] = {{"dtype", t->dtype},
                       {"shape", t->shape},
                       {"data_offsets", {offset, offset + t->bytes.size()}}};
    offset += t->bytes.size();
  }
  std::string text = header.dump();
  // The data region starts 8-byte aligned so readers may map tensors in place.
  while ((8 + text.size()) % 8 != 0) text.push_back(' ');
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return absl::InternalError(absl::StrCat("cannot create ", path));
  uint8_t len[8];
  uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(n >> (8 * i));
  out.write(reinterpret_cast<const char*>(len), 8);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  for (const TensorBlob* t : tensors) {
    out.write(reinterpret_cast<const char*>(t->bytes.data()),
              static_cast<std::streamsize>(t->bytes.size()));
  }
  if (!out) return absl::InternalError(absl::StrCat("write failed: ", path));
  return absl::OkStatus();
}

}  // namespace

uint16_t Bf16FromF32(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  // Ties go to the even bf16 mantissa: add 0x7FFF plus the lowest kept bit, then truncate.
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

float F32FromBf16(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

TensorBlob MakeFloatTensor(std::string name, std::vector<int64_t> shape,
                           const std::vector<float>& values, bool bf16) {
  TensorBlob t;
  t.name = std::move(name);
  t.shape = std::move(shape);
  t.dtype = bf16 ? "BF16" : "F32";
  if (bf16) {
    t.bytes.resize(values.size() * 2);
    for (size_t i = 0; i < values.size(); ++i) {
      const uint16_t b = Bf16FromF32(values[i]);
      t.bytes[2 * i] = static_cast<uint8_t>(b);
      t.bytes[2 * i + 1] = static_cast<uint8_t>(b >> 8);
    }
  } else {
    t.bytes.resize(values.size() * 4);
    std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
  }
  return t;
}

absl::Status WriteSafetensors(const std::vector<TensorBlob>& tensors, const std::string& dir,
                              int num_shards) {
  if (num_shards <= 1) {
    std::vector<const TensorBlob*> all;
    for (const TensorBlob& t : tensors) all.push_back(&t);
    return WriteOneFile(all, dir + "/model.safetensors");
  }
  const size_t n = tensors.size();
  json weight_map = json::object();
  uint64_t total = 0;
  for (int s = 0; s < num_shards; ++s) {
    const size_t begin = n * static_cast<size_t>(s) / static_cast<size_t>(num_shards);
    const size_t end = n * static_cast<size_t>(s + 1) / static_cast<size_t>(num_shards);
    const std::string file = absl::StrFormat("model-%05d-of-%05d.safetensors", s + 1, num_shards);
    std::vector<const TensorBlob*> part;
    for (size_t i = begin; i < end; ++i) {
      part.push_back(&tensors[i]);
      weight_map[tensors[i].name] = file;
      total += tensors[i].bytes.size();
    }
    if (auto st = WriteOneFile(part, dir + "/" + file); !st.ok()) return st;
  }
  json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  std::ofstream out(dir + "/model.safetensors.index.json", std::ios::trunc);
  out << index.dump(2) << "\n";
  if (!out)
    return absl::InternalError(
        absl::StrCat("write failed: ", dir, "/model.safetensors.index.json"));
  return absl::OkStatus();
}

}  // namespace kvserve::testing::hf
