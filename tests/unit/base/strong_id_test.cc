#include "base/strong_id.h"

#include <gtest/gtest.h>

#include <type_traits>
#include <unordered_set>

namespace kvserve::base {
namespace {

struct ATag {};
struct BTag {};
using AId = StrongId<ATag>;
using BId = StrongId<BTag>;

TEST(StrongId, DistinctTypesCompareAndHash) {
  static_assert(!std::is_convertible_v<AId, BId>);
  static_assert(!std::is_convertible_v<int, AId>);
  AId a{3}, b{4};
  EXPECT_LT(a, b);
  EXPECT_EQ(a, AId{3});
  std::unordered_set<AId> set{a, b, AId{3}};
  EXPECT_EQ(set.size(), 2u);
  EXPECT_EQ(a.value(), 3);
}

}  // namespace
}  // namespace kvserve::base
