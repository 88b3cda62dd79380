// IEEE half (f16) and bfloat16 <-> f32 conversion, exact (round to nearest even), scalar and branch-light.
// The SIMD kernels use F16C / AVX-512 conversions; these are the references they are tested against.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>

namespace tensor {

struct f16_t {
  std::uint16_t bits;
};
struct bf16_t {
  std::uint16_t bits;
};

inline float f16_to_f32(std::uint16_t h) {
  // Shift the half's exponent/mantissa into a float and rescale by 2^112; handles subnormals exactly.
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp_mant = static_cast<std::uint32_t>(h & 0x7fffu);
  if (exp_mant >= 0x7c00u) {  // inf / nan
    return std::bit_cast<float>(sign | 0x7f800000u | (exp_mant & 0x3ffu) << 13);
  }
  const float magic = std::bit_cast<float>(0x77800000u);  // 2^112
  const float f = std::bit_cast<float>(exp_mant << 13) * magic;
  return std::bit_cast<float>(sign | std::bit_cast<std::uint32_t>(f));
}

inline std::uint16_t f32_to_f16(float f) {
  // Round to nearest even via float arithmetic (the classic trick used by FP16 libraries).
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  const std::uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u);  // nan
  if (abs >= 0x47800000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // overflow -> inf
  const float scale_to_inf = std::bit_cast<float>(0x77800000u);  // 2^112
  const float scale_to_zero = std::bit_cast<float>(0x08800000u);  // 2^-110
  float base = (std::bit_cast<float>(abs) * scale_to_inf) * scale_to_zero;
  std::uint32_t bias = abs & 0x7f800000u;
  if (bias < 0x38800000u) bias = 0x38800000u;
  base = std::bit_cast<float>(bias + 0x07800000u) + base;
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(base);
  const std::uint32_t exp_bits = (bits >> 13) & 0x00007c00u;
  const std::uint32_t mant_bits = bits & 0x00000fffu;
  return static_cast<std::uint16_t>(sign | (exp_bits + mant_bits));
}

inline float bf16_to_f32(std::uint16_t b) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16);
}

inline std::uint16_t f32_to_bf16(float f) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((x >> 16) | 0x40u);  // quiet nan
  return static_cast<std::uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);  // round to nearest even
}

}  // namespace tensor
