#include "sampling/vector_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace pie::sampling_detail {

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// GCC/Clang vector extensions of 16 bytes (the x86-64 baseline SSE2 width, so no ABI change without AVX).
// Casts between same-size vector types reinterpret the bits.
typedef float V4F __attribute__((vector_size(16)));
typedef std::int32_t V4I __attribute__((vector_size(16)));
typedef float V2F __attribute__((vector_size(8)));
typedef double V2D __attribute__((vector_size(16)));
constexpr std::size_t kW = 4;

inline V4F load(const float* p) {
  V4F v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline V4F splat(float x) { return V4F{} + x; }
// mask lanes (all ones / zero) ? a : b
inline V4F select(V4I mask, V4F a, V4F b) { return (V4F)(((V4I)a & mask) | ((V4I)b & ~mask)); }


// exp(x) for x <= 0 (Cephes expf: round-to-nearest range reduction by ln 2, degree-6 polynomial, the
// exponent put in by bit arithmetic; within 2 ulp). Below -87 (exp < 1.7e-38), -inf and NaN give 0.
// Plain IEEE adds and multiplies (no FMA), so every width gives bit-identical results.
// Vectors go by reference: no vector is passed or returned by value, so no ABI question arises.
template <class VF, class VI>
[[gnu::always_inline]] inline void exp_nonpositive(const VF& x, VF& out) {
  const VF lo = VF{} + -87.0f;
  const VI tiny = ~(VI)(x >= lo);
  const VF xc = (VF)(((VI)lo & tiny) | ((VI)x & ~tiny));
  // Round to nearest with the 1.5 * 2^23 trick (exact without -ffast-math, which this file is not built with).
  const VF n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  VF r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  VF p = VF{} + 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const VF y = p * r * r + r + 1.0f;
  const VI e = (__builtin_convertvector(n, VI) + 127) << 23;
  out = (VF)((VI)(y * (VF)e) & ~tiny);
}

// out[i] = exp((in[i] - max) * scale), zeroed below floor, W lanes at a time.
template <class VF, class VI>
[[gnu::always_inline]] inline std::size_t exp_shifted_lanes(const float* in, std::size_t n, float max, float scale,
                                                           float floor, float* out) {
  constexpr std::size_t w = sizeof(VF) / sizeof(float);
  const VF vmax = VF{} + max, vscale = VF{} + scale, vfloor = VF{} + floor;
  std::size_t i = 0;
  for (; i + w <= n; i += w) {
    VF x;
    std::memcpy(&x, in + i, sizeof x);
    VF e;
    exp_nonpositive<VF, VI>((x - vmax) * vscale, e);
    const VF r = (VF)((VI)e & ~(VI)(e < vfloor));
    std::memcpy(out + i, &r, sizeof r);
  }
  return i;
}

#if defined(__x86_64__) || defined(__i386__)
typedef float V8F __attribute__((vector_size(32)));
typedef std::int32_t V8I __attribute__((vector_size(32)));

__attribute__((target("avx2"))) std::size_t exp_shifted_avx2(const float* in, std::size_t n, float max,
                                                             float scale, float floor, float* out) {
  return exp_shifted_lanes<V8F, V8I>(in, n, max, scale, floor, out);
}

bool have_avx2() {
  static const bool yes = (__builtin_cpu_init(), __builtin_cpu_supports("avx2") != 0);
  return yes;
}
#endif

inline float exp_nonpositive(float x) {
  V4F v;
  exp_nonpositive<V4F, V4I>(splat(x), v);
  return v[0];
}

}  // namespace

MaxResult find_max(std::span<const float> x) {
  const std::size_t n = x.size();
  const float* p = x.data();
  // Four independent accumulators: the compare-and-select chain of one would bound the loop by latency.
  V4F m0 = splat(-kInf), m1 = m0, m2 = m0, m3 = m0;
  V4I bad{};
  const V4F inf = splat(kInf);
  std::size_t i = 0;
  for (; i + 4 * kW <= n; i += 4 * kW) {
    const V4F a = load(p + i), b = load(p + i + kW), c = load(p + i + 2 * kW), d = load(p + i + 3 * kW);
    m0 = select(a > m0, a, m0);
    m1 = select(b > m1, b, m1);
    m2 = select(c > m2, c, m2);
    m3 = select(d > m3, d, m3);
    bad |= ~((a < inf) & (b < inf) & (c < inf) & (d < inf));  // NaN or +inf
  }
  m0 = select(m1 > m0, m1, m0);
  m2 = select(m3 > m2, m3, m2);
  m0 = select(m2 > m0, m2, m0);
  float mx = -kInf;
  bool any_bad = false;
  for (std::size_t j = 0; j < kW; ++j) {
    mx = m0[j] > mx ? m0[j] : mx;
    any_bad |= bad[j] != 0;
  }
  for (; i < n; ++i) {
    mx = p[i] > mx ? p[i] : mx;
    any_bad |= !(p[i] < kInf);
  }
  MaxResult r{mx, -1, -1};
  if (any_bad) {
    for (std::size_t k = 0; k < n; ++k) {
      if (!(p[k] < kInf)) {
        r.bad = static_cast<std::int64_t>(k);
        break;
      }
    }
    return r;
  }
  if (mx == -kInf) return r;
  // The first index holding the max: skip 16 at a time while no lane matches.
  const V4F vm = splat(mx);
  std::size_t k = 0;
  for (; k + 4 * kW <= n; k += 4 * kW) {
    const V4I hit = (load(p + k) == vm) | (load(p + k + kW) == vm) | (load(p + k + 2 * kW) == vm) |
                    (load(p + k + 3 * kW) == vm);
    if ((hit[0] | hit[1] | hit[2] | hit[3]) != 0) break;
  }
  for (; k < n; ++k) {
    if (p[k] == mx) {
      r.first = static_cast<std::int64_t>(k);
      break;
    }
  }
  return r;
}

std::size_t next_above(std::span<const float> x, std::size_t from, float threshold) {
  const std::size_t n = x.size();
  const float* p = x.data();
  std::size_t k = from;
  // Scalar up to a multiple of 16 from `from`, so the vector loop below starts on a block.
  for (std::size_t stop = std::min(n, from + 4 * kW); k < stop; ++k) {
    if (p[k] > threshold) return k;
  }
  const V4F t = splat(threshold);
  for (; k + 4 * kW <= n; k += 4 * kW) {
    const V4I hit = (load(p + k) > t) | (load(p + k + kW) > t) | (load(p + k + 2 * kW) > t) |
                    (load(p + k + 3 * kW) > t);
    if ((hit[0] | hit[1] | hit[2] | hit[3]) != 0) break;
  }
  for (; k < n; ++k) {
    if (p[k] > threshold) return k;
  }
  return n;
}

void exp_shifted(std::span<const float> x, float max, float scale, float floor, float* out) {
  const std::size_t n = x.size();
  const float* in = x.data();
#if defined(__x86_64__) || defined(__i386__)
  std::size_t i = have_avx2() ? exp_shifted_avx2(in, n, max, scale, floor, out)
                              : exp_shifted_lanes<V4F, V4I>(in, n, max, scale, floor, out);
#else
  std::size_t i = exp_shifted_lanes<V4F, V4I>(in, n, max, scale, floor, out);
#endif
  for (; i < n; ++i) {
    const float w = exp_nonpositive((in[i] - max) * scale);
    out[i] = w < floor ? 0.0f : w;
  }
}

double block_sums(std::span<const float> w, double* sums) {
  const std::size_t n = w.size();
  double total = 0;
  for (std::size_t b = 0, start = 0; start < n; ++b, start += kSumBlock) {
    const std::size_t end = start + kSumBlock < n ? start + kSumBlock : n;
    V2D acc[4] = {};  // two doubles each; four chains so the adds overlap
    std::size_t i = start;
    for (; i + 2 * kW <= end; i += 2 * kW) {
      for (std::size_t j = 0; j < 4; ++j) {
        V2F a;
        std::memcpy(&a, w.data() + i + 2 * j, sizeof a);
        acc[j] += __builtin_convertvector(a, V2D);
      }
    }
    const V2D t = (acc[0] + acc[1]) + (acc[2] + acc[3]);
    double s = t[0] + t[1];
    for (; i < end; ++i) s += static_cast<double>(w[i]);
    sums[b] = s;
    total += s;
  }
  return total;
}

std::size_t pick_weighted(std::span<const float> w, const double* sums, double target) {
  const std::size_t n = w.size();
  const std::size_t n_blocks = (n + kSumBlock - 1) / kSumBlock;
  // The block where the running sum passes target (the last non-empty block if rounding prevents it).
  std::size_t b = 0, last_nonempty = 0;
  double before = 0;
  for (; b < n_blocks; ++b) {
    if (sums[b] > 0) last_nonempty = b;
    if (before + sums[b] > target && sums[b] > 0) break;
    before += sums[b];
  }
  if (b == n_blocks) {
    b = last_nonempty;
    before = -std::numeric_limits<double>::infinity();  // take the block's last positive weight
  }
  const std::size_t start = b * kSumBlock;
  const std::size_t end = start + kSumBlock < n ? start + kSumBlock : n;
  double cum = before;
  std::size_t chosen = start;
  for (std::size_t i = start; i < end; ++i) {
    if (w[i] <= 0) continue;
    chosen = i;
    cum += static_cast<double>(w[i]);
    if (cum > target) break;
  }
  return chosen;
}

}  // namespace pie::sampling_detail
