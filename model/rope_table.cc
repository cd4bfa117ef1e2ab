#include "model/rope_table.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace kvserve::model {
namespace {

// YaRN (https://arxiv.org/abs/2309.00071, section 3.2): the dimension whose wavelength
// fits `rotations` times into the original context.
double CorrectionDim(double rotations, int dim, double base, double original) {
  return dim * std::log(original / (rotations * 2 * std::numbers::pi)) / (2 * std::log(base));
}

double YarnMscale(double scale, double mscale) { return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; }

}  // namespace

RopeTable ComputeRopeTable(const ModelConfig& c, double base, bool scaled) {
  const int dim = c.rotary_dim > 0 ? c.rotary_dim : c.head_dim;
  const int half = dim / 2;
  const RopeScaling& rs = c.rope_scaling;
  const RopeScalingKind kind = scaled ? rs.kind : RopeScalingKind::kNone;
  RopeTable t;
  t.inv_freq.resize(static_cast<size_t>(half));
  const double served = static_cast<double>(c.served_context > 0 ? c.served_context : c.max_position_embeddings);
  const double original = static_cast<double>(rs.original_max_position_embeddings);
  if (kind == RopeScalingKind::kDynamic && served > original) {
    base *= std::pow(rs.factor * served / original - (rs.factor - 1), static_cast<double>(dim) / (dim - 2));
  }
  // YaRN's ramp between interpolated (low frequencies) and extrapolated (high) dims.
  double low = 0, high = 0;
  if (kind == RopeScalingKind::kYarn) {
    low = CorrectionDim(rs.beta_fast, dim, base, original);
    high = CorrectionDim(rs.beta_slow, dim, base, original);
    if (rs.truncate) {
      low = std::floor(low);
      high = std::ceil(high);
    }
    low = std::max(low, 0.0);
    high = std::min(high, static_cast<double>(dim - 1));
    if (low == high) high += 0.001;
  }
  const std::vector<double>& ext =
      served > original ? rs.long_factor : rs.short_factor;  // longrope only
  for (int f = 0; f < half; ++f) {
    const double plain = 1.0 / std::pow(base, 2.0 * f / dim);
    double inv = plain;
    switch (kind) {
      case RopeScalingKind::kNone:
      case RopeScalingKind::kDynamic:
        break;
      case RopeScalingKind::kLinear:
        inv /= rs.factor;  // positions divided by factor
        break;
      case RopeScalingKind::kLlama3: {
        const double low_freq_wavelen = original / rs.low_freq_factor;
        const double high_freq_wavelen = original / rs.high_freq_factor;
        const double wavelen = 2.0 * std::numbers::pi / inv;
        if (wavelen > low_freq_wavelen) {
          inv /= rs.factor;  // long wavelengths: fully interpolated
        } else if (wavelen >= high_freq_wavelen) {
          // Medium band: blend between interpolated and original.
          const double smooth = (original / wavelen - rs.low_freq_factor) / (rs.high_freq_factor - rs.low_freq_factor);
          inv = (1.0 - smooth) * inv / rs.factor + smooth * inv;
        }
        break;
      }
      case RopeScalingKind::kYarn: {
        const double ramp = std::clamp((f - low) / (high - low), 0.0, 1.0);
        const double extrapolation = 1.0 - ramp;  // 1: keep the original frequency
        inv = plain / rs.factor * (1.0 - extrapolation) + plain * extrapolation;
        break;
      }
      case RopeScalingKind::kLongRope:
        inv = plain / ext[static_cast<size_t>(f)];
        break;
    }
    t.inv_freq[static_cast<size_t>(f)] = static_cast<float>(inv);
  }
  if (kind == RopeScalingKind::kYarn) {
    double af = 0;
    if (rs.attention_factor) {
      af = *rs.attention_factor;
    } else if (rs.mscale != 0 && rs.mscale_all_dim != 0) {
      af = YarnMscale(rs.factor, rs.mscale) / YarnMscale(rs.factor, rs.mscale_all_dim);
    } else {
      af = YarnMscale(rs.factor, 1.0);
    }
    t.attention_factor = static_cast<float>(af);
  } else if (kind == RopeScalingKind::kLongRope) {
    const double s = static_cast<double>(c.max_position_embeddings) / original;
    t.attention_factor = static_cast<float>(
        rs.attention_factor ? *rs.attention_factor : (s <= 1 ? 1.0 : std::sqrt(1 + std::log(s) / std::log(original))));
  }
  return t;
}

}  // namespace kvserve::model
