// Malformed safetensors files built in a temp dir: each must give an error that names the
// file and (where one is involved) the tensor, never a crash.
#include "model/safetensors.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "gtest/gtest.h"
#include "model/llama_weights.h"
#include "model/model_config.h"
#include "tests/unit/model/model_test_util.h"

namespace kvserve::model {
namespace {

namespace fs = std::filesystem;

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) /
           (std::string("st_") + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Writes [u64 header_len][header][body]; header_len defaults to the header's size.
  std::string Write(const std::string& name, const std::string& header, const std::string& body,
                    std::optional<uint64_t> header_len = std::nullopt) {
    const std::string path = (dir_ / name).string();
    std::ofstream out(path, std::ios::binary);
    uint64_t n = header_len.value_or(header.size());
    char len[8];
    std::memcpy(len, &n, 8);  // little-endian host
    out.write(len, 8);
    out << header << body;
    return path;
  }
  static std::string Floats(std::initializer_list<float> v) {
    std::string s(v.size() * 4, '\0');
    std::memcpy(s.data(), std::data(v), s.size());
    return s;
  }
  void ExpectOpenError(const std::string& path, const std::string& tensor, const std::string& needle) {
    auto f = SafetensorsFile::Open(path);
    ASSERT_FALSE(f.ok());
    const std::string msg(f.status().message());
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    if (!tensor.empty()) {
      EXPECT_NE(msg.find("tensor \"" + tensor + "\""), std::string::npos) << msg;
    }
    EXPECT_NE(msg.find(needle), std::string::npos) << msg;
  }
  fs::path dir_;
};

const char kGood[] =
    R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
    R"("b":{"dtype":"F32","shape":[1,2],"data_offsets":[8,16]}})";

TEST_F(SafetensorsTest, ReadsAValidFile) {
  auto path = Write("ok.safetensors", kGood, Floats({1, 2, 3, 4}));
  auto f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_EQ((*f)->entries().size(), 2u);
  const auto* b = (*f)->Find("b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->shape, (std::vector<int64_t>{1, 2}));
  std::vector<float> out(2);
  ASSERT_TRUE((*f)->ReadF32(*b, out).ok());
  EXPECT_EQ(out, (std::vector<float>{3, 4}));
  EXPECT_EQ((*f)->Find("c"), nullptr);
}

TEST_F(SafetensorsTest, TruncatedBody) {
  auto path = Write("trunc.safetensors", kGood, Floats({1, 2, 3}));  // 12 of 16 bytes
  ExpectOpenError(path, "b", "extend past the end of the file");
}

TEST_F(SafetensorsTest, OffsetPastEof) {
  auto path = Write("eof.safetensors",
                    R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[1000,1008]}})", Floats({1, 2}));
  ExpectOpenError(path, "a", "data_offsets [1000, 1008) extend past the end of the file");
}

TEST_F(SafetensorsTest, WrongDtypeIsAnErrorWhenLoaded) {
  for (const char* dtype : {"I64", "F64"}) {
    auto path = Write(std::string(dtype) + ".safetensors",
                      std::string(R"({"w":{"dtype":")") + dtype + R"(","shape":[2],"data_offsets":[0,16]}})",
                      Floats({1, 2, 3, 4}));
    auto ckpt = SafetensorsCheckpoint::OpenFile(path);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();  // structurally valid
    std::vector<float> out(2);
    const int64_t shape[1] = {2};
    auto st = ckpt->LoadF32("w", shape, out);
    ASSERT_FALSE(st.ok());
    const std::string msg(st.message());
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find("tensor \"w\""), std::string::npos) << msg;
    EXPECT_NE(msg.find(std::string("unsupported dtype ") + dtype), std::string::npos) << msg;
  }
}

TEST_F(SafetensorsTest, UnknownDtypeString) {
  auto path = Write("q.safetensors", R"({"w":{"dtype":"Q4_K","shape":[2],"data_offsets":[0,8]}})", Floats({1, 2}));
  ExpectOpenError(path, "w", "unknown dtype \"Q4_K\"");
}

TEST_F(SafetensorsTest, ShapeDisagreesWithOffsets) {
  auto path = Write("shape.safetensors", R"({"w":{"dtype":"F16","shape":[3],"data_offsets":[0,8]}})",
                    Floats({1, 2}));
  ExpectOpenError(path, "w", "needs 6");
}

// Found while writing safetensors_header_fuzz (its invariant: bytes == elements x dtype size): 2^62 F32
// elements are 2^64 bytes, which wrapped to 0 and matched data_offsets [0, 0].
TEST_F(SafetensorsTest, ByteSizeThatWrapsIsAnError) {
  ExpectOpenError(Write("w.safetensors", R"({"t":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,0]}})", ""),
                  "t", "is too large");
  ExpectOpenError(Write("w2.safetensors", R"({"t":{"dtype":"F64","shape":[2305843009213693952],"data_offsets":[0,0]}})", ""),
                  "t", "is too large");
}

TEST_F(SafetensorsTest, Overlap) {
  auto path = Write("overlap.safetensors",
                    R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                    R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                    Floats({1, 2, 3}));
  ExpectOpenError(path, "b", "overlap tensor \"a\"");
}

TEST_F(SafetensorsTest, HoleAndTrailingBytes) {
  auto hole = Write("hole.safetensors", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", Floats({1, 2}));
  ExpectOpenError(hole, "a", "hole");
  auto trailing = Write("trail.safetensors", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
                        Floats({1, 2}));
  ExpectOpenError(trailing, "", "trailing bytes");
}

TEST_F(SafetensorsTest, BadHeaderLength) {
  ExpectOpenError(Write("len.safetensors", kGood, Floats({1, 2, 3, 4}), 1ull << 40), "", "header length");
  ExpectOpenError(Write("tiny.safetensors", "", "", 0), "", "not valid JSON");
  const std::string short_path = (dir_ / "short.safetensors").string();
  std::ofstream(short_path) << "abc";
  ExpectOpenError(short_path, "", "shorter than the 8-byte header length");
}

TEST_F(SafetensorsTest, BadJson) {
  ExpectOpenError(Write("json.safetensors", R"({"a": {"dtype": "F32", )", ""), "", "not valid JSON");
  ExpectOpenError(Write("array.safetensors", "[1,2]", ""), "", "not a JSON object");
  ExpectOpenError(Write("offs.safetensors", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})", ""), "a",
                  "data_offsets must be");
  ExpectOpenError(Write("neg.safetensors", R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,0]}})", ""), "a",
                  "bad shape");
}

TEST_F(SafetensorsTest, MissingFileNamesThePath) {
  auto f = SafetensorsFile::Open((dir_ / "nope.safetensors").string());
  ASSERT_FALSE(f.ok());
  EXPECT_NE(std::string(f.status().message()).find("nope.safetensors"), std::string::npos);
}

TEST_F(SafetensorsTest, MissingTensorNamesTensorAndFile) {
  // A real fixture config with a checkpoint lacking most tensors.
  fs::copy_file(testing::FixtureDir("llama_f32") + "/config.json", dir_ / "config.json");
  Write("model.safetensors", R"({"model.embed_tokens.weight":{"dtype":"F32","shape":[300,64],"data_offsets":[0,76800]}})",
        std::string(76800, '\0'));
  auto cfg = LoadModelConfig(dir_.string());
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  auto ckpt = SafetensorsCheckpoint::Open(dir_.string());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  auto w = LlamaWeights::Load(*cfg, std::move(*ckpt));
  ASSERT_FALSE(w.ok());
  const std::string msg(w.status().message());
  EXPECT_NE(msg.find("model.safetensors"), std::string::npos) << msg;
  EXPECT_NE(msg.find("tensor \"model.norm.weight\" is missing"), std::string::npos) << msg;
}

TEST_F(SafetensorsTest, WrongShapeNamesTensor) {
  fs::copy_file(testing::FixtureDir("llama_f32") + "/config.json", dir_ / "config.json");
  Write("model.safetensors", R"({"model.embed_tokens.weight":{"dtype":"F32","shape":[64,300],"data_offsets":[0,76800]}})",
        std::string(76800, '\0'));
  auto cfg = LoadModelConfig(dir_.string());
  auto ckpt = SafetensorsCheckpoint::Open(dir_.string());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  auto w = LlamaWeights::Load(*cfg, std::move(*ckpt));
  ASSERT_FALSE(w.ok());
  EXPECT_NE(std::string(w.status().message()).find("tensor \"model.embed_tokens.weight\": shape [64, 300], expected [300, 64]"),
            std::string::npos)
      << w.status();
}

// Corrupt weights: a NaN or infinity is an error naming the tensor, never a model that
// serves garbage.
TEST_F(SafetensorsTest, NonFiniteWeightIsAnError) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  auto path = Write("nan.safetensors",
                    R"({"ok":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"bad":{"dtype":"F32","shape":[3],"data_offsets":[8,20]},"inf":{"dtype":"F16","shape":[1],"data_offsets":[20,22]}})",
                    Floats({1, 2}) + Floats({0, nan, 3}) + std::string("\x00\x7c", 2));
  auto ckpt = SafetensorsCheckpoint::OpenFile(path);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  std::vector<float> out(3);
  const int64_t shape3[] = {3};
  absl::Status st = ckpt->LoadF32("bad", shape3, out);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(std::string(st.message()).find("tensor \"bad\": element 1 is NaN (corrupt weights?)"), std::string::npos) << st;
  std::vector<float> one(1);
  const int64_t shape1[] = {1};
  st = ckpt->LoadF32("inf", shape1, one);  // F16 0x7c00 is +infinity
  ASSERT_FALSE(st.ok());
  EXPECT_NE(std::string(st.message()).find("element 0 is infinite"), std::string::npos) << st;
  std::vector<float> two(2);
  const int64_t shape2[] = {2};
  EXPECT_TRUE(ckpt->LoadF32("ok", shape2, two).ok());
}

// safetensors_header_fuzz: reading an empty tensor (shape [0, 5]) passed a null destination
// to memcpy (undefined behaviour, reported by UBSan).
TEST_F(SafetensorsTest, EmptyTensorReads) {
  auto path = Write("empty.safetensors", R"({"z":{"dtype":"F32","shape":[0,5],"data_offsets":[0,0]}})", "");
  auto file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  std::vector<float> none;
  EXPECT_TRUE((*file)->ReadF32(*(*file)->Find("z"), none).ok());
}

TEST_F(SafetensorsTest, ShardedIndex) {
  auto ckpt = SafetensorsCheckpoint::Open(testing::FixtureDir("qwen2_bf16"));
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_TRUE(ckpt->Contains("model.layers.1.mlp.down_proj.weight"));
  EXPECT_TRUE(ckpt->Contains("model.embed_tokens.weight"));

  // An index naming a tensor its shard lacks.
  Write("model-00001-of-00001.safetensors", kGood, Floats({1, 2, 3, 4}));
  std::ofstream(dir_ / "model.safetensors.index.json")
      << R"({"weight_map": {"a": "model-00001-of-00001.safetensors", "zz": "model-00001-of-00001.safetensors"}})";
  auto bad = SafetensorsCheckpoint::Open(dir_.string());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(std::string(bad.status().message()).find("tensor \"zz\": listed in"), std::string::npos) << bad.status();

  std::ofstream(dir_ / "model.safetensors.index.json") << R"({"weight_map": {"a": "missing.safetensors"}})";
  auto missing = SafetensorsCheckpoint::Open(dir_.string());
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(std::string(missing.status().message()).find("missing.safetensors"), std::string::npos);

  std::ofstream(dir_ / "model.safetensors.index.json") << R"({"weight_map": {"a": "../etc/passwd"}})";
  EXPECT_FALSE(SafetensorsCheckpoint::Open(dir_.string()).ok());
}

TEST_F(SafetensorsTest, Fp16AndBf16Convert) {
  // 1.5 in F16 is 0x3E00, in BF16 0x3FC0; -2 is 0xC000 / 0xC000.
  const std::string f16("\x00\x3E\x00\xC0", 4);
  const std::string bf16("\xC0\x3F\x00\xC0", 4);
  for (const auto& [dtype, body] : {std::pair<std::string, std::string>{"F16", f16}, {"BF16", bf16}}) {
    auto path = Write(dtype + ".safetensors", R"({"x":{"dtype":")" + dtype + R"(","shape":[2],"data_offsets":[0,4]}})",
                      body);
    auto ckpt = SafetensorsCheckpoint::OpenFile(path);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    std::vector<float> out(2);
    const int64_t shape[1] = {2};
    ASSERT_TRUE(ckpt->LoadF32("x", shape, out).ok());
    EXPECT_EQ(out, (std::vector<float>{1.5f, -2.0f})) << dtype;
  }
}

}  // namespace
}  // namespace kvserve::model
