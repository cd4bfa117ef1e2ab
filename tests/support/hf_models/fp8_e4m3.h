// float8 e4m3fn for tests, written from the format's definition (OCP 8-bit floating point,
// "E4M3"): byte = s eeee mmm, exponent bias 7, no infinities, s 1111 111 is NaN, largest
// finite value 448, subnormals (-1)^s 2^-6 (m / 8). Independent of the kernels' decoding
// (kernels/cpu/quant/fp8_format.h), which the tests check against it.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>

namespace kvserve::testing::hf {

inline double E4m3Value(uint8_t b) {
  const int s = b >> 7, e = (b >> 3) & 15, m = b & 7;
  if (e == 15 && m == 7) return std::numeric_limits<double>::quiet_NaN();
  const double mag = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
  return s != 0 ? -mag : mag;
}

inline bool E4m3IsNaN(uint8_t b) { return (b & 0x7F) == 0x7F; }

// Round to nearest, ties to the even code (the even mantissa), saturating at ±448, as
// torch's float -> float8_e4m3fn cast after the quantizers' clamp.
inline uint8_t E4m3FromDouble(double v) {
  static const std::array<double, 127> kPositive = [] {
    std::array<double, 127> t{};
    for (int c = 0; c < 127; ++c) t[static_cast<size_t>(c)] = E4m3Value(static_cast<uint8_t>(c));
    return t;
  }();
  const uint8_t sign = std::signbit(v) ? 0x80 : 0;
  const double a = std::min(std::fabs(v), 448.0);
  // Codes 0x00..0x7E increase with their value: the nearest is next to the first >= a.
  const auto it = std::lower_bound(kPositive.begin(), kPositive.end(), a);
  int c = static_cast<int>(it - kPositive.begin());
  if (c > 0) {
    const double above = kPositive[static_cast<size_t>(c)],
                 below = kPositive[static_cast<size_t>(c - 1)];
    if (a - below < above - a || (a - below == above - a && (c - 1) % 2 == 0)) c -= 1;
  }
  return static_cast<uint8_t>(sign | c);
}

}  // namespace kvserve::testing::hf
