// Block layouts of the ggml/GGUF quantized types, byte for byte (ggml-common.h). A row of n elements of a
// quantized type is n / block_size consecutive blocks; every scale is an IEEE half unless noted.
#pragma once

#include <cstdint>

#include "tensor/dtype.h"

namespace tensor {

// q4_0: x = d * (q - 8), q in [0, 15]; qs[j] holds element j (low nibble) and j + 16 (high nibble).
struct BlockQ4_0 {
  std::uint16_t d;
  std::uint8_t qs[kQK / 2];
};
// q4_1: x = d * q + m.
struct BlockQ4_1 {
  std::uint16_t d;
  std::uint16_t m;
  std::uint8_t qs[kQK / 2];
};
// q5_0: x = d * (q - 16); bit 4 of element j is bit j of qh (little-endian u32).
struct BlockQ5_0 {
  std::uint16_t d;
  std::uint8_t qh[4];
  std::uint8_t qs[kQK / 2];
};
// q5_1: x = d * q + m.
struct BlockQ5_1 {
  std::uint16_t d;
  std::uint16_t m;
  std::uint8_t qh[4];
  std::uint8_t qs[kQK / 2];
};
// q8_0: x = d * q, q in [-127, 127].
struct BlockQ8_0 {
  std::uint16_t d;
  std::int8_t qs[kQK];
};
// q2_K: 16 sub-blocks of 16; scales[i] = scale (low 4 bits) | min (high 4 bits); x = d*sc*q - dmin*m.
struct BlockQ2_K {
  std::uint8_t scales[kQK_K / 16];
  std::uint8_t qs[kQK_K / 4];
  std::uint16_t d;
  std::uint16_t dmin;
};
// q3_K: 16 sub-blocks of 16, 6-bit signed scales packed in 12 bytes; the high bit of q in hmask
// (set means no subtraction of 4); x = d * (sc - 32) * (q - 4 * !hbit).
struct BlockQ3_K {
  std::uint8_t hmask[kQK_K / 8];
  std::uint8_t qs[kQK_K / 4];
  std::uint8_t scales[12];
  std::uint16_t d;
};
// q4_K: 8 sub-blocks of 32, 6-bit scales and mins packed in 12 bytes; x = d*sc*q - dmin*m.
struct BlockQ4_K {
  std::uint16_t d;
  std::uint16_t dmin;
  std::uint8_t scales[12];
  std::uint8_t qs[kQK_K / 2];
};
// q5_K: as q4_K with a fifth bit in qh.
struct BlockQ5_K {
  std::uint16_t d;
  std::uint16_t dmin;
  std::uint8_t scales[12];
  std::uint8_t qh[kQK_K / 8];
  std::uint8_t qs[kQK_K / 2];
};
// q6_K: 16 sub-blocks of 16, signed 8-bit scales; x = d * sc * (q - 32), q 6 bits (4 in ql, 2 in qh).
struct BlockQ6_K {
  std::uint8_t ql[kQK_K / 2];
  std::uint8_t qh[kQK_K / 4];
  std::int8_t scales[kQK_K / 16];
  std::uint16_t d;
};
// q8_K: activations for the K dot products; d is a float; bsums[i] = sum of qs[16 i .. 16 i + 15].
struct BlockQ8_K {
  float d;
  std::int8_t qs[kQK_K];
  std::int16_t bsums[kQK_K / 16];
};

// nf4: bitsandbytes' NormalFloat4 in blocks of 64: x = kNf4Levels[q] * absmax (one f32 product), q 4 bits.
// qs[i] holds element 2i in its HIGH nibble and 2i + 1 in its low nibble (bitsandbytes' packing, the
// opposite of ggml's). absmax is the block's scale as bitsandbytes multiplies by it: a checkpoint's
// double-quantized absmax is stored here decoded (kernels/nf4.h), so dequantization stays bit-exact.
struct BlockNf4 {
  float absmax;
  std::uint8_t qs[kQK_NF4 / 2];
};

static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20 && sizeof(BlockQ5_0) == 22 &&
              sizeof(BlockQ5_1) == 24 && sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ2_K) == 84 && sizeof(BlockQ3_K) == 110 && sizeof(BlockQ4_K) == 144 &&
              sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210 && sizeof(BlockQ8_K) == 292);
static_assert(sizeof(BlockNf4) == 36);

}  // namespace tensor
