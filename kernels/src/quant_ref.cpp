// Scalar reference quantization and dequantization, following ggml-quants.c's *_ref functions operation
// for operation (same float expressions, same order), so the bytes match ggml and gguf-py exactly; nf4
// follows bitsandbytes' quantize_4bit / dequantize_4bit the same way.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/nf4.h"
#include "kernels/quant.h"
#include "quant_common.h"

namespace kernels {
namespace {

using namespace detail;
using tensor::DType;

constexpr float kGroupMaxEps = 1e-15f;

// ---- _0 / _1 types -----------------------------------------------------------------------------------

void quantize_q4_0(const float* x, tensor::BlockQ4_0* y, std::int64_t nb) {
  for (std::int64_t i = 0; i < nb; ++i, x += kQK) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < kQK; ++j) {
      if (amax < std::fabs(x[j])) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    const float d = max / -8;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = to_fp16(d);
    for (int j = 0; j < kQK / 2; ++j) {
      const float x0 = x[j] * id;
      const float x1 = x[kQK / 2 + j] * id;
      const std::uint8_t xi0 = static_cast<std::uint8_t>(std::min(15, static_cast<int>(static_cast<std::int8_t>(x0 + 8.5f))));
      const std::uint8_t xi1 = static_cast<std::uint8_t>(std::min(15, static_cast<int>(static_cast<std::int8_t>(x1 + 8.5f))));
      y[i].qs[j] = static_cast<std::uint8_t>(xi0 | (xi1 << 4));
    }
  }
}

void quantize_q4_1(const float* x, tensor::BlockQ4_1* y, std::int64_t nb) {
  for (std::int64_t i = 0; i < nb; ++i, x += kQK) {
    float min = 3.402823466e+38f, max = -3.402823466e+38f;
    for (int j = 0; j < kQK; ++j) {
      if (x[j] < min) min = x[j];
      if (x[j] > max) max = x[j];
    }
    const float d = (max - min) / ((1 << 4) - 1);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = to_fp16(d);
    y[i].m = to_fp16(min);
    for (int j = 0; j < kQK / 2; ++j) {
      const float x0 = (x[j] - min) * id;
      const float x1 = (x[kQK / 2 + j] - min) * id;
      const std::uint8_t xi0 = static_cast<std::uint8_t>(std::min(15, static_cast<int>(static_cast<std::int8_t>(x0 + 0.5f))));
      const std::uint8_t xi1 = static_cast<std::uint8_t>(std::min(15, static_cast<int>(static_cast<std::int8_t>(x1 + 0.5f))));
      y[i].qs[j] = static_cast<std::uint8_t>(xi0 | (xi1 << 4));
    }
  }
}

void quantize_q5_0(const float* x, tensor::BlockQ5_0* y, std::int64_t nb) {
  for (std::int64_t i = 0; i < nb; ++i, x += kQK) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < kQK; ++j) {
      if (amax < std::fabs(x[j])) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    const float d = max / -16;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = to_fp16(d);
    std::uint32_t qh = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      const float x0 = x[j] * id;
      const float x1 = x[kQK / 2 + j] * id;
      const std::uint8_t xi0 = static_cast<std::uint8_t>(std::min(31, static_cast<int>(static_cast<std::int8_t>(x0 + 16.5f))));
      const std::uint8_t xi1 = static_cast<std::uint8_t>(std::min(31, static_cast<int>(static_cast<std::int8_t>(x1 + 16.5f))));
      y[i].qs[j] = static_cast<std::uint8_t>((xi0 & 0x0F) | ((xi1 & 0x0F) << 4));
      qh |= ((xi0 & 0x10u) >> 4) << (j + 0);
      qh |= ((xi1 & 0x10u) >> 4) << (j + kQK / 2);
    }
    std::memcpy(y[i].qh, &qh, sizeof(qh));
  }
}

void quantize_q5_1(const float* x, tensor::BlockQ5_1* y, std::int64_t nb) {
  for (std::int64_t i = 0; i < nb; ++i, x += kQK) {
    float min = x[0], max = x[0];
    for (int j = 1; j < kQK; ++j) {
      if (x[j] < min) min = x[j];
      if (x[j] > max) max = x[j];
    }
    const float d = (max - min) / ((1 << 5) - 1);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = to_fp16(d);
    y[i].m = to_fp16(min);
    std::uint32_t qh = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      const float x0 = (x[j] - min) * id;
      const float x1 = (x[kQK / 2 + j] - min) * id;
      const std::uint8_t xi0 = static_cast<std::uint8_t>(x0 + 0.5f);
      const std::uint8_t xi1 = static_cast<std::uint8_t>(x1 + 0.5f);
      y[i].qs[j] = static_cast<std::uint8_t>((xi0 & 0x0F) | ((xi1 & 0x0F) << 4));
      qh |= ((xi0 & 0x10u) >> 4) << (j + 0);
      qh |= ((xi1 & 0x10u) >> 4) << (j + kQK / 2);
    }
    std::memcpy(y[i].qh, &qh, sizeof(qh));
  }
}

void quantize_q8_0(const float* x, tensor::BlockQ8_0* y, std::int64_t nb) {
  for (std::int64_t i = 0; i < nb; ++i, x += kQK) {
    float amax = 0.0f;
    for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / ((1 << 7) - 1);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = to_fp16(d);
    for (int j = 0; j < kQK; ++j) y[i].qs[j] = static_cast<std::int8_t>(std::roundf(x[j] * id));
  }
}

// ---- K types: the search helpers of ggml-quants.c ----------------------------------------------------

// Best symmetric scale for n values into [-nmax, nmax - 1] (L holds l + nmax). rmse_type 1: weights x^2.
float make_qx_quants(int n, int nmax, const float* x, std::int8_t* L, int rmse_type) {
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.f;
  }
  float iscale = -nmax / max;
  if (rmse_type == 0) {
    for (int i = 0; i < n; ++i) {
      const int l = nearest_int(iscale * x[i]);
      L[i] = static_cast<std::int8_t>(nmax + std::max(-nmax, std::min(nmax - 1, l)));
    }
    return 1 / iscale;
  }
  auto weight = [&](int i) {
    return rmse_type == 1 ? x[i] * x[i] : rmse_type == 2 ? 1.0f : rmse_type == 3 ? std::fabs(x[i]) : std::sqrt(std::fabs(x[i]));
  };
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    int l = nearest_int(iscale * x[i]);
    l = std::max(-nmax, std::min(nmax - 1, l));
    L[i] = static_cast<std::int8_t>(l + nmax);
    const float w = weight(i);
    sumlx += w * x[i] * l;
    suml2 += w * l * l;
  }
  float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(nmax + 0.1f * is) / max;
    sumlx = suml2 = 0;
    for (int i = 0; i < n; ++i) {
      int l = nearest_int(iscale * x[i]);
      l = std::max(-nmax, std::min(nmax - 1, l));
      const float w = weight(i);
      sumlx += w * x[i] * l;
      suml2 += w * l * l;
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i) {
        const int l = nearest_int(iscale * x[i]);
        L[i] = static_cast<std::int8_t>(nmax + std::max(-nmax, std::min(nmax - 1, l)));
      }
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// q3_K's scale search: start from the max, then refine each value while the weighted error drops.
float make_q3_quants(int n, int nmax, const float* x, std::int8_t* L) {
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.f;
  }
  const float iscale = -nmax / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    int l = nearest_int(iscale * x[i]);
    l = std::max(-nmax, std::min(nmax - 1, l));
    L[i] = static_cast<std::int8_t>(l);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * l;
    suml2 += w * l * l;
  }
  for (int itry = 0; itry < 5; ++itry) {
    int n_changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = x[i] * x[i];
      float slx = sumlx - w * x[i] * L[i];
      if (slx > 0) {
        float sl2 = suml2 - w * L[i] * L[i];
        int new_l = nearest_int(x[i] * sl2 / slx);
        new_l = std::max(-nmax, std::min(nmax - 1, new_l));
        if (new_l != L[i]) {
          slx += w * x[i] * new_l;
          sl2 += w * new_l * new_l;
          if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
            L[i] = static_cast<std::int8_t>(new_l);
            sumlx = slx;
            suml2 = sl2;
            ++n_changed;
          }
        }
      }
    }
    if (n_changed == 0) break;
  }
  for (int i = 0; i < n; ++i) L[i] = static_cast<std::int8_t>(L[i] + nmax);
  return sumlx / suml2;
}

// Best (scale, min) for n values into [0, nmax] under weights, searching nstep scales around the range.
float make_qkx2_quants(int n, int nmax, const float* x, const float* weights, std::uint8_t* L,
                       float* the_min, std::uint8_t* Laux, float rmin, float rdelta, int nstep,
                       bool use_mad) {
  float min = x[0], max = x[0];
  float sum_w = weights[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    const float w = weights[i];
    sum_w += w;
    sum_x += w * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    *the_min = -min;
    return 0.f;
  }
  float iscale = nmax / (max - min);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    const int l = nearest_int(iscale * (x[i] - min));
    L[i] = static_cast<std::uint8_t>(std::max(0, std::min(nmax, l)));
    float diff = scale * L[i] + min - x[i];
    diff = use_mad ? std::fabs(diff) : diff * diff;
    best_error += weights[i] * diff;
  }
  if (nstep < 1) {
    *the_min = -min;
    return scale;
  }
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * is + nmax) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      int l = nearest_int(iscale * (x[i] - min));
      l = std::max(0, std::min(nmax, l));
      Laux[i] = static_cast<std::uint8_t>(l);
      const float w = weights[i];
      sum_l += w * l;
      sum_l2 += w * l * l;
      sum_xl += w * l * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float cur_error = 0;
      for (int i = 0; i < n; ++i) {
        float diff = this_scale * Laux[i] + this_min - x[i];
        diff = use_mad ? std::fabs(diff) : diff * diff;
        cur_error += weights[i] * diff;
      }
      if (cur_error < best_error) {
        for (int i = 0; i < n; ++i) L[i] = Laux[i];
        best_error = cur_error;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *the_min = -min;
  return scale;
}

// ---- K types -----------------------------------------------------------------------------------------

void quantize_q2_K(const float* x, tensor::BlockQ2_K* y, std::int64_t nb) {
  std::uint8_t L[kQK_K], Laux[16];
  float weights[16], mins[kQK_K / 16], scales[kQK_K / 16];
  const float q4scale = 15.f;
  for (std::int64_t i = 0; i < nb; ++i, x += kQK_K) {
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < kQK_K / 16; ++j) {
      for (int l = 0; l < 16; ++l) weights[l] = std::fabs(x[16 * j + l]);
      scales[j] = make_qkx2_quants(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], Laux, -0.5f, 0.1f, 15, true);
      if (scales[j] > max_scale) max_scale = scales[j];
      if (mins[j] > max_min) max_min = mins[j];
    }
    if (max_scale > 0) {
      const float iscale = q4scale / max_scale;
      for (int j = 0; j < kQK_K / 16; ++j) y[i].scales[j] = static_cast<std::uint8_t>(nearest_int(iscale * scales[j]));
      y[i].d = to_fp16(max_scale / q4scale);
    } else {
      for (int j = 0; j < kQK_K / 16; ++j) y[i].scales[j] = 0;
      y[i].d = to_fp16(0.f);
    }
    if (max_min > 0) {
      const float iscale = q4scale / max_min;
      for (int j = 0; j < kQK_K / 16; ++j) {
        const int l = nearest_int(iscale * mins[j]);
        y[i].scales[j] = static_cast<std::uint8_t>(y[i].scales[j] | (l << 4));
      }
      y[i].dmin = to_fp16(max_min / q4scale);
    } else {
      y[i].dmin = to_fp16(0.f);
    }
    for (int j = 0; j < kQK_K / 16; ++j) {
      const float d = fp16(y[i].d) * (y[i].scales[j] & 0xF);
      if (d == 0.0f) continue;
      const float dm = fp16(y[i].dmin) * (y[i].scales[j] >> 4);
      for (int ii = 0; ii < 16; ++ii) {
        const int l = nearest_int((x[16 * j + ii] + dm) / d);
        L[16 * j + ii] = static_cast<std::uint8_t>(std::max(0, std::min(3, l)));
      }
    }
    for (int j = 0; j < kQK_K; j += 128) {
      for (int l = 0; l < 32; ++l) {
        y[i].qs[j / 4 + l] = static_cast<std::uint8_t>(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) |
                                                      (L[j + l + 96] << 6));
      }
    }
  }
}

void quantize_q3_K(const float* x, tensor::BlockQ3_K* y, std::int64_t nb) {
  std::int8_t L[kQK_K];
  float scales[kQK_K / 16];
  for (std::int64_t i = 0; i < nb; ++i, x += kQK_K) {
    float max_scale = 0, amax = 0;
    for (int j = 0; j < kQK_K / 16; ++j) {
      scales[j] = make_q3_quants(16, 4, x + 16 * j, L + 16 * j);
      const float scale = std::fabs(scales[j]);
      if (scale > amax) {
        amax = scale;
        max_scale = scales[j];
      }
    }
    std::memset(y[i].scales, 0, 12);
    if (max_scale != 0.0f) {
      const float iscale = -32.f / max_scale;
      for (int j = 0; j < kQK_K / 16; ++j) {
        int l = static_cast<std::int8_t>(nearest_int(iscale * scales[j]));
        l = std::max(-32, std::min(31, l)) + 32;
        if (j < 8) {
          y[i].scales[j] = static_cast<std::uint8_t>(l & 0xF);
        } else {
          y[i].scales[j - 8] = static_cast<std::uint8_t>(y[i].scales[j - 8] | ((l & 0xF) << 4));
        }
        l >>= 4;
        y[i].scales[j % 4 + 8] = static_cast<std::uint8_t>(y[i].scales[j % 4 + 8] | (l << (2 * (j / 4))));
      }
      y[i].d = to_fp16(1 / iscale);
    } else {
      y[i].d = to_fp16(0.f);
    }
    for (int j = 0; j < kQK_K / 16; ++j) {
      const float d = fp16(y[i].d) * static_cast<float>(q3_k_scale(y[i].scales, j));
      if (d == 0.0f) continue;
      for (int ii = 0; ii < 16; ++ii) {
        int l = nearest_int(x[16 * j + ii] / d);
        l = std::max(-4, std::min(3, l));
        L[16 * j + ii] = static_cast<std::int8_t>(l + 4);
      }
    }
    std::memset(y[i].hmask, 0, kQK_K / 8);
    int m = 0;
    std::uint8_t hm = 1;
    for (int j = 0; j < kQK_K; ++j) {
      if (L[j] > 3) {
        y[i].hmask[m] = static_cast<std::uint8_t>(y[i].hmask[m] | hm);
        L[j] = static_cast<std::int8_t>(L[j] - 4);
      }
      if (++m == kQK_K / 8) {
        m = 0;
        hm = static_cast<std::uint8_t>(hm << 1);
      }
    }
    for (int j = 0; j < kQK_K; j += 128) {
      for (int l = 0; l < 32; ++l) {
        y[i].qs[j / 4 + l] = static_cast<std::uint8_t>(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) |
                                                      (L[j + l + 96] << 6));
      }
    }
  }
}

// Packs 8 six-bit scales and mins into the 12 bytes of q4_K / q5_K.
void pack_scales_k4(const float* scales, const float* mins, float max_scale, float max_min, std::uint8_t* out) {
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  for (int j = 0; j < kQK_K / 32; ++j) {
    std::uint8_t ls = static_cast<std::uint8_t>(nearest_int(inv_scale * scales[j]));
    std::uint8_t lm = static_cast<std::uint8_t>(nearest_int(inv_min * mins[j]));
    ls = std::min<std::uint8_t>(63, ls);
    lm = std::min<std::uint8_t>(63, lm);
    if (j < 4) {
      out[j] = ls;
      out[j + 4] = lm;
    } else {
      out[j + 4] = static_cast<std::uint8_t>((ls & 0xF) | ((lm & 0xF) << 4));
      out[j - 4] = static_cast<std::uint8_t>(out[j - 4] | ((ls >> 4) << 6));
      out[j - 0] = static_cast<std::uint8_t>(out[j - 0] | ((lm >> 4) << 6));
    }
  }
}

// Shared by q4_K (nmax 15) and q5_K (nmax 31): per 32-value sub-block scale/min search, then requantize.
void quantize_k4_levels(const float* x, int nmax, float rmin, int nstep, std::uint8_t* L, std::uint16_t* d_out,
                        std::uint16_t* dmin_out, std::uint8_t* scales_out) {
  std::uint8_t Laux[32];
  float weights[32], mins[kQK_K / 32], scales[kQK_K / 32];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < kQK_K / 32; ++j) {
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(x[32 * j + l]);
    scales[j] = make_qkx2_quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, rmin, 0.1f, nstep, false);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  std::memset(scales_out, 0, 12);
  pack_scales_k4(scales, mins, max_scale, max_min, scales_out);
  *d_out = to_fp16(max_scale / 63.f);
  *dmin_out = to_fp16(max_min / 63.f);
  for (int j = 0; j < kQK_K / 32; ++j) {
    std::uint8_t sc, m;
    get_scale_min_k4(j, scales_out, &sc, &m);
    const float d = fp16(*d_out) * sc;
    if (d == 0.0f) continue;
    const float dm = fp16(*dmin_out) * m;
    for (int ii = 0; ii < 32; ++ii) {
      const int l = nearest_int((x[32 * j + ii] + dm) / d);
      L[32 * j + ii] = static_cast<std::uint8_t>(std::max(0, std::min(nmax, l)));
    }
  }
}

void quantize_q4_K(const float* x, tensor::BlockQ4_K* y, std::int64_t nb) {
  std::uint8_t L[kQK_K];
  for (std::int64_t i = 0; i < nb; ++i, x += kQK_K) {
    quantize_k4_levels(x, 15, -1.f, 20, L, &y[i].d, &y[i].dmin, y[i].scales);
    std::uint8_t* q = y[i].qs;
    for (int j = 0; j < kQK_K; j += 64, q += 32) {
      for (int l = 0; l < 32; ++l) q[l] = static_cast<std::uint8_t>(L[j + l] | (L[j + l + 32] << 4));
    }
  }
}

void quantize_q5_K(const float* x, tensor::BlockQ5_K* y, std::int64_t nb) {
  std::uint8_t L[kQK_K];
  for (std::int64_t i = 0; i < nb; ++i, x += kQK_K) {
    quantize_k4_levels(x, 31, -0.5f, 15, L, &y[i].d, &y[i].dmin, y[i].scales);
    std::uint8_t* qh = y[i].qh;
    std::uint8_t* ql = y[i].qs;
    std::memset(qh, 0, kQK_K / 8);
    std::uint8_t m1 = 1, m2 = 2;
    for (int n = 0; n < kQK_K; n += 64, ql += 32) {
      for (int j = 0; j < 32; ++j) {
        int l1 = L[n + j];
        if (l1 > 15) {
          l1 -= 16;
          qh[j] = static_cast<std::uint8_t>(qh[j] | m1);
        }
        int l2 = L[n + j + 32];
        if (l2 > 15) {
          l2 -= 16;
          qh[j] = static_cast<std::uint8_t>(qh[j] | m2);
        }
        ql[j] = static_cast<std::uint8_t>(l1 | (l2 << 4));
      }
      m1 = static_cast<std::uint8_t>(m1 << 2);
      m2 = static_cast<std::uint8_t>(m2 << 2);
    }
  }
}

void quantize_q6_K(const float* x, tensor::BlockQ6_K* y, std::int64_t nb) {
  std::int8_t L[kQK_K];
  float scales[kQK_K / 16];
  for (std::int64_t i = 0; i < nb; ++i, x += kQK_K) {
    float max_scale = 0, max_abs_scale = 0;
    for (int ib = 0; ib < kQK_K / 16; ++ib) {
      const float scale = make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib, 1);
      scales[ib] = scale;
      const float abs_scale = std::fabs(scale);
      if (abs_scale > max_abs_scale) {
        max_abs_scale = abs_scale;
        max_scale = scale;
      }
    }
    if (max_abs_scale < kGroupMaxEps) {
      std::memset(&y[i], 0, sizeof(y[i]));
      y[i].d = to_fp16(0.f);
      continue;
    }
    const float iscale = -128.f / max_scale;
    y[i].d = to_fp16(1 / iscale);
    for (int ib = 0; ib < kQK_K / 16; ++ib) {
      y[i].scales[ib] = static_cast<std::int8_t>(std::min(127, nearest_int(iscale * scales[ib])));
    }
    for (int j = 0; j < kQK_K / 16; ++j) {
      const float d = fp16(y[i].d) * y[i].scales[j];
      if (d == 0.0f) continue;
      for (int ii = 0; ii < 16; ++ii) {
        int l = nearest_int(x[16 * j + ii] / d);
        l = std::max(-32, std::min(31, l));
        L[16 * j + ii] = static_cast<std::int8_t>(l + 32);
      }
    }
    std::uint8_t* ql = y[i].ql;
    std::uint8_t* qh = y[i].qh;
    for (int j = 0; j < kQK_K; j += 128, ql += 64, qh += 32) {
      for (int l = 0; l < 32; ++l) {
        const std::uint8_t q1 = L[j + l + 0] & 0xF;
        const std::uint8_t q2 = L[j + l + 32] & 0xF;
        const std::uint8_t q3 = L[j + l + 64] & 0xF;
        const std::uint8_t q4 = L[j + l + 96] & 0xF;
        ql[l + 0] = static_cast<std::uint8_t>(q1 | (q3 << 4));
        ql[l + 32] = static_cast<std::uint8_t>(q2 | (q4 << 4));
        qh[l] = static_cast<std::uint8_t>((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) |
                                          ((L[j + l + 64] >> 4) << 4) | ((L[j + l + 96] >> 4) << 6));
      }
    }
  }
}

void quantize_q8_K(const float* x, tensor::BlockQ8_K* y, std::int64_t nb) {
  for (std::int64_t i = 0; i < nb; ++i, x += kQK_K) {
    float max = 0, amax = 0;
    for (int j = 0; j < kQK_K; ++j) {
      const float ax = std::fabs(x[j]);
      if (ax > amax) {
        amax = ax;
        max = x[j];
      }
    }
    if (amax == 0.0f) {
      std::memset(&y[i], 0, sizeof(y[i]));
      continue;
    }
    const float iscale = -127.f / max;
    for (int j = 0; j < kQK_K; ++j) {
      y[i].qs[j] = static_cast<std::int8_t>(std::min(127, nearest_int(iscale * x[j])));
    }
    for (int j = 0; j < kQK_K / 16; ++j) {
      int sum = 0;
      for (int ii = 0; ii < 16; ++ii) sum += y[i].qs[j * 16 + ii];
      y[i].bsums[j] = static_cast<std::int16_t>(sum);
    }
    y[i].d = 1 / iscale;
  }
}

// ---- dequantization ----------------------------------------------------------------------------------

void dequantize_q4_0(const tensor::BlockQ4_0* x, float* y, std::int64_t nb) {
  for (std::int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = fp16(x[i].d);
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = static_cast<float>((x[i].qs[j] & 0x0F) - 8) * d;
      y[j + kQK / 2] = static_cast<float>((x[i].qs[j] >> 4) - 8) * d;
    }
  }
}

void dequantize_q4_1(const tensor::BlockQ4_1* x, float* y, std::int64_t nb) {
  for (std::int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = fp16(x[i].d), m = fp16(x[i].m);
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = static_cast<float>(x[i].qs[j] & 0x0F) * d + m;
      y[j + kQK / 2] = static_cast<float>(x[i].qs[j] >> 4) * d + m;
    }
  }
}

void dequantize_q5_0(const tensor::BlockQ5_0* x, float* y, std::int64_t nb) {
  for (std::int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = fp16(x[i].d);
    std::uint32_t qh;
    std::memcpy(&qh, x[i].qh, sizeof(qh));
    for (int j = 0; j < kQK / 2; ++j) {
      const int xh0 = static_cast<int>(((qh >> (j + 0)) << 4) & 0x10);
      const int xh1 = static_cast<int>((qh >> (j + 12)) & 0x10);
      y[j] = static_cast<float>(((x[i].qs[j] & 0x0F) | xh0) - 16) * d;
      y[j + kQK / 2] = static_cast<float>(((x[i].qs[j] >> 4) | xh1) - 16) * d;
    }
  }
}

void dequantize_q5_1(const tensor::BlockQ5_1* x, float* y, std::int64_t nb) {
  for (std::int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = fp16(x[i].d), m = fp16(x[i].m);
    std::uint32_t qh;
    std::memcpy(&qh, x[i].qh, sizeof(qh));
    for (int j = 0; j < kQK / 2; ++j) {
      const int xh0 = static_cast<int>(((qh >> (j + 0)) << 4) & 0x10);
      const int xh1 = static_cast<int>((qh >> (j + 12)) & 0x10);
      y[j] = static_cast<float>((x[i].qs[j] & 0x0F) | xh0) * d + m;
      y[j + kQK / 2] = static_cast<float>((x[i].qs[j] >> 4) | xh1) * d + m;
    }
  }
}

void dequantize_q8_0(const tensor::BlockQ8_0* x, float* y, std::int64_t nb) {
  for (std::int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = fp16(x[i].d);
    for (int j = 0; j < kQK; ++j) y[j] = static_cast<float>(x[i].qs[j]) * d;
  }
}

void dequantize_q2_K(const tensor::BlockQ2_K* x, float* y, std::int64_t nb) {
  for (std::int64_t i = 0; i < nb; ++i) {
    const float d = fp16(x[i].d), min = fp16(x[i].dmin);
    const std::uint8_t* q = x[i].qs;
    int is = 0;
    for (int n = 0; n < kQK_K; n += 128, q += 32) {
      for (int shift = 0; shift < 8; shift += 2) {
        for (int half = 0; half < 2; ++half) {
          const std::uint8_t sc = x[i].scales[is++];
          const float dl = d * static_cast<float>(sc & 0xF), ml = min * static_cast<float>(sc >> 4);
          for (int l = 0; l < 16; ++l) *y++ = dl * static_cast<float>((q[l + 16 * half] >> shift) & 3) - ml;
        }
      }
    }
  }
}

void dequantize_q3_K(const tensor::BlockQ3_K* x, float* y, std::int64_t nb) {
  for (std::int64_t i = 0; i < nb; ++i) {
    const float d_all = fp16(x[i].d);
    const std::uint8_t* q = x[i].qs;
    const std::uint8_t* hm = x[i].hmask;
    std::uint8_t m = 1;
    int is = 0;
    for (int n = 0; n < kQK_K; n += 128, q += 32) {
      for (int shift = 0; shift < 8; shift += 2, m = static_cast<std::uint8_t>(m << 1)) {
        for (int half = 0; half < 2; ++half) {
          const float dl = d_all * static_cast<float>(q3_k_scale(x[i].scales, is++));
          for (int l = 0; l < 16; ++l) {
            const int k = l + 16 * half;
            *y++ = dl * static_cast<float>(((q[k] >> shift) & 3) - ((hm[k] & m) ? 0 : 4));
          }
        }
      }
    }
  }
}

void dequantize_q4_K(const tensor::BlockQ4_K* x, float* y, std::int64_t nb) {
  for (std::int64_t i = 0; i < nb; ++i) {
    const std::uint8_t* q = x[i].qs;
    const float d = fp16(x[i].d), min = fp16(x[i].dmin);
    int is = 0;
    for (int j = 0; j < kQK_K; j += 64, q += 32, is += 2) {
      std::uint8_t sc, m;
      get_scale_min_k4(is + 0, x[i].scales, &sc, &m);
      const float d1 = d * sc, m1 = min * m;
      get_scale_min_k4(is + 1, x[i].scales, &sc, &m);
      const float d2 = d * sc, m2 = min * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
    }
  }
}

void dequantize_q5_K(const tensor::BlockQ5_K* x, float* y, std::int64_t nb) {
  for (std::int64_t i = 0; i < nb; ++i) {
    const std::uint8_t* ql = x[i].qs;
    const std::uint8_t* qh = x[i].qh;
    const float d = fp16(x[i].d), min = fp16(x[i].dmin);
    int is = 0;
    std::uint8_t u1 = 1, u2 = 2;
    for (int j = 0; j < kQK_K; j += 64, ql += 32, is += 2) {
      std::uint8_t sc, m;
      get_scale_min_k4(is + 0, x[i].scales, &sc, &m);
      const float d1 = d * sc, m1 = min * m;
      get_scale_min_k4(is + 1, x[i].scales, &sc, &m);
      const float d2 = d * sc, m2 = min * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>((ql[l] & 0xF) + ((qh[l] & u1) ? 16 : 0)) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>((ql[l] >> 4) + ((qh[l] & u2) ? 16 : 0)) - m2;
      u1 = static_cast<std::uint8_t>(u1 << 2);
      u2 = static_cast<std::uint8_t>(u2 << 2);
    }
  }
}

void dequantize_q6_K(const tensor::BlockQ6_K* x, float* y, std::int64_t nb) {
  for (std::int64_t i = 0; i < nb; ++i) {
    const float d = fp16(x[i].d);
    const std::uint8_t* ql = x[i].ql;
    const std::uint8_t* qh = x[i].qh;
    const std::int8_t* sc = x[i].scales;
    for (int n = 0; n < kQK_K; n += 128, y += 128, ql += 64, qh += 32, sc += 8) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l + 0] = d * sc[is + 0] * static_cast<float>(q1);
        y[l + 32] = d * sc[is + 2] * static_cast<float>(q2);
        y[l + 64] = d * sc[is + 4] * static_cast<float>(q3);
        y[l + 96] = d * sc[is + 6] * static_cast<float>(q4);
      }
    }
  }
}

void dequantize_q8_K(const tensor::BlockQ8_K* x, float* y, std::int64_t nb) {
  for (std::int64_t i = 0; i < nb; ++i, y += kQK_K) {
    for (int j = 0; j < kQK_K; ++j) y[j] = x[i].d * static_cast<float>(x[i].qs[j]);
  }
}

// ---- nf4 (bitsandbytes' quantize_4bit / dequantize_4bit, quant_type nf4, blocksize 64) ----------------

void quantize_nf4(const float* x, tensor::BlockNf4* y, std::int64_t nb) {
  for (std::int64_t i = 0; i < nb; ++i) {
    const float* xb = x + i * kNf4Block;
    float amax = 0.0f;
    for (std::int64_t j = 0; j < kNf4Block; ++j) amax = std::max(amax, std::fabs(xb[j]));
    // A * (1 / absmax.clamp(min=1e-38)), clamped to [-1, 1], then the level index.
    const float inv = 1.0f / std::max(amax, 1e-38f);
    y[i].absmax = amax;
    for (std::int64_t j = 0; j < kNf4Block; j += 2) {
      const int q0 = nf4_code(std::clamp(xb[j] * inv, -1.0f, 1.0f));
      const int q1 = nf4_code(std::clamp(xb[j + 1] * inv, -1.0f, 1.0f));
      y[i].qs[j / 2] = static_cast<std::uint8_t>((q0 << 4) | q1);
    }
  }
}

void dequantize_nf4(const tensor::BlockNf4* x, float* y, std::int64_t nb) {
  const std::array<float, 16>& level = nf4_levels();
  for (std::int64_t i = 0; i < nb; ++i) {
    for (std::int64_t j = 0; j < kNf4Block / 2; ++j) {
      y[i * kNf4Block + 2 * j] = level[x[i].qs[j] >> 4] * x[i].absmax;
      y[i * kNf4Block + 2 * j + 1] = level[x[i].qs[j] & 0xF] * x[i].absmax;
    }
  }
}

template <typename B>
B* as(void* p) {
  return static_cast<B*>(p);
}
template <typename B>
const B* as(const void* p) {
  return static_cast<const B*>(p);
}

}  // namespace

void quantize_row_ref(DType t, const float* x, void* y, std::int64_t n) {
  check_row("quantize_row_ref", t, n);
  const std::int64_t nb = n / tensor::block_size(t);
  switch (t) {
    case DType::f32: std::memcpy(y, x, static_cast<std::size_t>(n) * sizeof(float)); return;
    case DType::f16:
      for (std::int64_t i = 0; i < n; ++i) as<std::uint16_t>(y)[i] = tensor::f32_to_f16(x[i]);
      return;
    case DType::bf16:
      for (std::int64_t i = 0; i < n; ++i) as<std::uint16_t>(y)[i] = tensor::f32_to_bf16(x[i]);
      return;
    case DType::q4_0: return quantize_q4_0(x, as<tensor::BlockQ4_0>(y), nb);
    case DType::q4_1: return quantize_q4_1(x, as<tensor::BlockQ4_1>(y), nb);
    case DType::q5_0: return quantize_q5_0(x, as<tensor::BlockQ5_0>(y), nb);
    case DType::q5_1: return quantize_q5_1(x, as<tensor::BlockQ5_1>(y), nb);
    case DType::q8_0: return quantize_q8_0(x, as<tensor::BlockQ8_0>(y), nb);
    case DType::q2_K: return quantize_q2_K(x, as<tensor::BlockQ2_K>(y), nb);
    case DType::q3_K: return quantize_q3_K(x, as<tensor::BlockQ3_K>(y), nb);
    case DType::q4_K: return quantize_q4_K(x, as<tensor::BlockQ4_K>(y), nb);
    case DType::q5_K: return quantize_q5_K(x, as<tensor::BlockQ5_K>(y), nb);
    case DType::q6_K: return quantize_q6_K(x, as<tensor::BlockQ6_K>(y), nb);
    case DType::q8_K: return quantize_q8_K(x, as<tensor::BlockQ8_K>(y), nb);
    case DType::nf4: return quantize_nf4(x, as<tensor::BlockNf4>(y), nb);
  }
  throw UnsupportedError("[kernels::quantize_row_ref] unknown dtype " + std::to_string(static_cast<int>(t)));
}

void dequantize_row_ref(DType t, const void* x, float* y, std::int64_t n) {
  check_row("dequantize_row_ref", t, n);
  const std::int64_t nb = n / tensor::block_size(t);
  switch (t) {
    case DType::f32: std::memcpy(y, x, static_cast<std::size_t>(n) * sizeof(float)); return;
    case DType::f16:
      for (std::int64_t i = 0; i < n; ++i) y[i] = tensor::f16_to_f32(as<std::uint16_t>(x)[i]);
      return;
    case DType::bf16:
      for (std::int64_t i = 0; i < n; ++i) y[i] = tensor::bf16_to_f32(as<std::uint16_t>(x)[i]);
      return;
    case DType::q4_0: return dequantize_q4_0(as<tensor::BlockQ4_0>(x), y, nb);
    case DType::q4_1: return dequantize_q4_1(as<tensor::BlockQ4_1>(x), y, nb);
    case DType::q5_0: return dequantize_q5_0(as<tensor::BlockQ5_0>(x), y, nb);
    case DType::q5_1: return dequantize_q5_1(as<tensor::BlockQ5_1>(x), y, nb);
    case DType::q8_0: return dequantize_q8_0(as<tensor::BlockQ8_0>(x), y, nb);
    case DType::q2_K: return dequantize_q2_K(as<tensor::BlockQ2_K>(x), y, nb);
    case DType::q3_K: return dequantize_q3_K(as<tensor::BlockQ3_K>(x), y, nb);
    case DType::q4_K: return dequantize_q4_K(as<tensor::BlockQ4_K>(x), y, nb);
    case DType::q5_K: return dequantize_q5_K(as<tensor::BlockQ5_K>(x), y, nb);
    case DType::q6_K: return dequantize_q6_K(as<tensor::BlockQ6_K>(x), y, nb);
    case DType::q8_K: return dequantize_q8_K(as<tensor::BlockQ8_K>(x), y, nb);
    case DType::nf4: return dequantize_nf4(as<tensor::BlockNf4>(x), y, nb);
  }
  throw UnsupportedError("[kernels::dequantize_row_ref] unknown dtype " + std::to_string(static_cast<int>(t)));
}

}  // namespace kernels
