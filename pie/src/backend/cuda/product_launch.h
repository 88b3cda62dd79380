// How the CUDA backend launches its small-token products, decoder_ops.cu's matvec_* entries,
// matvec_mma_ops.cu's mma_* entries (f16 / bf16 on tensor cores) and mmq_ops.cu's mmq_* entries (q8_0 of 32-64
// tokens on int8 tensor cores): which entry, how many rows a block and tokens a tile, and the grid over several
// outputs of one launch. Shared with
// orchard_bench_products (tests/bench/cuda), which times exactly these launches. Private to the backend,
// its tests and its benchmarks.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

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

// Products of many tokens with q8_0 / q4_0 / q4_1 rows on int8 tensor cores (mmq_ops.cu), reading the blocks as
// the file has them against the activations as q8_1 blocks: rows of a multiple of 256 elements (whole stages
// of 8 blocks) that start 16-byte aligned (cp.async of 16 bytes).
inline bool mmq_takes(tensor::DType t, long long n_in, long long row_bytes, const void* w) {
  return matvec_reads_q8_1(t) && n_in % 256 == 0 && row_bytes % 16 == 0 &&
         reinterpret_cast<std::uintptr_t>(w) % 16 == 0;
}
// The calls the backend sends them: q8_0 of kMmqMinTokens to kMmqMaxTokens tokens, where they measured faster
// (H200, the 8B shapes; docs/cuda-backend.md): than the matvec kernels from 32 tokens (products of a step
// 15.0 against 19.4 ms at 32 tokens, 15.9 against 10.3 at 16, with an earlier, slower shape), than the slabs
// and cuBLAS at 64 (batch-64 decode 4,812-4,846 t/s against 4,427); at 256 the products alone take 37.4 ms
// of a step, more than a whole slab step. Fewer tokens stay on the matvec kernels, more on cuBLAS; q4_0 /
// q4_1 were not measured faster than either (their kernels are tested, not sent calls); --batch-invariant
// keeps every count on the matvec kernels.
inline constexpr int kMmqMinTokens = 32;
inline constexpr int kMmqMaxTokens = 64;
inline bool mmq_sent(tensor::DType t, int n_tokens) {
  return t == tensor::DType::q8_0 && n_tokens >= kMmqMinTokens && n_tokens <= kMmqMaxTokens;
}
inline std::string mmq_entry(const std::string& suffix) { return "mmq_" + suffix; }
// A block's shape (mmq_ops.cu's MMQ_WARPS_M, MMQ_WARPS_N, MMQ_WM, MMQ_WN, MMQ_STAGES, MMQ_KSPLIT defaults; the
// benchmark passes other values to both sides).
struct MmqShape {
  int warps_m = 2, warps_n = 1;  // the warp grid
  int wm = 1, wn = 8;            // 16-row and 8-token tiles a warp
  int stages = 3;                // stages of 8 blocks in flight
  int ksplit = 4;                // warps sharing a tile's length (1, 2, 4 or 8)
  int rows() const { return 16 * wm * warps_m; }
  int tokens() const { return 8 * wn * warps_n; }
  int threads() const { return 32 * warps_m * warps_n * ksplit; }
  // mmq_stage_bytes a stage: the rows' 8 blocks (272 bytes of q8_0, 144 of q4_0, 160 of q4_1), the tokens'
  // int8 (256 + 16) and (d, d * sum).
  int shared_bytes(tensor::DType t) const {
    const int row = t == tensor::DType::q8_0 ? 272 : t == tensor::DType::q4_0 ? 144 : 160;
    // The parts of a split length are added through the same memory: (ksplit - 1) tiles of f32.
    return std::max(stages * (rows() * row + tokens() * (272 + 64)), (ksplit - 1) * rows() * tokens() * 4);
  }
  // The NVRTC options that compile mmq_ops.cu for this shape.
  std::vector<std::string> defines() const {
    return {fmt::format("-DMMQ_WARPS_M={}", warps_m), fmt::format("-DMMQ_WARPS_N={}", warps_n),
            fmt::format("-DMMQ_WM={}", wm),           fmt::format("-DMMQ_WN={}", wn),
            fmt::format("-DMMQ_STAGES={}", stages),   fmt::format("-DMMQ_KSPLIT={}", ksplit)};
  }
  // A shape written "warps_m,warps_n,wm,wn,stages,ksplit" (the backend's ORCHARD_CUDA_MMQ_SHAPE, a developer's
  // knob for measuring shapes in the engine); throws std::invalid_argument, saying why, for anything else.
  static MmqShape parse(const std::string& text) {
    MmqShape s;
    const std::string want = "mmq shape '" + text + "': want warps_m,warps_n,wm,wn,stages,ksplit";
    int* fields[] = {&s.warps_m, &s.warps_n, &s.wm, &s.wn, &s.stages, &s.ksplit};
    std::size_t at = 0;
    for (int* f : fields) {
      std::size_t used = 0;
      try {
        *f = std::stoi(text.substr(at), &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used == 0 || *f < 1 || *f > 16) {
        throw std::invalid_argument(want + ", each 1 to 16");
      }
      at += used;
      if (f != fields[5]) {
        if (at >= text.size() || text[at] != ',') throw std::invalid_argument(want + ", each 1 to 16");
        ++at;
      }
    }
    if (at != text.size()) throw std::invalid_argument(want + ", each 1 to 16");
    if (8 % s.ksplit != 0) throw std::invalid_argument(want + " (ksplit 1, 2, 4 or 8)");
    if (s.threads() > 1024) throw std::invalid_argument(want + " (at most 32 warps)");
    return s;
  }
};

// The parts a launch of grid_x blocks of rows splits rows of n_in elements into (grid.z of the mmq_* launch;
// mmq_sum adds them in order): the fewest that give kMmqTargetBlocks blocks, each part at least
// kMmqMinPartStages stages of 256 elements. A function of the weights' shape only, never of the tokens, so a
// token's sums are the same bits whatever the batch. Of the 8B shapes only down (128 blocks of 32 rows, 56
// stages) is split, in two: on an H200 at 64 tokens 87.3 against 97.5 us, at 32 126.5 against 121.1;
// o and q + k + v (16 stages) measured slower in two parts at 64 tokens (32.6 against 30.3 us, 52.9 against
// 47.8), gate + up has 896 blocks. `forced` (the benchmark's --mmq-parts) replaces the rule where the length
// has the stages.
inline constexpr int kMmqTargetBlocks = 256;
inline constexpr int kMmqMinPartStages = 16;
inline int mmq_parts(unsigned grid_x, long long n_in, int forced = 0) {
  const long long stages = n_in / 256;
  int parts = 1;
  if (forced > 0) {
    parts = forced;
  } else {
    while (static_cast<long long>(grid_x) * parts < kMmqTargetBlocks) parts *= 2;
  }
  while (parts > 1 && stages / parts < (forced > 0 ? 1 : kMmqMinPartStages)) parts /= 2;
  return parts;
}
// The floats of scratch the parts of such a launch need (none for one part): [part][token][grid_x * rows].
inline long long mmq_parts_floats(int parts, unsigned grid_x, int rows, int n_tokens) {
  return parts == 1 ? 0 : static_cast<long long>(parts) * n_tokens * grid_x * rows;
}

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
