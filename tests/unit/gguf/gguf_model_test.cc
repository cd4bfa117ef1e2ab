// GgufModel: opening a file, a directory and split sets (any member named), the
// consistency checks of a set, and the typed metadata getters with their errors.
#include <filesystem>
#include <string>
#include <vector>

#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/gguf/gguf_test_util.h"

namespace kvserve::gguf {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using namespace kvserve::gguf::testing;  // NOLINT
using quant::BlockType;
namespace fs = std::filesystem;

std::string Message(const absl::Status& st) { return std::string(st.message()); }

// A model of `n` Q8_0 tensors of [64, rows] (136 bytes per row pair, padded to 160 each).
GgufWriter ModelWriter(int n) {
  GgufWriter w;
  w.SetString("general.architecture", "llama");
  w.SetU32("llama.block_count", static_cast<uint32_t>(n));
  for (int i = 0; i < n; ++i) {
    w.AddTensor("blk." + std::to_string(i) + ".w", BlockType::kQ8_0, {64, 2},
                RandomBytes(136, static_cast<uint32_t>(i)));
  }
  return w;
}

TEST(GgufModel, OpensOneFile) {
  TempDir dir;
  ASSERT_TRUE(ModelWriter(3).Write(dir.File("m.gguf")).ok());
  auto m = GgufModel::Open(dir.File("m.gguf"));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->description(), dir.File("m.gguf"));
  EXPECT_THAT(m->TensorNames(), ElementsAre("blk.0.w", "blk.1.w", "blk.2.w"));
  EXPECT_TRUE(m->Contains("blk.1.w"));
  auto t = m->FindTensor("blk.2.w");
  ASSERT_TRUE(t.ok()) << t.status();
  const auto bytes = t->file->Bytes(*t->info);
  const auto expected = RandomBytes(136, 2);
  EXPECT_TRUE(std::equal(bytes.begin(), bytes.end(), expected.begin(), expected.end()));
  EXPECT_EQ(m->file_bytes(), fs::file_size(dir.File("m.gguf")));
  auto missing = m->FindTensor("output.weight");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(Message(missing.status()), HasSubstr("\"output.weight\""));
  EXPECT_THAT(Message(missing.status()), HasSubstr(dir.File("m.gguf")));
}

TEST(GgufModel, TypedGetters) {
  TempDir dir;
  GgufWriter w;
  w.SetString("s", "qwen3");
  w.SetU32("u32", 4096);
  w.Set("u16", Value{ValueType::kU16, ValueType::kU32, uint64_t{7}});
  w.Set("i64", Value{ValueType::kI64, ValueType::kU32, int64_t{-5}});
  w.Set("u64_big", Value{ValueType::kU64, ValueType::kU32, ~uint64_t{0}});
  w.SetF32("eps", 1e-6f);
  w.SetBool("flag", true);
  w.SetStrings("tokens", {"a", "b"});
  w.SetF32s("scores", {-1.0f, -2.0f});
  w.SetI32s("types", {1, 3});
  w.Set("heads", Value{ValueType::kArray, ValueType::kU32, std::vector<uint64_t>{8, 4}});
  ASSERT_TRUE(w.Write(dir.File("m.gguf")).ok());
  auto m = GgufModel::Open(dir.File("m.gguf"));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(*m->GetString("s"), "qwen3");
  EXPECT_EQ(*m->GetInt("u32"), 4096);
  EXPECT_EQ(*m->GetInt("u16"), 7);
  EXPECT_EQ(*m->GetInt("i64"), -5);
  EXPECT_EQ(*m->GetFloat("eps"), double{1e-6f});
  EXPECT_EQ(*m->GetFloat("u32"), 4096.0);  // integers read as numbers
  EXPECT_EQ(*m->GetBool("flag"), true);
  EXPECT_THAT(*m->GetStrings("tokens"), ElementsAre("a", "b"));
  EXPECT_THAT(*m->GetFloats("scores"), ElementsAre(-1.0, -2.0));
  EXPECT_THAT(*m->GetInts("types"), ElementsAre(1, 3));
  EXPECT_THAT(*m->GetInts("heads"), ElementsAre(8, 4));
  EXPECT_THAT(*m->GetFloats("heads"), ElementsAre(8.0, 4.0));
  ASSERT_NE(m->Find("s"), nullptr);
  EXPECT_EQ(m->Find("nope"), nullptr);

  auto absent = m->GetInt("llama.block_count");
  EXPECT_EQ(absent.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(Message(absent.status()), HasSubstr("\"llama.block_count\" is missing"));
  auto wrong = m->GetInt("s");
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(wrong.status()), HasSubstr("\"s\" has type string, expected an integer"));
  EXPECT_THAT(Message(m->GetString("u32").status()),
              HasSubstr("\"u32\" has type u32, expected string"));
  EXPECT_THAT(Message(m->GetStrings("scores").status()),
              HasSubstr("has type array of f32, expected array of string"));
  EXPECT_THAT(Message(m->GetInts("scores").status()), HasSubstr("array of f32"));
  EXPECT_THAT(Message(m->GetBool("u32").status()), HasSubstr("expected bool"));
  EXPECT_THAT(Message(m->GetFloat("tokens").status()), HasSubstr("array of string"));
  EXPECT_THAT(Message(m->GetInt("u64_big").status()), HasSubstr("beyond the int64 range"));
}

class GgufSplit : public ::testing::TestWithParam<int> {};

TEST_P(GgufSplit, WritesAndOpensASplitSet) {
  const int parts = GetParam();
  TempDir dir;
  // 6 tensors of 160 padded bytes; at most 6 / parts tensors per file.
  const GgufWriter w = ModelWriter(6);
  auto paths = w.Write(dir.File("m.gguf"), static_cast<uint64_t>(160 * (6 / parts)));
  ASSERT_TRUE(paths.ok()) << paths.status();
  ASSERT_EQ(paths->size(), static_cast<size_t>(parts));
  for (int k = 1; k <= parts; ++k) {
    char name[64];
    std::snprintf(name, sizeof(name), "m-%05d-of-%05d.gguf", k, parts);
    EXPECT_EQ((*paths)[static_cast<size_t>(k - 1)], dir.File(name));
    // Each part carries the split keys; only the first the model's.
    auto f = GgufFile::Open(dir.File(name));
    ASSERT_TRUE(f.ok()) << f.status();
    const auto& md = (*f)->layout().metadata;
    EXPECT_EQ(md.at("split.no").type, ValueType::kU16);
    EXPECT_EQ(std::get<uint64_t>(md.at("split.no").v), static_cast<uint64_t>(k - 1));
    EXPECT_EQ(std::get<uint64_t>(md.at("split.count").v), static_cast<uint64_t>(parts));
    EXPECT_EQ(md.at("split.tensors.count").type, ValueType::kI32);
    EXPECT_EQ(std::get<int64_t>(md.at("split.tensors.count").v), 6);
    EXPECT_EQ(md.count("general.architecture"), k == 1 ? 1u : 0u);
    EXPECT_EQ((*f)->layout().tensors.size(), static_cast<size_t>(6 / parts));
  }
  const std::vector<std::string> opens = {(*paths)[0], paths->back(), dir.path()};
  for (const auto& open : opens) {
    SCOPED_TRACE(open);
    auto m = GgufModel::Open(open);
    ASSERT_TRUE(m.ok()) << m.status();
    EXPECT_EQ(m->TensorNames().size(), 6u);
    EXPECT_EQ(*m->GetString("general.architecture"), "llama");
    EXPECT_THAT(m->description(), HasSubstr("m-00001-of-0000"));
    for (int i = 0; i < 6; ++i) {
      auto t = m->FindTensor("blk." + std::to_string(i) + ".w");
      ASSERT_TRUE(t.ok());
      const auto bytes = t->file->Bytes(*t->info);
      const auto expected = RandomBytes(136, static_cast<uint32_t>(i));
      EXPECT_TRUE(std::equal(bytes.begin(), bytes.end(), expected.begin(), expected.end()));
    }
    uint64_t total = 0;
    for (const auto& p : *paths) total += fs::file_size(p);
    EXPECT_EQ(m->file_bytes(), total);
  }
}

INSTANTIATE_TEST_SUITE_P(Parts, GgufSplit, ::testing::Values(2, 3));

TEST(GgufSplitErrors, MissingMember) {
  TempDir dir;
  ASSERT_TRUE(ModelWriter(6).Write(dir.File("m.gguf"), 320).ok());
  fs::remove(dir.File("m-00002-of-00003.gguf"));
  for (const std::string& open : {dir.File("m-00001-of-00003.gguf"), dir.path()}) {
    auto m = GgufModel::Open(open);
    EXPECT_EQ(m.status().code(), absl::StatusCode::kNotFound);
    EXPECT_THAT(Message(m.status()),
                HasSubstr("m-00002-of-00003.gguf: part 2 of the 3-file split model is missing"));
  }
}

TEST(GgufSplitErrors, InconsistentSplitCount) {
  TempDir dir;
  ASSERT_TRUE(ModelWriter(6).Write(dir.File("m.gguf"), 320).ok());
  // A 3-part set renamed as if it had 2 parts.
  fs::rename(dir.File("m-00001-of-00003.gguf"), dir.File("m-00001-of-00002.gguf"));
  fs::rename(dir.File("m-00002-of-00003.gguf"), dir.File("m-00002-of-00002.gguf"));
  fs::remove(dir.File("m-00003-of-00003.gguf"));
  auto m = GgufModel::Open(dir.File("m-00002-of-00002.gguf"));
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(Message(m.status()),
              HasSubstr("m-00001-of-00002.gguf: split.count is 3 but the file name says 2"));
}

TEST(GgufSplitErrors, MembersOutOfOrder) {
  TempDir dir;
  ASSERT_TRUE(ModelWriter(4).Write(dir.File("m.gguf"), 320).ok());
  fs::rename(dir.File("m-00001-of-00002.gguf"), dir.File("tmp"));
  fs::rename(dir.File("m-00002-of-00002.gguf"), dir.File("m-00001-of-00002.gguf"));
  fs::rename(dir.File("tmp"), dir.File("m-00002-of-00002.gguf"));
  auto m = GgufModel::Open(dir.File("m-00001-of-00002.gguf"));
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(Message(m.status()),
              HasSubstr("m-00001-of-00002.gguf: split.no is 1 but the file name says part 1"));
}

// Two hand-built parts, each with the given tensors and split keys.
void WritePart(const std::string& path, int no, int count, int total,
               std::vector<std::string> tensors) {
  RawSpec spec;
  std::string u16;
  Put<uint16_t>(&u16, static_cast<uint16_t>(no));
  spec.kvs.push_back(RawKv("split.no", kValU16, u16));
  u16.clear();
  Put<uint16_t>(&u16, static_cast<uint16_t>(count));
  spec.kvs.push_back(RawKv("split.count", kValU16, u16));
  std::string i32;
  Put<int32_t>(&i32, total);
  spec.kvs.push_back(RawKv("split.tensors.count", kValI32, i32));
  uint64_t offset = 0;
  for (const auto& name : tensors) {
    spec.tensors.push_back({name, {8}, kRawF32.id, offset, 32});
    offset += 32;
  }
  WriteFile(path, BuildRaw(spec));
}

TEST(GgufSplitErrors, TensorCountDisagrees) {
  TempDir dir;
  WritePart(dir.File("m-00001-of-00002.gguf"), 0, 2, 3, {"a"});
  WritePart(dir.File("m-00002-of-00002.gguf"), 1, 2, 3, {"b"});
  auto m = GgufModel::Open(dir.path());
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(Message(m.status()),
              HasSubstr("split.tensors.count is 3 but the 2 parts hold 2 tensors"));
}

TEST(GgufSplitErrors, TensorInTwoParts) {
  TempDir dir;
  WritePart(dir.File("m-00001-of-00002.gguf"), 0, 2, 2, {"a"});
  WritePart(dir.File("m-00002-of-00002.gguf"), 1, 2, 2, {"a"});
  auto m = GgufModel::Open(dir.path());
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(Message(m.status()), HasSubstr("m-00002-of-00002.gguf: tensor \"a\" is also in"));
  EXPECT_THAT(Message(m.status()), HasSubstr("m-00001-of-00002.gguf"));
}

TEST(GgufSplitErrors, PartWithoutItsSiblingsName) {
  TempDir dir;
  WritePart(dir.File("renamed.gguf"), 0, 2, 2, {"a"});
  auto m = GgufModel::Open(dir.File("renamed.gguf"));
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(Message(m.status()), HasSubstr("renamed.gguf: split.count is 2"));
}

TEST(GgufDirectory, ResolvesTheOnlyModel) {
  TempDir dir;
  ASSERT_TRUE(ModelWriter(1).Write(dir.File("only.gguf")).ok());
  WriteFile(dir.File("README.md"), "not a model");
  WriteFile(dir.File("config.json"), "{}");
  auto m = GgufModel::Open(dir.path());
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->description(), dir.File("only.gguf"));
}

TEST(GgufDirectory, SeveralModelsAreListed) {
  TempDir dir;
  ASSERT_TRUE(ModelWriter(1).Write(dir.File("a.gguf")).ok());
  ASSERT_TRUE(ModelWriter(4).Write(dir.File("b.gguf"), 320).ok());
  auto m = GgufModel::Open(dir.path());
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(m.status()), HasSubstr("holds 2 GGUF models"));
  EXPECT_THAT(Message(m.status()), HasSubstr("a.gguf"));
  EXPECT_THAT(Message(m.status()), HasSubstr("b-00001-of-00002.gguf (a set of 2)"));
}

TEST(GgufDirectory, EmptyDirectoryAndMissingPath) {
  TempDir dir;
  auto m = GgufModel::Open(dir.path());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(Message(m.status()), HasSubstr("no .gguf file"));
  auto gone = GgufModel::Open(dir.File("nope.gguf"));
  EXPECT_EQ(gone.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(Message(gone.status()), HasSubstr("nope.gguf"));
}

TEST(GgufDirectory, CorruptFileErrorNamesIt) {
  TempDir dir;
  WriteFile(dir.File("bad.gguf"), std::string("GGUF\x01\0\0\0", 8) + std::string(32, '\0'));
  auto m = GgufModel::Open(dir.path());
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(Message(m.status()), HasSubstr(dir.File("bad.gguf")));
  EXPECT_THAT(Message(m.status()), HasSubstr("version 1"));
}

}  // namespace
}  // namespace kvserve::gguf
