// RoPE configuration checks, the scaled inverse frequencies (following transformers'
// modeling_rope_utils.py formula by formula, in double), and the reference rotation.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numbers>

#include "pal/error.h"
#include "pal/rope.h"

namespace pal {
namespace {

const char* scaling_name(RopeScaling s) {
  switch (s) {
    case RopeScaling::none: return "none";
    case RopeScaling::linear: return "linear";
    case RopeScaling::ntk: return "ntk";
    case RopeScaling::dynamic_ntk: return "dynamic_ntk";
    case RopeScaling::yarn: return "yarn";
    case RopeScaling::llama3: return "llama3";
  }
  return "?";
}

// YaRN: the (fractional) dimension whose wavelength makes num_rotations turns over the original context.
double yarn_correction_dim(double num_rotations, double dim, double base, double max_pos) {
  return dim * std::log(max_pos / (num_rotations * 2.0 * std::numbers::pi)) / (2.0 * std::log(base));
}

}  // namespace

void validate_rope(const RopeConfig& c) {
  const char* op = "[pal::rope]";
  if (c.head_dim <= 0) throw Error(fmt::format("{} head_dim {} must be positive", op, c.head_dim));
  if (c.rotary_dim < 2 || c.rotary_dim > c.head_dim || c.rotary_dim % 2 != 0) {
    throw Error(fmt::format("{} rotary_dim {} must be even and in [2, head_dim {}]", op, c.rotary_dim,
                            c.head_dim));
  }
  if (!(c.theta > 0.0) || !std::isfinite(c.theta)) throw Error(fmt::format("{} theta {} must be > 0", op, c.theta));
  if (c.layout != RopeLayout::neox && c.layout != RopeLayout::gptj) {
    throw Error(fmt::format("{} unknown layout {}", op, static_cast<int>(c.layout)));
  }
  switch (c.scaling) {
    case RopeScaling::none:
      return;
    case RopeScaling::linear:
    case RopeScaling::ntk:
    case RopeScaling::dynamic_ntk:
    case RopeScaling::yarn:
    case RopeScaling::llama3:
      break;
    default:
      throw Error(fmt::format("{} unknown scaling {}", op, static_cast<int>(c.scaling)));
  }
  if (!(c.factor > 0.0) || !std::isfinite(c.factor)) {
    throw Error(fmt::format("{} {} scaling: factor {} must be > 0", op, scaling_name(c.scaling), c.factor));
  }
  if ((c.scaling == RopeScaling::ntk || c.scaling == RopeScaling::dynamic_ntk) && c.rotary_dim < 4) {
    throw Error(fmt::format("{} {} scaling: rotary_dim {} must be >= 4", op, scaling_name(c.scaling),
                            c.rotary_dim));
  }
  const bool needs_orig = c.scaling == RopeScaling::dynamic_ntk || c.scaling == RopeScaling::yarn ||
                          c.scaling == RopeScaling::llama3;
  if (needs_orig && c.original_max_position <= 0) {
    throw Error(fmt::format("{} {} scaling: original_max_position {} must be positive", op,
                            scaling_name(c.scaling), c.original_max_position));
  }
  if (c.scaling == RopeScaling::dynamic_ntk && c.seq_len < 0) {
    throw Error(fmt::format("{} dynamic_ntk scaling: seq_len {} is negative", op, c.seq_len));
  }
  if (c.scaling == RopeScaling::yarn) {
    if (!(c.yarn_beta_fast > 0.0) || !(c.yarn_beta_slow > 0.0)) {
      throw Error(fmt::format("{} yarn scaling: beta_fast {} and beta_slow {} must be > 0", op,
                              c.yarn_beta_fast, c.yarn_beta_slow));
    }
    if (!(c.yarn_attention_factor >= 0.0) || !std::isfinite(c.yarn_attention_factor)) {
      throw Error(fmt::format("{} yarn scaling: attention factor {} must be >= 0 (0: default)", op,
                              c.yarn_attention_factor));
    }
  }
  if (c.scaling == RopeScaling::llama3 && !(c.llama3_high_freq_factor > c.llama3_low_freq_factor &&
                                            c.llama3_low_freq_factor > 0.0)) {
    throw Error(fmt::format("{} llama3 scaling: need 0 < low_freq_factor {} < high_freq_factor {}", op,
                            c.llama3_low_freq_factor, c.llama3_high_freq_factor));
  }
}

std::vector<double> rope_inv_freq(const RopeConfig& c) {
  validate_rope(c);
  const int dim = c.rotary_dim;
  const int half = dim / 2;
  double base = c.theta;
  if (c.scaling == RopeScaling::ntk) {
    base = c.theta * std::pow(c.factor, static_cast<double>(dim) / (dim - 2));
  } else if (c.scaling == RopeScaling::dynamic_ntk) {
    const double orig = c.original_max_position;
    const double len = std::max<double>(c.seq_len, orig);
    base = c.theta * std::pow(c.factor * len / orig - (c.factor - 1.0), static_cast<double>(dim) / (dim - 2));
  }
  std::vector<double> inv(static_cast<std::size_t>(half));
  for (int i = 0; i < half; ++i) inv[i] = 1.0 / std::pow(base, (2.0 * i) / dim);

  switch (c.scaling) {
    case RopeScaling::linear:
      for (double& f : inv) f /= c.factor;
      break;
    case RopeScaling::yarn: {
      const double orig = c.original_max_position;
      double low = yarn_correction_dim(c.yarn_beta_fast, dim, base, orig);
      double high = yarn_correction_dim(c.yarn_beta_slow, dim, base, orig);
      if (c.yarn_truncate) {
        low = std::floor(low);
        high = std::ceil(high);
      }
      low = std::max(low, 0.0);
      high = std::min(high, static_cast<double>(dim - 1));
      if (low == high) high += 0.001;  // no division by zero in the ramp
      for (int i = 0; i < half; ++i) {
        const double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
        const double extrapolation_factor = 1.0 - ramp;
        const double extrapolated = inv[i];
        const double interpolated = inv[i] / c.factor;
        inv[i] = interpolated * (1.0 - extrapolation_factor) + extrapolated * extrapolation_factor;
      }
      break;
    }
    case RopeScaling::llama3: {
      const double orig = c.original_max_position;
      const double low_wavelen = orig / c.llama3_low_freq_factor;
      const double high_wavelen = orig / c.llama3_high_freq_factor;
      for (double& f : inv) {
        const double wavelen = 2.0 * std::numbers::pi / f;
        if (wavelen > low_wavelen) {
          f /= c.factor;
        } else if (wavelen >= high_wavelen) {  // medium: blend
          const double smooth = (orig / wavelen - c.llama3_low_freq_factor) /
                                (c.llama3_high_freq_factor - c.llama3_low_freq_factor);
          f = (1.0 - smooth) * f / c.factor + smooth * f;
        }
      }
      break;
    }
    default:
      break;
  }
  return inv;
}

double rope_attention_factor(const RopeConfig& c) {
  validate_rope(c);
  if (c.scaling != RopeScaling::yarn) return 1.0;
  if (c.yarn_attention_factor > 0.0) return c.yarn_attention_factor;
  return c.factor <= 1.0 ? 1.0 : 0.1 * std::log(c.factor) + 1.0;
}

void rope_ref(const RopeConfig& config, const std::int32_t* positions, float* x, std::int64_t n_tokens,
              std::int32_t n_heads) {
  const std::vector<double> inv = rope_inv_freq(config);
  const double af = rope_attention_factor(config);
  if (n_tokens < 0 || n_heads < 0) {
    throw Error(fmt::format("[pal::rope_ref] n_tokens {} and n_heads {} must be >= 0", n_tokens, n_heads));
  }
  for (std::int64_t t = 0; t < n_tokens; ++t) {
    if (positions[t] < 0) throw Error(fmt::format("[pal::rope_ref] token {}: position {} is negative", t, positions[t]));
  }
  const int half = config.rotary_dim / 2;
  for (std::int64_t t = 0; t < n_tokens; ++t) {
    for (std::int32_t h = 0; h < n_heads; ++h) {
      float* v = x + (t * n_heads + h) * config.head_dim;
      for (int i = 0; i < half; ++i) {
        const double angle = static_cast<double>(positions[t]) * inv[i];
        const double cs = std::cos(angle) * af;
        const double sn = std::sin(angle) * af;
        const int i0 = config.layout == RopeLayout::neox ? i : 2 * i;
        const int i1 = config.layout == RopeLayout::neox ? i + half : 2 * i + 1;
        const double x0 = v[i0];
        const double x1 = v[i1];
        v[i0] = static_cast<float>(x0 * cs - x1 * sn);
        v[i1] = static_cast<float>(x1 * cs + x0 * sn);
      }
    }
  }
}

}  // namespace pal
