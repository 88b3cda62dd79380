// The activation layout of the q4_1 / q5_0 / q5_1 kernels (dot_tile_blocks_avx512.cpp, _avx2.cpp): a row of
// q8_0 blocks regrouped four blocks at a time, each block split in halves, with its scale as f32 and its
// sum, so the kernels' f32 scaling runs once per four blocks (private to kernels/).
#pragma once

#include <cstddef>
#include <cstdint>

namespace kernels::detail {

inline constexpr int kActGroupBlocks = 4;

// Four q8_0 blocks of one token (zeros for blocks past the end of the row).
struct ActGroup {
  std::int8_t lo[64];   // elements 0..15 of block b at 16 b
  std::int8_t hi[64];   // elements 16..31
  float d[4];           // d_y
  float s[4];           // d_y * sum(y)
  std::int32_t sum[4];  // sum(y)
  std::int32_t pad[4];
};
static_assert(sizeof(ActGroup) == 192);

// Bytes of the packed form of a row of n elements (a multiple of 32).
std::size_t act_packed_bytes(std::int64_t n);
// x: n / 32 q8_0 blocks -> out: act_packed_bytes(n) bytes of ActGroup.
void act_pack_q8_0(const void* x, void* out, std::int64_t n);

}  // namespace kernels::detail
