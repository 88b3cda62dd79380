// How the CUDA backend launches its small-token products, decoder_ops.cu's matvec_* entries and
// matvec_mma_ops.cu's mma_* entries (f16 / bf16 on tensor cores): which entry, how many rows a block and tokens
// a tile, and the grid over several outputs of one launch. Shared with
// orchard_bench_products (tests/bench/cuda), which times exactly these launches. Private to the backend,
// its tests and its benchmarks.
#pragma once

#include <fmt/format.h>

#include <array>
#include <string>

#include "tensor/dtype.h"

namespace pie::cuda {

inline constexpr int kMatvecThreads = 128;   // decoder_ops.cu's MV_THREADS
inline constexpr int kMatvecMaxOutputs = 4;  // MV_MAX_OUTS
inline constexpr int kMatvecMaxTile = 8;     // the widest token tile

// The outputs of one launch, as weight_blocks.cuh's ProductOutputs reads them (same members, same order).
struct ProductOutputs {
  std::array<const void*, kMatvecMaxOutputs> w{};
  std::array<float*, kMatvecMaxOutputs> y{};
  std::array<long long, kMatvecMaxOutputs> row_bytes{};
  std::array<int, kMatvecMaxOutputs> n_out{};
  std::array<int, kMatvecMaxOutputs + 1> first_block{};
  int count = 0;
};
static_assert(sizeof(ProductOutputs) == 136, "weight_blocks.cuh's ProductOutputs layout");

// The kernels' tunables (decoder_ops.cu's MV_ROWS_NARROW / MV_ROWS_WIDE and matvec_mma_ops.cu's MMA_TILES /
// MMA_WARPS defaults; the benchmark passes other values to both sides).
struct MatvecShape {
  int rows_narrow = 2;   // rows a block for tiles of 1 or 2 tokens
  int rows_wide = 4;     // for tiles of 4 or 8
  int mma_rows = 16;      // rows a block of the mma products (16 MMA_TILES)
  int mma_threads = 256;  // threads a block of the mma products (32 MMA_WARPS)
};

// Whether rows of n_in elements of `type` go through the matvec kernels: the float types with rows of a
// multiple of 8 (16-byte pieces), q8_0 / q4_0 / q4_1 (their activations quantized to q8_1 first).
inline bool matvec_reads_q8_1(tensor::DType t) {
  return t == tensor::DType::q8_0 || t == tensor::DType::q4_0 || t == tensor::DType::q4_1;
}
inline bool matvec_takes(tensor::DType t, long long n_in) {
  if (t == tensor::DType::f32 || t == tensor::DType::f16 || t == tensor::DType::bf16) return n_in % 8 == 0;
  return matvec_reads_q8_1(t) && n_in % 32 == 0;
}

// The token tile of a call of n_tokens: 1, 2, 4 or 8 (grid.y = ceil(n_tokens / tile)).
inline int matvec_tile(int n_tokens) {
  int tile = 1;
  while (tile < n_tokens && tile < kMatvecMaxTile) tile *= 2;
  return tile;
}
inline int matvec_rows(int tile, const MatvecShape& s = {}) { return tile >= 4 ? s.rows_wide : s.rows_narrow; }

// The entry point for `suffix` (the backend's type suffix: f16, q8_0, ...) at a tile.
inline std::string matvec_entry(tensor::DType t, const std::string& suffix, int tile) {
  return fmt::format("{}{}_t{}", matvec_reads_q8_1(t) ? "matvec_q8_1_" : "matvec_", suffix, tile);
}

// Whether rows of n_in elements of `type` go through the tensor-core kernels (matvec_mma_ops.cu): f16 / bf16
// rows of a multiple of 8 elements (16-byte pieces). The backend sends them calls of 2 tokens or more (one token
// stays on the matvec kernels, 7% faster there on an H100; --batch-invariant sends every call), up to 16
// before cuBLAS (more where cuBLAS declines).
inline constexpr int kMmaMinTokens = 2;
inline constexpr int kMmaMaxTile = 16;  // tokens a block at most (grid.y tiles more)
inline bool mma_takes(tensor::DType t, long long n_in) {
  return (t == tensor::DType::f16 || t == tensor::DType::bf16) && n_in % 8 == 0;
}
// The mma token tile of a call of n_tokens: 8 or 16 (grid.y = ceil(n_tokens / tile)).
inline int mma_tile(int n_tokens) { return n_tokens <= 8 ? 8 : kMmaMaxTile; }
inline std::string mma_entry(const std::string& suffix, int tile) { return fmt::format("mma_{}_n{}", suffix, tile); }

// Numbers the blocks of p's outputs 0 .. count - 1 at `rows` rows a block; returns the grid's x.
inline unsigned matvec_layout(ProductOutputs& p, int rows) {
  p.first_block[0] = 0;
  for (int j = 0; j < p.count; ++j) {
    const auto jj = static_cast<std::size_t>(j);
    p.first_block[jj + 1] = p.first_block[jj] + (p.n_out[jj] + rows - 1) / rows;
  }
  for (std::size_t j = static_cast<std::size_t>(p.count) + 1; j < p.first_block.size(); ++j) {
    p.first_block[j] = p.first_block[static_cast<std::size_t>(p.count)];
  }
  return static_cast<unsigned>(p.first_block[static_cast<std::size_t>(p.count)]);
}

}  // namespace pie::cuda
