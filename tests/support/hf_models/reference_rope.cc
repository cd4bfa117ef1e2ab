#include "tests/support/hf_models/reference_rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace kvserve::testing::hf {
namespace {

std::vector<double> Plain(double base, int d) {
  std::vector<double> f(static_cast<size_t>(d / 2));
  for (int i = 0; i < d / 2; ++i) f[static_cast<size_t>(i)] = std::pow(base, -2.0 * i / d);
  return f;
}

double YarnMscale(double scale, double m) {
  return scale <= 1.0 ? 1.0 : 0.1 * m * std::log(scale) + 1.0;
}

// The pair index whose wavelength makes `rotations` turns over L0 positions.
double CorrectionDim(double rotations, int d, double base, double l0) {
  return d * std::log(l0 / (rotations * 2.0 * std::numbers::pi)) / (2.0 * std::log(base));
}

}  // namespace

RopeTable ComputeRope(const RopeParams& p, int64_t seq_len) {
  const int d = p.rotary_dim;
  RopeTable t;
  if (p.type == "default") {
    t.inv_freq = Plain(p.theta, d);
  } else if (p.type == "linear") {
    t.inv_freq = Plain(p.theta, d);
    for (double& f : t.inv_freq) f /= p.factor;
  } else if (p.type == "dynamic") {
    const double m = static_cast<double>(p.max_position_embeddings);
    const double len = std::max(static_cast<double>(seq_len), m);
    const double base = p.theta * std::pow(p.factor * len / m - (p.factor - 1.0), d / (d - 2.0));
    t.inv_freq = Plain(base, d);
  } else if (p.type == "llama3") {
    t.inv_freq = Plain(p.theta, d);
    const double l0 = static_cast<double>(p.original_max);
    const double low_wavelen = l0 / p.low_freq_factor, high_wavelen = l0 / p.high_freq_factor;
    for (double& f : t.inv_freq) {
      const double wavelen = 2.0 * std::numbers::pi / f;
      if (wavelen < high_wavelen) continue;
      if (wavelen > low_wavelen) {
        f /= p.factor;
        continue;
      }
      const double smooth =
          (l0 / wavelen - p.low_freq_factor) / (p.high_freq_factor - p.low_freq_factor);
      f = (1.0 - smooth) * f / p.factor + smooth * f;
    }
  } else if (p.type == "yarn") {
    const double l0 = static_cast<double>(p.original_max);
    double low = CorrectionDim(p.beta_fast, d, p.theta, l0);
    double high = CorrectionDim(p.beta_slow, d, p.theta, l0);
    if (p.truncate) {
      low = std::floor(low);
      high = std::ceil(high);
    }
    low = std::max(low, 0.0);
    high = std::min(high, d - 1.0);
    if (low == high) high += 0.001;
    const std::vector<double> base = Plain(p.theta, d);
    for (int i = 0; i < d / 2; ++i) {
      // γ = 1 keeps the original frequency (extrapolation), γ = 0 divides by the factor.
      const double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
      const double gamma = 1.0 - ramp;
      const double theta = base[static_cast<size_t>(i)];
      t.inv_freq.push_back(theta / p.factor * (1.0 - gamma) + theta * gamma);
    }
    if (p.attention_factor) {
      t.attention_factor = *p.attention_factor;
    } else if (p.mscale && p.mscale_all_dim && *p.mscale != 0.0 && *p.mscale_all_dim != 0.0) {
      t.attention_factor =
          YarnMscale(p.factor, *p.mscale) / YarnMscale(p.factor, *p.mscale_all_dim);
    } else {
      t.attention_factor = YarnMscale(p.factor, 1.0);
    }
  } else if (p.type == "longrope") {
    const bool long_ctx = seq_len > p.original_max;
    const std::vector<double>& ext = long_ctx ? p.long_factor : p.short_factor;
    const std::vector<double> base = Plain(p.theta, d);
    for (int i = 0; i < d / 2; ++i)
      t.inv_freq.push_back(base[static_cast<size_t>(i)] / ext[static_cast<size_t>(i)]);
    if (p.attention_factor) {
      t.attention_factor = *p.attention_factor;
    } else {
      t.attention_factor =
          p.factor <= 1.0
              ? 1.0
              : std::sqrt(1.0 + std::log(p.factor) / std::log(static_cast<double>(p.original_max)));
    }
  }
  return t;
}

}  // namespace kvserve::testing::hf
