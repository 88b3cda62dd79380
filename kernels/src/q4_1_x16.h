// The q4_1_x16 weight layout (kernels/matmul.h's WeightLayout) and the activation layout its AVX-512/VNNI
// kernels take (dot_q4_1_x16_avx512.cpp), private to kernels/: runs of 16 blocks, one 32-bit lane a block,
// so a (row, token) pair's 32 products per block take eight vpdpbusd on 16 blocks at once and the f32
// scaling runs once per 16 blocks (the four-block groups of act_pack.h: once per four, and the weights
// rearranged into lanes at every load).
#pragma once

#include <cstddef>
#include <cstdint>

#include "dot.h"

namespace kernels::detail {

inline constexpr int kRunBlocks = 16;

// Sixteen q8_0 blocks of one token: lo[j] holds elements 4 j .. 4 j + 3 of block b at 4 b, hi[j] elements
// 16 + 4 j .. 16 + 4 j + 3. A row's last c < 16 blocks (plain in the weights too) as their 32 levels side
// by side from lo's start instead; zeros past the end of the row.
struct ActRun {
  std::int8_t lo[4][64];
  std::int8_t hi[4][64];
  float d[16];  // d_y
  float s[16];  // d_y * sum(y)
};
static_assert(sizeof(ActRun) == 640);

std::size_t act_run_bytes(std::int64_t n);
// x: n / 32 q8_0 blocks -> out: act_run_bytes(n) bytes of ActRun.
void act_pack_runs(const void* x, void* out, std::int64_t n);

// The kernels of q4_1_x16 weights against ActRun activations (dot: one row, dot4xt: four rows x 1..8
// tokens, each (row, token) result bit-identical between them); all null where AVX-512/VNNI is not built.
TileKernels tile_q4_1_x16_avx512();

}  // namespace kernels::detail
