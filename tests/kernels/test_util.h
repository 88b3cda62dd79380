// Helpers of the kernels tests: seeded random inputs, NaN poisoning, tolerances.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/matmul.h"
#include "kernels/quant.h"
#include "tensor/dtype.h"

namespace kernels::testing {

// Weight-like values: normal, with a few outliers.
inline std::vector<float> random_floats(std::int64_t n, std::uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (float& x : v) x = dist(rng);
  std::uniform_int_distribution<std::int64_t> pick(0, n > 0 ? n - 1 : 0);
  for (int i = 0; i < 4 && n > 0; ++i) v[static_cast<std::size_t>(pick(rng))] *= 8.0f;
  return v;
}

// Fills with NaN so an element a kernel fails to write shows in the comparison.
inline void poison(std::vector<float>& v) { std::fill(v.begin(), v.end(), std::numeric_limits<float>::quiet_NaN()); }

// Max |a - b| / (max |b| + tiny); NaN anywhere gives +inf.
inline double max_rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  double scale = 1e-30, err = 0;
  for (float x : b) scale = std::max(scale, static_cast<double>(std::fabs(x)));
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) || std::isnan(b[i])) return std::numeric_limits<double>::infinity();
    err = std::max(err, std::fabs(static_cast<double>(a[i]) - b[i]));
  }
  return err / scale;
}

// A [n_out, n_in] weight matrix of type t (random_floats at scale 0.5, quantized by the reference) and the
// MatmulParams that view its bytes.
struct Weights {
  std::vector<unsigned char> bytes;
  MatmulParams params;
};

inline Weights make_weights(tensor::DType t, std::int64_t n_out, std::int64_t n_in, std::uint32_t seed) {
  Weights w;
  const std::vector<float> f = random_floats(n_out * n_in, seed, 0.5f);
  const std::size_t row = tensor::row_bytes(t, n_in);
  w.bytes.resize(row * static_cast<std::size_t>(n_out));
  for (std::int64_t r = 0; r < n_out; ++r) {
    quantize_row_ref(t, f.data() + r * n_in, w.bytes.data() + static_cast<std::size_t>(r) * row, n_in);
  }
  w.params = {t, w.bytes.data(), 0, n_out, n_in};
  return w;
}

}  // namespace kernels::testing
