// Scalar reference dot products: weights of each type against activations in vec_dot_type. Each weight
// value is rebuilt as an integer level and its scale, then summed per block as ggml's generic code does;
// f32/f16/bf16 accumulate in double.
#include <array>
#include <cmath>
#include <cstring>

#include "dot.h"
#include "kernels/nf4.h"
#include "quant_common.h"

namespace kernels::detail {
namespace {

using tensor::DType;

float dot_f32(std::int64_t n, const void* w, const void* x) {
  const float* a = static_cast<const float*>(w);
  const float* b = static_cast<const float*>(x);
  double s = 0;
  for (std::int64_t i = 0; i < n; ++i) s += static_cast<double>(a[i]) * b[i];
  return static_cast<float>(s);
}

float dot_f16(std::int64_t n, const void* w, const void* x) {
  const std::uint16_t* a = static_cast<const std::uint16_t*>(w);
  const float* b = static_cast<const float*>(x);
  double s = 0;
  for (std::int64_t i = 0; i < n; ++i) s += static_cast<double>(tensor::f16_to_f32(a[i])) * b[i];
  return static_cast<float>(s);
}

float dot_bf16(std::int64_t n, const void* w, const void* x) {
  const std::uint16_t* a = static_cast<const std::uint16_t*>(w);
  const float* b = static_cast<const float*>(x);
  double s = 0;
  for (std::int64_t i = 0; i < n; ++i) s += static_cast<double>(tensor::bf16_to_f32(a[i])) * b[i];
  return static_cast<float>(s);
}

// ---- against q8_0: level(j) is the integer weight of element j of the block -----------------------

float dot_q4_0(std::int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const tensor::BlockQ4_0*>(w);
  const auto* b = static_cast<const tensor::BlockQ8_0*>(x);
  float sum = 0;
  for (std::int64_t i = 0; i < n / kQK; ++i) {
    int sumi = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      sumi += ((a[i].qs[j] & 0x0F) - 8) * b[i].qs[j] + ((a[i].qs[j] >> 4) - 8) * b[i].qs[j + kQK / 2];
    }
    sum += static_cast<float>(sumi) * (fp16(a[i].d) * fp16(b[i].d));
  }
  return sum;
}

float dot_q4_1(std::int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const tensor::BlockQ4_1*>(w);
  const auto* b = static_cast<const tensor::BlockQ8_0*>(x);
  float sum = 0;
  for (std::int64_t i = 0; i < n / kQK; ++i) {
    int sumi = 0, sumy = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      sumi += (a[i].qs[j] & 0x0F) * b[i].qs[j] + (a[i].qs[j] >> 4) * b[i].qs[j + kQK / 2];
    }
    for (int j = 0; j < kQK; ++j) sumy += b[i].qs[j];
    const float dy = fp16(b[i].d);
    sum += static_cast<float>(sumi) * (fp16(a[i].d) * dy) + fp16(a[i].m) * dy * static_cast<float>(sumy);
  }
  return sum;
}

float dot_q5_0(std::int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const tensor::BlockQ5_0*>(w);
  const auto* b = static_cast<const tensor::BlockQ8_0*>(x);
  float sum = 0;
  for (std::int64_t i = 0; i < n / kQK; ++i) {
    std::uint32_t qh;
    std::memcpy(&qh, a[i].qh, sizeof(qh));
    int sumi = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      const int x0 = ((a[i].qs[j] & 0x0F) | static_cast<int>(((qh >> j) & 1u) << 4)) - 16;
      const int x1 = ((a[i].qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4)) - 16;
      sumi += x0 * b[i].qs[j] + x1 * b[i].qs[j + kQK / 2];
    }
    sum += static_cast<float>(sumi) * (fp16(a[i].d) * fp16(b[i].d));
  }
  return sum;
}

float dot_q5_1(std::int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const tensor::BlockQ5_1*>(w);
  const auto* b = static_cast<const tensor::BlockQ8_0*>(x);
  float sum = 0;
  for (std::int64_t i = 0; i < n / kQK; ++i) {
    std::uint32_t qh;
    std::memcpy(&qh, a[i].qh, sizeof(qh));
    int sumi = 0, sumy = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      const int x0 = (a[i].qs[j] & 0x0F) | static_cast<int>(((qh >> j) & 1u) << 4);
      const int x1 = (a[i].qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
      sumi += x0 * b[i].qs[j] + x1 * b[i].qs[j + kQK / 2];
    }
    for (int j = 0; j < kQK; ++j) sumy += b[i].qs[j];
    const float dy = fp16(b[i].d);
    sum += static_cast<float>(sumi) * (fp16(a[i].d) * dy) + fp16(a[i].m) * dy * static_cast<float>(sumy);
  }
  return sum;
}

float dot_q8_0(std::int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const tensor::BlockQ8_0*>(w);
  const auto* b = static_cast<const tensor::BlockQ8_0*>(x);
  float sum = 0;
  for (std::int64_t i = 0; i < n / kQK; ++i) {
    int sumi = 0;
    for (int j = 0; j < kQK; ++j) sumi += a[i].qs[j] * b[i].qs[j];
    sum += static_cast<float>(sumi) * (fp16(a[i].d) * fp16(b[i].d));
  }
  return sum;
}

// ---- against q8_K: unpack the integer levels of a super-block, then sum per sub-block -------------

// Sum over sub-blocks of `sub` elements: scale[s] * sum(level * q8).
int scaled_isum(const int* level, const int* scale, int sub, const std::int8_t* q8) {
  int total = 0;
  for (int s = 0; s < kQK_K / sub; ++s) {
    int acc = 0;
    for (int l = 0; l < sub; ++l) acc += level[s * sub + l] * q8[s * sub + l];
    total += scale[s] * acc;
  }
  return total;
}

float dot_q2_K(std::int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const tensor::BlockQ2_K*>(w);
  const auto* b = static_cast<const tensor::BlockQ8_K*>(x);
  float sum = 0;
  int level[kQK_K], scale[16];
  for (std::int64_t i = 0; i < n / kQK_K; ++i) {
    for (int e = 0; e < kQK_K; ++e) level[e] = (a[i].qs[(e / 128) * 32 + e % 32] >> (2 * ((e % 128) / 32))) & 3;
    int summs = 0;
    for (int s = 0; s < 16; ++s) {
      scale[s] = a[i].scales[s] & 0xF;
      summs += (a[i].scales[s] >> 4) * b[i].bsums[s];
    }
    const float dall = b[i].d * fp16(a[i].d), dmin = b[i].d * fp16(a[i].dmin);
    sum += dall * static_cast<float>(scaled_isum(level, scale, 16, b[i].qs)) - dmin * static_cast<float>(summs);
  }
  return sum;
}

float dot_q3_K(std::int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const tensor::BlockQ3_K*>(w);
  const auto* b = static_cast<const tensor::BlockQ8_K*>(x);
  float sum = 0;
  int level[kQK_K], scale[16];
  for (std::int64_t i = 0; i < n / kQK_K; ++i) {
    for (int e = 0; e < kQK_K; ++e) {
      const int chunk = e / 128, group = (e % 128) / 32, l = e % 32;
      const int low = (a[i].qs[chunk * 32 + l] >> (2 * group)) & 3;
      const bool high = (a[i].hmask[l] >> (chunk * 4 + group)) & 1;
      level[e] = low - (high ? 0 : 4);
    }
    for (int s = 0; s < 16; ++s) scale[s] = q3_k_scale(a[i].scales, s);
    sum += b[i].d * fp16(a[i].d) * static_cast<float>(scaled_isum(level, scale, 16, b[i].qs));
  }
  return sum;
}

float dot_k4(std::int64_t nb, const std::uint16_t* d, const std::uint16_t* dmin, const std::uint8_t* scales,
             const int* level, const tensor::BlockQ8_K& b) {
  int scale[8], summs = 0;
  for (int s = 0; s < 8; ++s) {
    std::uint8_t sc, m;
    get_scale_min_k4(s, scales, &sc, &m);
    scale[s] = sc;
    summs += m * (b.bsums[2 * s] + b.bsums[2 * s + 1]);
  }
  (void)nb;
  const float dall = b.d * fp16(*d), dm = b.d * fp16(*dmin);
  return dall * static_cast<float>(scaled_isum(level, scale, 32, b.qs)) - dm * static_cast<float>(summs);
}

float dot_q4_K(std::int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const tensor::BlockQ4_K*>(w);
  const auto* b = static_cast<const tensor::BlockQ8_K*>(x);
  float sum = 0;
  int level[kQK_K];
  for (std::int64_t i = 0; i < n / kQK_K; ++i) {
    for (int e = 0; e < kQK_K; ++e) {
      const std::uint8_t q = a[i].qs[(e / 64) * 32 + e % 32];
      level[e] = (e % 64) < 32 ? (q & 0xF) : (q >> 4);
    }
    sum += dot_k4(1, &a[i].d, &a[i].dmin, a[i].scales, level, b[i]);
  }
  return sum;
}

float dot_q5_K(std::int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const tensor::BlockQ5_K*>(w);
  const auto* b = static_cast<const tensor::BlockQ8_K*>(x);
  float sum = 0;
  int level[kQK_K];
  for (std::int64_t i = 0; i < n / kQK_K; ++i) {
    for (int e = 0; e < kQK_K; ++e) {
      const int l = e % 32, sub = e / 32;  // sub-block 0..7; its high bit is bit `sub` of qh[l]
      const std::uint8_t q = a[i].qs[(e / 64) * 32 + l];
      const int low = (e % 64) < 32 ? (q & 0xF) : (q >> 4);
      level[e] = low | (((a[i].qh[l] >> sub) & 1) << 4);
    }
    sum += dot_k4(1, &a[i].d, &a[i].dmin, a[i].scales, level, b[i]);
  }
  return sum;
}

float dot_q6_K(std::int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const tensor::BlockQ6_K*>(w);
  const auto* b = static_cast<const tensor::BlockQ8_K*>(x);
  float sum = 0;
  int level[kQK_K], scale[16];
  for (std::int64_t i = 0; i < n / kQK_K; ++i) {
    for (int e = 0; e < kQK_K; ++e) {
      const int chunk = e / 128, group = (e % 128) / 32, l = e % 32;
      const std::uint8_t ql = a[i].ql[chunk * 64 + (group & 1) * 32 + l];
      const int low = group < 2 ? (ql & 0xF) : (ql >> 4);
      const int high = (a[i].qh[chunk * 32 + l] >> (2 * group)) & 3;
      level[e] = (low | (high << 4)) - 32;
    }
    for (int s = 0; s < 16; ++s) scale[s] = a[i].scales[s];
    sum += b[i].d * fp16(a[i].d) * static_cast<float>(scaled_isum(level, scale, 16, b[i].qs));
  }
  return sum;
}

// nf4 against f32 activations in the lane order of the SIMD kernels, so that every ISA gives the same
// bits: element j of a block goes to lane j % 16 (one fused multiply-add of its level each), a block's 16
// sums are scaled by its absmax into 16 accumulators (fused), and the lanes are reduced l + 8, l + 4, l + 2,
// l + 1.
float dot_nf4(std::int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const tensor::BlockNf4*>(w);
  const float* b = static_cast<const float*>(x);
  const std::array<float, 16>& level = nf4_levels();
  float acc[16] = {};
  for (std::int64_t i = 0; i < n / tensor::kQK_NF4; ++i) {
    const float* xb = b + i * tensor::kQK_NF4;
    float s[16] = {};
    for (int j = 0; j < tensor::kQK_NF4; ++j) {
      const std::uint8_t byte = a[i].qs[j / 2];
      const int q = (j % 2 == 0) ? (byte >> 4) : (byte & 0xF);
      s[j % 16] = std::fma(level[q], xb[j], s[j % 16]);
    }
    for (int l = 0; l < 16; ++l) acc[l] = std::fma(a[i].absmax, s[l], acc[l]);
  }
  for (int width = 8; width >= 1; width /= 2) {
    for (int l = 0; l < width; ++l) acc[l] += acc[l + width];
  }
  return acc[0];
}

}  // namespace

DotFn dot_ref_fn(DType w) {
  switch (w) {
    case DType::f32: return dot_f32;
    case DType::f16: return dot_f16;
    case DType::bf16: return dot_bf16;
    case DType::q4_0: return dot_q4_0;
    case DType::q4_1: return dot_q4_1;
    case DType::q5_0: return dot_q5_0;
    case DType::q5_1: return dot_q5_1;
    case DType::q8_0: return dot_q8_0;
    case DType::q2_K: return dot_q2_K;
    case DType::q3_K: return dot_q3_K;
    case DType::q4_K: return dot_q4_K;
    case DType::q5_K: return dot_q5_K;
    case DType::q6_K: return dot_q6_K;
    case DType::q8_K: return nullptr;  // activation-only type: no weight kernel (as in ggml)
    case DType::nf4: return dot_nf4;
  }
  return nullptr;
}

}  // namespace kernels::detail
