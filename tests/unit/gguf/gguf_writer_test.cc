// GgufWriter: its bytes equal a file built by hand from the format description, every value
// type and array round-trips through the reader, tensors of several block types come back
// byte for byte at aligned offsets (alignment 32 and 64), and what it cannot write is
// refused before anything is written.
#include "gguf/gguf_writer.h"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "gguf/gguf_file.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/gguf/gguf_test_util.h"

namespace kvserve::gguf {
namespace {

using ::testing::HasSubstr;
using namespace kvserve::gguf::testing;  // NOLINT
using quant::BlockType;

// RawGguf's data pattern: byte j of tensor i is (i * 31 + j) mod 256.
std::vector<std::byte> Pattern(size_t i, size_t n) {
  std::vector<std::byte> out(n);
  for (size_t j = 0; j < n; ++j) out[j] = static_cast<std::byte>((i * 31 + j) & 0xff);
  return out;
}

TEST(GgufWriter, BytesEqualAHandBuiltFile) {
  TempDir dir;
  GgufWriter w;
  w.SetString("general.architecture", "llama");
  w.SetU32("llama.block_count", 2);
  w.AddTensor("a", BlockType::kF32, {8, 2}, Pattern(0, 64));
  w.AddTensor("b", BlockType::kQ8_0, {64, 3}, Pattern(1, 204));
  auto paths = w.Write(dir.File("m.gguf"));
  ASSERT_TRUE(paths.ok()) << paths.status();
  ASSERT_EQ(*paths, std::vector<std::string>{dir.File("m.gguf")});
  const std::string expected = BuildRaw(ValidSpec());
  const std::string got = ReadFile(dir.File("m.gguf"));
  ASSERT_EQ(got.size(), expected.size());
  EXPECT_TRUE(got == expected);
}

TEST(GgufWriter, MetadataKeepsInsertionOrderAndSetReplacesInPlace) {
  TempDir dir;
  GgufWriter w;
  w.SetU32("zeta", 1);
  w.SetU32("alpha", 2);
  w.SetU32("zeta", 3);  // replaced, stays first
  ASSERT_TRUE(w.Write(dir.File("m.gguf")).ok());
  const std::string bytes = ReadFile(dir.File("m.gguf"));
  const size_t zeta = bytes.find("zeta");
  const size_t alpha = bytes.find("alpha");
  ASSERT_NE(zeta, std::string::npos);
  ASSERT_NE(alpha, std::string::npos);
  EXPECT_LT(zeta, alpha);
  EXPECT_EQ(bytes.find("zeta", zeta + 1), std::string::npos);  // written once
  uint32_t v = 0;
  std::memcpy(&v, bytes.data() + zeta + 4 + 4, 4);  // key, u32 type id, value
  EXPECT_EQ(v, 3u);
}

Value Scalar(ValueType t, decltype(Value::v) v) { return Value{t, ValueType::kU32, std::move(v)}; }
Value Array(ValueType e, decltype(Value::v) v) { return Value{ValueType::kArray, e, std::move(v)}; }

TEST(GgufWriter, EveryValueTypeRoundTrips) {
  TempDir dir;
  const std::vector<std::pair<std::string, Value>> values = {
      {"u8", Scalar(ValueType::kU8, uint64_t{255})},
      {"i8", Scalar(ValueType::kI8, int64_t{-128})},
      {"u16", Scalar(ValueType::kU16, uint64_t{65535})},
      {"i16", Scalar(ValueType::kI16, int64_t{-32768})},
      {"u32", Scalar(ValueType::kU32, uint64_t{4294967295u})},
      {"i32", Scalar(ValueType::kI32, int64_t{std::numeric_limits<int32_t>::min()})},
      {"u64", Scalar(ValueType::kU64, std::numeric_limits<uint64_t>::max())},
      {"i64", Scalar(ValueType::kI64, std::numeric_limits<int64_t>::min())},
      {"f32", Scalar(ValueType::kF32, double{0.1f})},
      {"f64", Scalar(ValueType::kF64, 0.1)},
      {"bool_t", Scalar(ValueType::kBool, true)},
      {"bool_f", Scalar(ValueType::kBool, false)},
      {"str", Scalar(ValueType::kString, std::string("héllo\n\0x", 9))},
      {"str_empty", Scalar(ValueType::kString, std::string())},
      {"a_u8", Array(ValueType::kU8, std::vector<uint64_t>{0, 1, 255})},
      {"a_i8", Array(ValueType::kI8, std::vector<int64_t>{-128, 0, 127})},
      {"a_u16", Array(ValueType::kU16, std::vector<uint64_t>{0, 65535})},
      {"a_i16", Array(ValueType::kI16, std::vector<int64_t>{-32768, 32767})},
      {"a_u32", Array(ValueType::kU32, std::vector<uint64_t>{7, 4294967295u})},
      {"a_i32", Array(ValueType::kI32, std::vector<int64_t>{-1, 2147483647})},
      {"a_u64",
       Array(ValueType::kU64, std::vector<uint64_t>{std::numeric_limits<uint64_t>::max()})},
      {"a_i64",
       Array(ValueType::kI64, std::vector<int64_t>{std::numeric_limits<int64_t>::min(), 5})},
      {"a_f32", Array(ValueType::kF32, std::vector<double>{double{1.5f}, double{-0.1f}})},
      {"a_f64", Array(ValueType::kF64, std::vector<double>{1e300, -0.1})},
      {"a_bool", Array(ValueType::kBool, std::vector<bool>{true, false, true})},
      {"a_str", Array(ValueType::kString, std::vector<std::string>{"", "▁the", "<0x0A>"})},
      {"a_empty", Array(ValueType::kI32, std::vector<int64_t>{})},
  };
  GgufWriter w;
  for (const auto& [k, v] : values) w.Set(k, v);
  ASSERT_TRUE(w.Write(dir.File("m.gguf")).ok());
  auto f = GgufFile::Open(dir.File("m.gguf"));
  ASSERT_TRUE(f.ok()) << f.status();
  const auto& md = (*f)->layout().metadata;
  EXPECT_EQ(md.size(), values.size());
  for (const auto& [k, v] : values) {
    SCOPED_TRACE(k);
    auto it = md.find(k);
    ASSERT_NE(it, md.end());
    EXPECT_EQ(it->second.type, v.type);
    if (v.type == ValueType::kArray) {
      EXPECT_EQ(it->second.array_type, v.array_type);
    }
    EXPECT_TRUE(it->second.v == v.v);
  }
  // The f32 value is stored as 4 bytes: 0.1 read back is 0.1f, not 0.1.
  EXPECT_NE(std::get<double>(md.at("f32").v), 0.1);
}

TEST(GgufWriter, ConvenienceSetters) {
  TempDir dir;
  GgufWriter w;
  w.SetString("s", "x");
  w.SetU32("u", 7);
  w.SetI32("i", -7);
  w.SetF32("f", 0.5f);
  w.SetBool("b", true);
  w.SetStrings("ss", {"a", "b"});
  w.SetF32s("ff", {0.25f, -1.0f});
  w.SetI32s("ii", {1, -2});
  ASSERT_TRUE(w.Write(dir.File("m.gguf")).ok());
  auto f = GgufFile::Open(dir.File("m.gguf"));
  ASSERT_TRUE(f.ok()) << f.status();
  const auto& md = (*f)->layout().metadata;
  EXPECT_EQ(md.at("s").type, ValueType::kString);
  EXPECT_EQ(md.at("u").type, ValueType::kU32);
  EXPECT_EQ(std::get<uint64_t>(md.at("u").v), 7u);
  EXPECT_EQ(md.at("i").type, ValueType::kI32);
  EXPECT_EQ(std::get<int64_t>(md.at("i").v), -7);
  EXPECT_EQ(md.at("f").type, ValueType::kF32);
  EXPECT_EQ(std::get<double>(md.at("f").v), 0.5);
  EXPECT_EQ(std::get<bool>(md.at("b").v), true);
  EXPECT_EQ(md.at("ss").array_type, ValueType::kString);
  EXPECT_EQ(md.at("ff").array_type, ValueType::kF32);
  EXPECT_EQ(std::get<std::vector<double>>(md.at("ff").v), (std::vector<double>{0.25, -1.0}));
  EXPECT_EQ(md.at("ii").array_type, ValueType::kI32);
  EXPECT_EQ(std::get<std::vector<int64_t>>(md.at("ii").v), (std::vector<int64_t>{1, -2}));
}

struct TensorCase {
  std::string name;
  BlockType type;
  RawBlock block;
  std::vector<int64_t> ne;
};

class GgufWriterAlignment : public ::testing::TestWithParam<uint64_t> {};

TEST_P(GgufWriterAlignment, TensorsOfSeveralBlockTypesComeBackExactly) {
  const uint64_t alignment = GetParam();
  // Every type kvserve runs (issue 37's list), with shapes of 1 to 4 dimensions.
  const std::vector<TensorCase> cases = {
      {"f32", BlockType::kF32, kRawF32, {3, 5}},
      {"f16", BlockType::kF16, kRawF16, {7}},
      {"bf16", BlockType::kBF16, kRawBF16, {5, 2}},
      {"q4_0", BlockType::kQ4_0, kRawQ4_0, {64, 3}},
      {"q4_1", BlockType::kQ4_1, kRawQ4_1, {32, 2, 2}},
      {"q5_0", BlockType::kQ5_0, kRawQ5_0, {96}},
      {"q5_1", BlockType::kQ5_1, kRawQ5_1, {32, 3}},
      {"q8_0", BlockType::kQ8_0, kRawQ8_0, {32, 1, 2}},
      {"q2_k", BlockType::kQ2_K, kRawQ2_K, {256, 3}},
      {"q3_k", BlockType::kQ3_K, kRawQ3_K, {512}},
      {"q4_k", BlockType::kQ4_K, kRawQ4_K, {256, 2}},
      {"q5_k", BlockType::kQ5_K, kRawQ5_K, {256, 1, 3}},
      {"q6_k", BlockType::kQ6_K, kRawQ6_K, {512, 1, 1, 2}},
      {"iq4_nl", BlockType::kIQ4_NL, kRawIQ4_NL, {32, 5}},
      {"iq4_xs", BlockType::kIQ4_XS, kRawIQ4_XS, {256, 2}},
      {"mxfp4", BlockType::kMXFP4, kRawMXFP4, {32, 3}},
      {"empty", BlockType::kQ8_0, kRawQ8_0, {64, 0}},
  };
  for (const auto& c : cases) {  // the spec's sizes and the table's agree
    EXPECT_EQ(static_cast<uint32_t>(c.type), c.block.id) << c.name;
    EXPECT_EQ(quant::Traits(c.type).block_elements, c.block.elements) << c.name;
    EXPECT_EQ(quant::Traits(c.type).block_bytes, c.block.bytes) << c.name;
  }
  TempDir dir;
  GgufWriter w(alignment);
  std::vector<std::vector<std::byte>> data;
  for (size_t i = 0; i < cases.size(); ++i) {
    data.push_back(
        RandomBytes(RawBytes(cases[i].block, cases[i].ne), static_cast<uint32_t>(i + 1)));
    w.AddTensor(cases[i].name, cases[i].type, cases[i].ne, data.back());
  }
  ASSERT_TRUE(w.Write(dir.File("m.gguf")).ok());
  auto f = GgufFile::Open(dir.File("m.gguf"));
  ASSERT_TRUE(f.ok()) << f.status();
  const GgufLayout& layout = (*f)->layout();
  EXPECT_EQ(layout.alignment, alignment);
  EXPECT_EQ(layout.metadata.count("general.alignment"), alignment == 32 ? 0u : 1u);
  EXPECT_EQ(layout.data_offset % alignment, 0u);
  ASSERT_EQ(layout.tensors.size(), cases.size());
  uint64_t offset = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(cases[i].name);
    const TensorInfo& t = layout.tensors[i];
    EXPECT_EQ(t.name, cases[i].name);
    EXPECT_EQ(t.type, cases[i].type);
    EXPECT_EQ(t.ne, cases[i].ne);
    EXPECT_EQ(t.offset, offset);
    EXPECT_EQ(t.offset % alignment, 0u);
    EXPECT_EQ(t.bytes, data[i].size());
    const auto bytes = (*f)->Bytes(t);
    ASSERT_EQ(bytes.size(), data[i].size());
    EXPECT_TRUE(std::equal(bytes.begin(), bytes.end(), data[i].begin()));
    EXPECT_EQ(reinterpret_cast<uintptr_t>(bytes.data()) % alignment,
              0u);  // the map is page-aligned
    (*f)->WillNeed(t);
    (*f)->Release(t);
    EXPECT_TRUE(std::equal(bytes.begin(), bytes.end(), data[i].begin()));  // faulted back in
    offset = RawAlign(offset + data[i].size(), alignment);
  }
  EXPECT_EQ((*f)->size(), layout.data_offset + offset);
}

INSTANTIATE_TEST_SUITE_P(Alignments, GgufWriterAlignment, ::testing::Values(32, 64));

TEST(GgufWriter, RefusesWhatItCannotWrite) {
  TempDir dir;
  const std::string path = dir.File("m.gguf");
  auto refused = [&](const GgufWriter& w, std::vector<std::string> parts) {
    auto st = w.Write(path);
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.status().code(), absl::StatusCode::kInvalidArgument);
    for (const auto& p : parts) EXPECT_THAT(std::string(st.status().message()), HasSubstr(p));
    EXPECT_FALSE(std::filesystem::exists(path));  // nothing written
  };
  {
    GgufWriter w;
    w.AddTensor("t", BlockType::kQ8_0, {64, 2}, RandomBytes(100, 1));
    refused(w, {"tensor \"t\"", "holds 100 bytes", "needs 136"});
  }
  {
    GgufWriter w;
    w.AddTensor("t", BlockType::kQ4_K, {128, 2}, RandomBytes(144, 1));
    refused(w, {"tensor \"t\"", "Q4_K"});
  }
  {
    GgufWriter w;
    w.AddTensor("t", BlockType::kF32, {1}, RandomBytes(4, 1));
    w.AddTensor("t", BlockType::kF32, {1}, RandomBytes(4, 1));
    refused(w, {"tensor \"t\"", "added twice"});
  }
  {
    GgufWriter w;
    w.AddTensor("t", BlockType::kF32, {1, 1, 1, 1, 1}, RandomBytes(4, 1));
    refused(w, {"tensor \"t\"", "5 dimensions"});
  }
  {
    GgufWriter w(48);
    refused(w, {"alignment 48"});
  }
  {
    GgufWriter w;
    w.Set("k", Value{ValueType::kU32, ValueType::kU32, std::string("x")});
    refused(w, {"key \"k\"", "declared u32"});
  }
  {
    GgufWriter w;
    w.Set("k", Value{ValueType::kU8, ValueType::kU32, uint64_t{300}});
    refused(w, {"key \"k\"", "300", "u8"});
  }
  {
    GgufWriter w;
    w.Set("k", Value{ValueType::kArray, ValueType::kI16, std::vector<int64_t>{1, -40000}});
    refused(w, {"key \"k\"", "-40000", "i16"});
  }
  {
    GgufWriter w;
    w.Set("k", Value{ValueType::kArray, ValueType::kArray, std::vector<int64_t>{}});
    refused(w, {"key \"k\"", "nested"});
  }
  {
    GgufWriter w;
    w.SetU32("split.count", 2);
    refused(w, {"split.count", "written by the writer"});
  }
  {
    GgufWriter w(64);
    w.SetU32("general.alignment", 32);
    refused(w, {"general.alignment", "64"});
  }
}

TEST(GgufWriter, VocabularyOnlyFile) {
  TempDir dir;
  GgufWriter w;
  w.SetStrings("tokenizer.ggml.tokens", {"a", "b", "c"});
  ASSERT_TRUE(w.Write(dir.File("v.gguf")).ok());
  auto f = GgufFile::Open(dir.File("v.gguf"));
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_TRUE((*f)->layout().tensors.empty());
}

}  // namespace
}  // namespace kvserve::gguf
