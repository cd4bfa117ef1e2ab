// The printable summaries of a model (gguf/gguf_summary.h): counts per type, bits per
// weight, the tensor table and the metadata listing.
#include "gguf/gguf_summary.h"

#include <string>

#include "gguf/gguf_writer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/gguf/gguf_test_util.h"

namespace kvserve::gguf {
namespace {

using ::testing::HasSubstr;
using namespace kvserve::gguf::testing;  // NOLINT
using quant::BlockType;

class GgufSummary : public ::testing::Test {
 protected:
  void SetUp() override {
    GgufWriter w;
    w.SetString("general.architecture", "llama");
    w.SetString("general.name", "tiny \"q\"\n");
    w.SetStrings("tokenizer.ggml.tokens", {"a", "b", "c", "d", "e"});
    w.SetF32s("scores", {0.5f, -1.0f});
    w.AddTensor("z.weight", BlockType::kF32, {8, 2}, RandomBytes(64, 1));
    w.AddTensor("a.weight", BlockType::kQ8_0, {64, 3}, RandomBytes(204, 2));
    w.AddTensor("m.weight", BlockType::kQ8_0, {32}, RandomBytes(34, 3));
    ASSERT_TRUE(w.Write(dir_.File("m.gguf")).ok());
    auto m = GgufModel::Open(dir_.File("m.gguf"));
    ASSERT_TRUE(m.ok()) << m.status();
    model_.emplace(std::move(*m));
  }
  TempDir dir_;
  std::optional<GgufModel> model_;
};

TEST_F(GgufSummary, CountsPerType) {
  const auto counts = CountTensorTypes(*model_);
  ASSERT_EQ(counts.size(), 2u);
  EXPECT_EQ(counts[0].type, BlockType::kF32);
  EXPECT_EQ(counts[0].tensors, 1);
  EXPECT_EQ(counts[0].elements, 16);
  EXPECT_EQ(counts[0].bytes, 64u);
  EXPECT_EQ(counts[1].type, BlockType::kQ8_0);
  EXPECT_EQ(counts[1].tensors, 2);
  EXPECT_EQ(counts[1].elements, 64 * 3 + 32);
  EXPECT_EQ(counts[1].bytes, 204u + 34u);
}

TEST_F(GgufSummary, ModelSummary) {
  const std::string s = FormatModelSummary(*model_);
  EXPECT_THAT(s, HasSubstr(dir_.File("m.gguf") +
                           ": GGUF v3, llama \"tiny \\\"q\\\"\\n\", 3 tensors, 302 B"));
  EXPECT_THAT(s, HasSubstr("32.00 bits/weight"));
  EXPECT_THAT(s, HasSubstr("8.50 bits/weight"));  // Q8_0: 34 bytes per 32 weights
}

TEST_F(GgufSummary, TensorTable) {
  const std::string all = FormatTensorTable(*model_);
  const size_t a = all.find("a.weight");
  const size_t m = all.find("m.weight");
  const size_t z = all.find("z.weight");
  ASSERT_NE(a, std::string::npos);
  EXPECT_LT(a, m);
  EXPECT_LT(m, z);
  EXPECT_THAT(all, HasSubstr("a.weight  Q8_0     ne [64, 3]"));
  EXPECT_THAT(all, HasSubstr("204 B"));
  const std::string first = FormatTensorTable(*model_, 1);
  EXPECT_THAT(first, HasSubstr("a.weight"));
  EXPECT_EQ(first.find("z.weight"), std::string::npos);
  EXPECT_THAT(first, HasSubstr("... and 2 more tensors"));
}

TEST_F(GgufSummary, Metadata) {
  const std::string s = FormatMetadata(*model_, 2);
  EXPECT_THAT(s, HasSubstr("general.architecture = \"llama\"\n"));
  EXPECT_THAT(s, HasSubstr("tokenizer.ggml.tokens = [string x 5] \"a\", \"b\", ...\n"));
  EXPECT_THAT(s, HasSubstr("scores = [f32 x 2] 0.5, -1\n"));
}

TEST(GgufSummaryText, BytesAndTensor) {
  EXPECT_EQ(FormatBytes(812), "812 B");
  EXPECT_EQ(FormatBytes(1536), "1.50 KiB");
  EXPECT_EQ(FormatBytes(uint64_t{3} << 30), "3.00 GiB");
  EXPECT_EQ(FormatBytes(uint64_t{300} << 20), "300.0 MiB");
  TensorInfo t;
  t.name = "blk.0.attn_q.weight";
  t.type = BlockType::kQ4_K;
  t.ne = {4096, 4096};
  t.bytes = 4096ull * 4096 / 256 * 144;
  EXPECT_EQ(DescribeTensor(t), "blk.0.attn_q.weight (Q4_K, ne [4096, 4096], 9.00 MiB)");
}

}  // namespace
}  // namespace kvserve::gguf
