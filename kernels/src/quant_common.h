// Helpers shared by the quantization and dot-product sources (private to kernels/).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

#include "kernels/error.h"
#include "tensor/blocks.h"
#include "tensor/dtype.h"
#include "tensor/half.h"

namespace kernels::detail {

using tensor::kQK;
using tensor::kQK_K;

inline float fp16(std::uint16_t h) { return tensor::f16_to_f32(h); }
inline std::uint16_t to_fp16(float f) { return tensor::f32_to_f16(f); }

// Round to nearest, ties to even, for |f| <= 2^22 (ggml's nearest_int: the 1.5 * 2^23 trick).
inline int nearest_int(float f) {
  const float v = f + 12582912.f;
  std::int32_t i;
  std::memcpy(&i, &v, sizeof(i));
  return (i & 0x007fffff) - 0x00400000;
}

// The 6-bit scale and min of sub-block j (0..7) of a q4_K / q5_K block.
inline void get_scale_min_k4(int j, const std::uint8_t* q, std::uint8_t* d, std::uint8_t* m) {
  if (j < 4) {
    *d = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *d = static_cast<std::uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = static_cast<std::uint8_t>((q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4));
  }
}

// The signed 6-bit scale of sub-block j (0..15) of a q3_K block, minus 32.
inline int q3_k_scale(const std::uint8_t* s, int j) {
  const int lo = j < 8 ? (s[j] & 0xF) : (s[j - 8] >> 4);
  const int hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
  return (lo | (hi << 4)) - 32;
}

// Throws ShapeError unless n is a non-negative multiple of t's block size.
inline void check_row(const char* op, tensor::DType t, std::int64_t n) {
  if (n < 0 || n % tensor::block_size(t) != 0) {
    throw ShapeError(std::string("[kernels::") + op + "] " + std::string(tensor::dtype_name(t)) +
                     ": row length " + std::to_string(n) + " is not a multiple of the block size " +
                     std::to_string(tensor::block_size(t)));
  }
}

}  // namespace kernels::detail
