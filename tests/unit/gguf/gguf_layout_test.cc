// ParseGgufLayout on hand-built files (RawGguf, from the format description): a valid file
// parses to what was built, and each malformed one is refused with an InvalidArgument that
// names the file and the key, tensor or field that is wrong.
#include <string>
#include <vector>

#include "gguf/gguf_file.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/gguf/gguf_test_util.h"

namespace kvserve::gguf {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using namespace kvserve::gguf::testing;  // NOLINT

constexpr char kPath[] = "/models/x.gguf";

absl::Status Parse(const RawSpec& spec) {
  const std::string bytes = BuildRaw(spec);
  return ParseGgufLayout(kPath, AsBytes(bytes)).status();
}

// The refusal is InvalidArgument and its message names the file and every `parts`.
void ExpectRefused(const RawSpec& spec, const std::vector<std::string>& parts) {
  const absl::Status st = Parse(spec);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_THAT(std::string(st.message()), HasSubstr(kPath));
  for (const auto& p : parts) EXPECT_THAT(std::string(st.message()), HasSubstr(p));
}

TEST(GgufLayout, ValidFileParsesToWhatWasBuilt) {
  const RawSpec spec = ValidSpec();
  const std::string bytes = BuildRaw(spec);
  auto layout = ParseGgufLayout(kPath, AsBytes(bytes));
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->version, 3u);
  EXPECT_EQ(layout->alignment, 32u);
  ASSERT_EQ(layout->tensors.size(), 2u);
  const TensorInfo& a = layout->tensors[0];
  const TensorInfo& b = layout->tensors[1];
  EXPECT_EQ(a.name, "a");
  EXPECT_EQ(a.type, quant::BlockType::kF32);
  EXPECT_EQ(a.ne, (std::vector<int64_t>{8, 2}));
  EXPECT_EQ(a.bytes, 64u);
  EXPECT_EQ(a.rows(), 2);
  EXPECT_EQ(a.num_elements(), 16);
  EXPECT_EQ(b.name, "b");
  EXPECT_EQ(b.type, quant::BlockType::kQ8_0);
  EXPECT_EQ(b.offset, 64u);
  EXPECT_EQ(b.bytes, 3u * 2 * 34);
  // Header: 24 + two kvs + two tensor infos, padded to 32.
  size_t header = 24;
  for (const auto& kv : spec.kvs) header += kv.size();
  header += (8 + 1 + 4 + 16 + 4 + 8) * 2;
  EXPECT_EQ(layout->data_offset, RawAlign(header, 32));
  ASSERT_EQ(layout->metadata.count("general.architecture"), 1u);
  EXPECT_EQ(std::get<std::string>(layout->metadata.at("general.architecture").v), "llama");
  EXPECT_EQ(std::get<uint64_t>(layout->metadata.at("llama.block_count").v), 2u);
}

TEST(GgufLayout, Version2IsRead) {
  RawSpec spec = ValidSpec();
  spec.version = 2;
  EXPECT_TRUE(Parse(spec).ok()) << Parse(spec);
}

TEST(GgufLayout, EveryCutPointIsRefusedAsTruncated) {
  RawSpec spec = ValidSpec();
  std::string arr;  // an array and a string make cut points inside elements too
  Put<uint32_t>(&arr, kValString);
  Put<uint64_t>(&arr, 3);
  for (const char* s : {"x", "yy", "zzz"}) PutString(&arr, s);
  spec.kvs.push_back(RawKv("tokenizer.ggml.tokens", kValArray, arr));
  const std::string bytes = BuildRaw(spec);
  auto full = ParseGgufLayout(kPath, AsBytes(bytes));
  ASSERT_TRUE(full.ok()) << full.status();
  const uint64_t data_end = full->data_offset + 64 + 204;
  for (size_t cut = 0; cut < data_end; ++cut) {
    auto layout = ParseGgufLayout(kPath, AsBytes(bytes.substr(0, cut)));
    ASSERT_FALSE(layout.ok()) << "cut at " << cut;
    EXPECT_EQ(layout.status().code(), absl::StatusCode::kInvalidArgument);
    const std::string msg(layout.status().message());
    EXPECT_THAT(msg, HasSubstr(kPath));
    EXPECT_TRUE(msg.find("truncated") != std::string::npos ||
                msg.find("too short") != std::string::npos)
        << "cut at " << cut << ": " << msg;
  }
  // The last tensor's padding is optional.
  EXPECT_TRUE(ParseGgufLayout(kPath, AsBytes(bytes.substr(0, data_end))).ok());
}

TEST(GgufLayout, BadMagic) {
  RawSpec spec = ValidSpec();
  spec.magic = "GGML";
  ExpectRefused(spec, {"not a GGUF file", "GGML"});
}

TEST(GgufLayout, Version1) {
  RawSpec spec = ValidSpec();
  spec.version = 1;
  ExpectRefused(spec, {"GGUF version 1 is not supported"});
}

TEST(GgufLayout, Version4) {
  RawSpec spec = ValidSpec();
  spec.version = 4;
  ExpectRefused(spec, {"GGUF version 4 is not supported"});
}

TEST(GgufLayout, BigEndian) {
  RawSpec spec = ValidSpec();
  spec.version = 0x03000000;  // 3 written big-endian
  ExpectRefused(spec, {"big-endian"});
}

TEST(GgufLayout, UnknownTypeId) {
  RawSpec spec = ValidSpec();
  spec.tensors[1].type = 99;
  ExpectRefused(spec, {"tensor \"b\"", "unknown ggml type 99", "not supported", "Q4_K"});
}

TEST(GgufLayout, KnownButUnsupportedTypeIsNamed) {
  RawSpec spec = ValidSpec();
  spec.tensors[1].type = 16;
  ExpectRefused(spec, {"tensor \"b\"", "IQ2_XXS (ggml type 16) is not supported"});
  spec.tensors[1].type = 31;
  ExpectRefused(spec, {"tensor \"b\"", "Q4_0_4_4 (ggml type 31, retired)"});
}

TEST(GgufLayout, MisalignedOffset) {
  RawSpec spec = ValidSpec();
  spec.tensors[1].offset = 80;
  ExpectRefused(spec, {"tensor \"b\"", "offset 80 is not a multiple of the alignment 32"});
}

TEST(GgufLayout, OverlappingOffset) {
  RawSpec spec = ValidSpec();
  spec.tensors[1].offset = 32;  // inside "a" (64 bytes at 0)
  ExpectRefused(spec, {"tensor \"b\"", "overlaps", "tensor \"a\""});
}

TEST(GgufLayout, OutOfOrderOffsets) {
  RawSpec spec = ValidSpec();
  spec.tensors[0].offset = 224;  // "a" after "b" in the data region, first in the infos
  spec.tensors[1].offset = 0;
  ExpectRefused(spec, {"tensor \"a\"", "gap"});
  spec.tensors.push_back({"c", {8}, kRawF32.id, 0, 32});  // c goes back to 0 after b
  spec.tensors[0].offset = 0;
  spec.tensors[1].offset = 64;
  ExpectRefused(spec, {"tensor \"c\"", "in order", "tensor \"b\""});
}

TEST(GgufLayout, GapBetweenTensors) {
  RawSpec spec = ValidSpec();
  spec.tensors[1].offset = 96;
  ExpectRefused(spec, {"tensor \"b\"", "gap", "expected 64"});
}

TEST(GgufLayout, DuplicateKey) {
  RawSpec spec = ValidSpec();
  spec.kvs.push_back(RawKvU32("llama.block_count", 3));
  ExpectRefused(spec, {"duplicate metadata key \"llama.block_count\""});
}

TEST(GgufLayout, DuplicateTensor) {
  RawSpec spec = ValidSpec();
  spec.tensors[1].name = "a";
  ExpectRefused(spec, {"duplicate tensor \"a\""});
}

TEST(GgufLayout, RowNotABlockMultiple) {
  RawSpec spec = ValidSpec();
  spec.tensors[1].ne = {40, 3};
  ExpectRefused(spec, {"tensor \"b\"", "ne[0] = 40", "Q8_0", "32"});
}

TEST(GgufLayout, TooManyDims) {
  RawSpec spec = ValidSpec();
  spec.tensors[0].ne = {8, 2, 1, 1, 1};
  ExpectRefused(spec, {"tensor \"a\"", "n_dims is 5"});
  spec = ValidSpec();
  spec.tensors[0].ne = {};
  spec.tensors[0].data_bytes = 0;
  spec.tensors[1].offset = 0;
  ExpectRefused(spec, {"tensor \"a\"", "n_dims is 0"});
}

TEST(GgufLayout, NegativeDim) {
  RawSpec spec = ValidSpec();
  spec.tensors[0].ne = {8, -2};
  ExpectRefused(spec, {"tensor \"a\"", "ne[1] is -2"});
}

TEST(GgufLayout, HugeCounts) {
  RawSpec spec = ValidSpec();
  spec.n_kv = uint64_t{1} << 62;
  ExpectRefused(spec, {"metadata count 4611686018427387904 cannot fit"});
  spec = ValidSpec();
  spec.n_tensors = uint64_t{1} << 60;
  ExpectRefused(spec, {"tensor count 1152921504606846976 (with 2 metadata entries) cannot fit"});
  spec = ValidSpec();
  std::string arr;
  Put<uint32_t>(&arr, kValU32);
  Put<uint64_t>(&arr, uint64_t{1} << 61);
  spec.kvs.push_back(RawKv("big", kValArray, arr));
  ExpectRefused(spec, {"key \"big\"", "array of 2305843009213693952 u32 elements cannot fit"});
  spec = ValidSpec();
  std::string str;
  Put<uint64_t>(&str, ~uint64_t{0});
  spec.kvs.push_back(RawKv("long", kValString, str));
  ExpectRefused(spec, {"key \"long\"", "truncated"});
  spec = ValidSpec();
  spec.tensors[0].ne = {int64_t{1} << 30, int64_t{1} << 30};
  ExpectRefused(spec, {"tensor \"a\"", "more bytes than the whole file"});
  spec.tensors[0].ne = {int64_t{1} << 62, int64_t{1} << 62, int64_t{1} << 62, int64_t{1} << 62};
  ExpectRefused(spec, {"tensor \"a\"", "more elements than int64 can count"});
  // A zero dimension makes 0 bytes, but rows() must still be countable.
  spec.tensors[0].ne = {0, int64_t{1} << 40, int64_t{1} << 40};
  ExpectRefused(spec, {"tensor \"a\"", "more elements than int64 can count"});
}

TEST(GgufLayout, Alignment) {
  RawSpec spec = ValidSpec();
  spec.kvs.push_back(RawKvU32("general.alignment", 48));
  ExpectRefused(spec, {"general.alignment", "48", "not a power of two"});
  spec = ValidSpec();
  std::string v;
  Put<uint64_t>(&v, 64);
  spec.kvs.push_back(RawKv("general.alignment", kValU64, v));
  ExpectRefused(spec, {"general.alignment", "u64", "must be u32"});
  // 64 is honoured: b's offset 64 stays aligned, the data region moves to a multiple of 64.
  spec = ValidSpec();
  spec.kvs.push_back(RawKvU32("general.alignment", 64));
  spec.alignment = 64;
  const std::string bytes = BuildRaw(spec);
  auto layout = ParseGgufLayout(kPath, AsBytes(bytes));
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->alignment, 64u);
  EXPECT_EQ(layout->data_offset % 64, 0u);
  // ... and a 32-aligned offset is no longer enough.
  spec.tensors[1].offset = 96;
  ExpectRefused(spec, {"tensor \"b\"", "offset 96 is not a multiple of the alignment 64"});
}

TEST(GgufLayout, NestedArray) {
  RawSpec spec = ValidSpec();
  std::string arr;
  Put<uint32_t>(&arr, kValArray);
  Put<uint64_t>(&arr, 1);
  spec.kvs.push_back(RawKv("nest", kValArray, arr));
  ExpectRefused(spec, {"key \"nest\"", "nested arrays"});
}

TEST(GgufLayout, UnknownValueType) {
  RawSpec spec = ValidSpec();
  spec.kvs.push_back(RawKv("odd", 13, "abcd"));
  ExpectRefused(spec, {"key \"odd\"", "unknown value type 13"});
}

TEST(GgufLayout, BoolNotZeroOrOne) {
  RawSpec spec = ValidSpec();
  spec.kvs.push_back(RawKv("flag", kValBool, std::string(1, '\x02')));
  ExpectRefused(spec, {"key \"flag\"", "bool"});
}

TEST(GgufLayout, TrailingBytes) {
  RawSpec spec = ValidSpec();
  spec.trailing = 32;
  ExpectRefused(spec, {"bytes follow the last tensor"});
}

TEST(GgufLayout, TensorNames) {
  RawSpec spec = ValidSpec();
  spec.tensors[0].name = "";
  ExpectRefused(spec, {"tensor #0 has an empty name"});
  spec.tensors[0].name = std::string(64, 'n');
  ExpectRefused(spec, {"name is 64 bytes"});
}

TEST(GgufLayout, ErrorsKeepUnprintableNamesReadable) {
  RawSpec spec = ValidSpec();
  spec.tensors[1].name = std::string("b\n\x01", 3);
  spec.tensors[1].type = 99;
  ExpectRefused(spec, {"\"b\\x0a\\x01\""});
}

TEST(GgufLayout, NoTensorsIsAVocabularyOnlyFile) {
  RawSpec spec = ValidSpec();
  spec.tensors.clear();
  auto st = Parse(spec);
  EXPECT_TRUE(st.ok()) << st;
}

}  // namespace
}  // namespace kvserve::gguf
