#include "model/weights.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <numbers>

#include "pal/error.h"
#include "pie/error.h"

namespace pie {

Weight weight_view(const void* data, std::size_t bytes, tensor::DType type, std::int64_t n_out, std::int64_t n_in) {
  // The model's storage owns the bytes; the tensor only views them (read-only).
  tensor::Buffer buffer = tensor::Buffer::borrow(const_cast<void*>(data), bytes, /*writable=*/false);
  if (n_out == 0) return tensor::Tensor::view(buffer, 0, type, {n_in});
  return tensor::Tensor::view(buffer, 0, type, {n_out, n_in});
}

}  // namespace pie

namespace pie::model_detail {

Weight own_f32(Model& model, std::vector<float> values) {
  auto buffer = std::make_shared<const std::vector<float>>(std::move(values));
  model.storage.push_back(buffer);
  return weight_view(buffer->data(), buffer->size() * sizeof(float), tensor::DType::f32, 0,
                     static_cast<std::int64_t>(buffer->size()));
}

const char* gguf_arch_name(Architecture arch) {
  return arch == Architecture::mistral ? "llama" : architecture_name(arch);
}

bool gguf_rope_is_neox(Architecture arch) {
  return arch != Architecture::llama && arch != Architecture::mistral;
}

std::vector<float> llama3_rope_factors(const pal::RopeConfig& rope) {
  const double two_pi = 2 * std::numbers::pi;
  const double low_wavelen = rope.original_max_position / rope.llama3_low_freq_factor;
  const double high_wavelen = rope.original_max_position / rope.llama3_high_freq_factor;
  std::vector<float> out;
  for (std::int32_t i = 0; i < rope.rotary_dim / 2; ++i) {
    const double freq = std::pow(rope.theta, -2.0 * i / rope.rotary_dim);
    const double wavelen = two_pi / freq;
    double f;
    if (wavelen < high_wavelen) {
      f = 1;
    } else if (wavelen > low_wavelen) {
      f = rope.factor;
    } else {
      const double smooth = (rope.original_max_position / wavelen - rope.llama3_low_freq_factor) /
                            (rope.llama3_high_freq_factor - rope.llama3_low_freq_factor);
      f = 1 / ((1 - smooth) / rope.factor + smooth);
    }
    out.push_back(static_cast<float>(f));
  }
  return out;
}

void fit_llama3_rope(pal::RopeConfig& rope, std::span<const float> factors, std::int32_t original_max_position,
                     const std::string& where) {
  auto fail = [&](const std::string& what) {
    throw ModelError(fmt::format("[model] {}: rope_freqs.weight: {}", where, what));
  };
  if (static_cast<std::int64_t>(factors.size()) != rope.rotary_dim / 2) {
    fail(fmt::format("{} factors for {} rotary pairs", factors.size(), rope.rotary_dim / 2));
  }
  double factor = 0;
  for (float f : factors) {
    if (!(std::isfinite(f) && f > 0)) fail(fmt::format("factor {} is not positive", f));
    factor = std::max(factor, static_cast<double>(f));
  }
  if (factor <= 1.0 + 1e-6) return;  // no scaling
  // Pairs between the two wavelength bounds satisfy smooth = x / (high - low) - low / (high - low) with
  // x = original / wavelength: a line through (x, smooth), fitted on the first and last of them.
  const double two_pi = 2 * std::numbers::pi;
  std::vector<std::pair<double, double>> mid;  // (x, smooth)
  for (std::size_t i = 0; i < factors.size(); ++i) {
    const double d = factors[i];
    if (d <= 1.0 + 1e-4 || d >= factor * (1 - 1e-4)) continue;
    const double freq = std::pow(rope.theta, -2.0 * static_cast<double>(i) / rope.rotary_dim);
    const double smooth = (1 / d - 1 / factor) / (1 - 1 / factor);
    mid.emplace_back(original_max_position / (two_pi / freq), smooth);
  }
  pal::RopeConfig fit = rope;
  fit.scaling = pal::RopeScaling::llama3;
  fit.factor = factor;
  fit.original_max_position = original_max_position;
  if (mid.size() >= 2 && mid.back().first != mid.front().first) {
    const double slope = (mid.back().second - mid.front().second) / (mid.back().first - mid.front().first);
    const double intercept = mid.front().second - slope * mid.front().first;
    if (slope <= 0) fail("the factors do not follow llama3 scaling");
    fit.llama3_low_freq_factor = -intercept / slope;
    fit.llama3_high_freq_factor = fit.llama3_low_freq_factor + 1 / slope;
  }
  try {
    pal::validate_rope(fit);
  } catch (const pal::Error& e) {
    fail(fmt::format("the fitted llama3 scaling is invalid: {}", e.what()));
  }
  const std::vector<float> check = llama3_rope_factors(fit);
  for (std::size_t i = 0; i < factors.size(); ++i) {
    if (std::abs(check[i] - factors[i]) > 1e-3 * factors[i]) {
      fail(fmt::format("factor {} of pair {} does not follow llama3 scaling (factor {}, low {}, high {}, original "
                       "context {} give {})",
                       factors[i], i, fit.factor, fit.llama3_low_freq_factor, fit.llama3_high_freq_factor,
                       original_max_position, check[i]));
    }
  }
  rope = fit;
}

}  // namespace pie::model_detail
