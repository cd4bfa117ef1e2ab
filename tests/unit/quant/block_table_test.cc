// The block-type table: names, ids, sizes as ggml defines them (digest §1.2, §2.1), lookups,
// and RowBytes' errors.
#include <string>

#include "gtest/gtest.h"
#include "quant/block_type.h"

namespace kvserve::quant {
namespace {

struct Expected {
  uint32_t id;
  const char* name;
  int elements;
  int bytes;
};

// ggml's ids and sizes, written out independently of the table.
constexpr Expected kExpected[] = {
    {0, "F32", 1, 4},       {1, "F16", 1, 2},         {2, "Q4_0", 32, 18},
    {3, "Q4_1", 32, 20},    {6, "Q5_0", 32, 22},      {7, "Q5_1", 32, 24},
    {8, "Q8_0", 32, 34},    {10, "Q2_K", 256, 84},    {11, "Q3_K", 256, 110},
    {12, "Q4_K", 256, 144}, {13, "Q5_K", 256, 176},   {14, "Q6_K", 256, 210},
    {20, "IQ4_NL", 32, 18}, {23, "IQ4_XS", 256, 136}, {30, "BF16", 1, 2},
    {39, "MXFP4", 32, 17},  {1024, "U4_F32", 32, 24}, {1025, "U8_F32", 32, 40},
};

TEST(BlockTableTest, NamesIdsAndSizes) {
  ASSERT_EQ(AllBlockTypes().size(), std::size(kExpected));
  for (size_t i = 0; i < std::size(kExpected); ++i) {
    const Expected& e = kExpected[i];
    const BlockTraits& t = AllBlockTypes()[i];  // in id order
    SCOPED_TRACE(e.name);
    EXPECT_EQ(static_cast<uint32_t>(t.type), e.id);
    EXPECT_EQ(t.name, e.name);
    EXPECT_EQ(t.block_elements, e.elements);
    EXPECT_EQ(t.block_bytes, e.bytes);
    EXPECT_EQ(t.quantized, e.elements > 1);
    EXPECT_NE(t.dequantize, nullptr);
    EXPECT_NE(t.quantize, nullptr);

    auto by_id = FindBlockType(e.id);
    if (e.id >= 1024) {  // ours: never a ggml id
      EXPECT_FALSE(by_id.has_value());
    } else {
      ASSERT_TRUE(by_id.has_value());
      EXPECT_EQ(by_id->name, e.name);
    }
    EXPECT_EQ(Traits(t.type).name, e.name);

    std::string lower(e.name);
    for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    auto by_name = FindBlockTypeByName(lower);
    ASSERT_TRUE(by_name.has_value());
    EXPECT_EQ(by_name->type, t.type);
    ASSERT_TRUE(FindBlockTypeByName(e.name).has_value());
  }
}

TEST(BlockTableTest, UnknownIdsAndNames) {
  // 4, 5 retired; 9 Q8_1 and 15 Q8_K are activation-only; 16 IQ2_XXS unsupported; 1000 unknown.
  for (uint32_t id : {4u, 5u, 9u, 15u, 16u, 31u, 1000u, 0xffffffffu}) {
    EXPECT_FALSE(FindBlockType(id).has_value()) << id;
  }
  EXPECT_FALSE(FindBlockTypeByName("Q4_K_M").has_value());
  EXPECT_FALSE(FindBlockTypeByName("").has_value());
  EXPECT_FALSE(FindBlockTypeByName("IQ2_XXS").has_value());
}

TEST(BlockTableTest, RowBytes) {
  EXPECT_EQ(*RowBytes(BlockType::kQ4_K, 4096), 16 * 144);
  EXPECT_EQ(*RowBytes(BlockType::kQ8_0, 64), 68);
  EXPECT_EQ(*RowBytes(BlockType::kF16, 7), 14);
  EXPECT_EQ(*RowBytes(BlockType::kQ6_K, 0), 0);
  auto bad = RowBytes(BlockType::kQ4_K, 4096 + 32);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("Q4_K"), std::string::npos) << bad.status();
  EXPECT_NE(bad.status().message().find("4128"), std::string::npos) << bad.status();
  auto neg = RowBytes(BlockType::kQ8_0, -32);
  ASSERT_FALSE(neg.ok());
  EXPECT_NE(neg.status().message().find("Q8_0"), std::string::npos) << neg.status();
}

}  // namespace
}  // namespace kvserve::quant
