// Strong integer ids: BlockId, RequestId and friends are distinct types so that
// a block id can never be passed where a sequence id is expected.
#pragma once

#include <compare>
#include <cstdint>
#include <functional>
#include <ostream>

namespace kvserve::base {

// Tag is an empty struct that only distinguishes the types.
template <typename Tag, typename Rep = int32_t>
class StrongId {
 public:
  using rep_type = Rep;
  constexpr StrongId() = default;
  constexpr explicit StrongId(Rep value) : value_(value) {}
  constexpr Rep value() const { return value_; }
  constexpr auto operator<=>(const StrongId&) const = default;

 private:
  Rep value_{};
};

template <typename Tag, typename Rep>
std::ostream& operator<<(std::ostream& os, StrongId<Tag, Rep> id) {
  return os << id.value();
}

}  // namespace kvserve::base

template <typename Tag, typename Rep>
struct std::hash<kvserve::base::StrongId<Tag, Rep>> {
  size_t operator()(kvserve::base::StrongId<Tag, Rep> id) const noexcept {
    return std::hash<Rep>{}(id.value());
  }
};
