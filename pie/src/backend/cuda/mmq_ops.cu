// Products of many tokens (batches, prefill) with q8_0 weight rows on int8 tensor cores, reading the blocks as
// the file has them (34 bytes: d in f16, 32 int8) against the activations as q8_1 blocks (decoder_ops.cu's
// quantize_q8_1, or the norm / SwiGLU that wrote them): mma.sync m16n8k32 s8 x s8 -> s32, one k-step a
// 32-element block, so each mma gives a block's exact integer dot, which is scaled by d_w[row] * d_x[token]
// and added to the running f32 sum. The slab path (gemm.cpp: rows expanded to f16, then cuBLAS) writes and
// reads twice the f16 bytes on top of the q8_0 ones; this reads the q8_0 bytes once per token tile.
//
// A block of threads takes MMQ_ROWS rows and MMQ_TOKENS tokens (grid.x over the rows of up to four outputs
// sharing the input, as the matvec kernels: ProductOutputs; grid.y over the tokens) and walks the rows'
// length MMQ_KB blocks (256 elements) a stage: the stage's raw weight bytes (272 a row: 17 16-byte pieces,
// the rows being 16-byte aligned) and the activations' int8 and (d, d * sum) go to shared memory by cp.async,
// MMQ_STAGES stages in flight. Warp (wm, wn, wk) of the MMQ_WARPS_M x MMQ_WARPS_N x MMQ_KSPLIT grid takes MMQ_WM
// 16-row tiles and MMQ_WN 8-token tiles of the block's, and blocks wk, wk + MMQ_KSPLIT, ... of each stage;
// the MMQ_KSPLIT parts of a tile are added in warp order at the end. A long length is also split across blocks:
// part blockIdx.z of gridDim.z (product_launch.h's mmq_parts, from the weights' shape only) takes a contiguous
// run of the stages and writes its sums to a scratch buffer, which mmq_sum adds in part order into the outputs.
//
// Fragments: an mma sums its 32 k in any order, so any permutation of a block's 32 elements shared by A and
// B gives the same integer. Lane (g = lane / 4, t = lane % 4) takes bytes [8 t, 8 t + 8) of the block: the
// first four as the fragment's "k = 4 t .. 4 t + 3" (registers a0 of row g, a1 of row g + 8, b0 of token g),
// the next four as "k = 16 + 4 t .." (a2, a3, b1). A q8_0 block's int8 start 2 bytes into its 34, so a row's
// words are read aligned and funnel-shifted into place (blocks of even index: 2 bytes off).
//
// Batch invariance by construction: an output's sum is its own row's and token's blocks in block order,
// whatever else shares the launch (tokens past the call's end read the last token; rows past an output's
// end its last row; neither is stored).
//
// q4_0 / q4_1: the 16 bytes of nibbles give a lane the block's bytes [4 t, 4 t + 4) as 8 values 0..15 (low
// nibbles: the fragment's k = 4 t ..; high: 16 + 4 t ..), and the activations are read in the fragment's own
// order; q4_0's - 8 and q4_1's min come from the q8_1 block's d * sum, as in the matvec kernels.
//
// Rows must be 16-byte aligned with a length of a multiple of 256 (mmq_takes, product_launch.h).
//
// Tunables (defaults are what the backend launches, the best of orchard_bench_products --mmq's -D sweep at 64
// tokens on an H200: 32 rows and 64 tokens a block, two warps of rows, each row tile's length in four parts,
// 8 warps; the host reads the block's shape from product_launch.h's MmqShape). Where the time goes: the
// 8B shapes' products of 64 tokens take 11.0 ms a step against 2 ms of q8_0 bytes at the copy rate: the
// 4096-row products have 128 blocks of rows for 132 multiprocessors, and each block's stages are latency-bound
// (splitting the length over more warps is what paid: 12.9 -> 11.0 ms; down's across two blocks 11.0 -> 10.7;
// even gate + up's 896 blocks read 19% of the copy rate: docs/cuda-backend.md).

#ifndef MMQ_WARPS_M
#define MMQ_WARPS_M 2  // warps along the rows
#endif
#ifndef MMQ_WARPS_N
#define MMQ_WARPS_N 1  // warps along the tokens
#endif
#ifndef MMQ_WM
#define MMQ_WM 1  // 16-row tiles a warp
#endif
#ifndef MMQ_WN
#define MMQ_WN 8  // 8-token tiles a warp
#endif
#ifndef MMQ_STAGES
#define MMQ_STAGES 3  // stages of MMQ_KB blocks in flight
#endif
#ifndef MMQ_KSPLIT
#define MMQ_KSPLIT 4  // warps sharing a tile's length: warp k takes blocks k, k + MMQ_KSPLIT, ... of a stage
#endif
#define MMQ_KB 8  // 32-element blocks a stage
#define MMQ_WARPS (MMQ_WARPS_M * MMQ_WARPS_N * MMQ_KSPLIT)
#define MMQ_THREADS (32 * MMQ_WARPS)
#define MMQ_ROWS (16 * MMQ_WM * MMQ_WARPS_M)
#define MMQ_TOKENS (8 * MMQ_WN * MMQ_WARPS_N)

// Shared memory of a stage, in bytes: the rows' raw blocks (MMQ_KB of a row: 272 bytes of q8_0, 144 of q4_0,
// 160 of q4_1, each a whole number of 16-byte pieces), then the tokens' int8 (a row padded by 16 bytes: the 8
// tokens of a fragment load land in different banks), then their d and d * sum, block by block ([MMQ_KB]
// [MMQ_TOKENS] each: a lane's two tokens are one 8-byte load).
template <int T>
__host__ __device__ constexpr int mmq_block_bytes() {
  return T == WT_Q8_0 ? 34 : T == WT_Q4_0 ? 18 : 20;
}
#define MMQ_X_STRIDE (32 * MMQ_KB + 16)
#define MMQ_X_BYTES (MMQ_TOKENS * MMQ_X_STRIDE)
template <int T>
__device__ constexpr int mmq_w_stride() {
  return mmq_block_bytes<T>() * MMQ_KB;
}
template <int T>
__device__ constexpr int mmq_w_bytes() {
  return MMQ_ROWS * mmq_w_stride<T>();
}
template <int T>
__device__ constexpr int mmq_stage_bytes() {
  return mmq_w_bytes<T>() + MMQ_X_BYTES + 2 * MMQ_KB * MMQ_TOKENS * 4;
}

__device__ __forceinline__ unsigned mmq_smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mmq_cp16(void* dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(mmq_smem_addr(dst)), "l"(src));
}
__device__ __forceinline__ void mmq_cp4(void* dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(mmq_smem_addr(dst)), "l"(src));
}
__device__ __forceinline__ void mmq_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void mmq_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// d += a b: m16n8k32, row-major A, column-major B, s8 inputs, s32 accumulators (from zero here).
__device__ __forceinline__ void mma_16832_s8(int (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Stage kb0 (the rows' blocks kb0 .. kb0 + MMQ_KB) into shared memory s by cp.async.
template <int T>
__device__ __forceinline__ void mmq_load_stage(u8* s, const ProductTarget& target, int o0, const i8* xq,
                                               const float2* xd, int n_blocks, int t0, int n_tokens, int kb0) {
  constexpr int W_PIECES = mmq_w_stride<T>() / 16;
  for (int c = threadIdx.x; c < MMQ_ROWS * W_PIECES; c += MMQ_THREADS) {
    const int r = c / W_PIECES, piece = c % W_PIECES;
    const u8* row = target.w + target.row_bytes * min(o0 + r, target.n_out - 1);
    mmq_cp16(s + r * mmq_w_stride<T>() + 16 * piece, row + mmq_block_bytes<T>() * kb0 + 16 * piece);
  }
  u8* sx = s + mmq_w_bytes<T>();
  for (int c = threadIdx.x; c < MMQ_TOKENS * (2 * MMQ_KB); c += MMQ_THREADS) {
    const int tok = c / (2 * MMQ_KB), piece = c % (2 * MMQ_KB);
    const long long tb = static_cast<long long>(min(t0 + tok, n_tokens - 1)) * n_blocks + kb0;
    mmq_cp16(sx + tok * MMQ_X_STRIDE + 16 * piece, xq + 32 * tb + 16 * piece);
  }
  // d (and for the q4 types d * sum) transposed to [block][token], 4 bytes a copy.
  float* sd = reinterpret_cast<float*>(sx + MMQ_X_BYTES);
  for (int c = threadIdx.x; c < MMQ_TOKENS * MMQ_KB; c += MMQ_THREADS) {
    const int tok = c % MMQ_TOKENS, b = c / MMQ_TOKENS;
    const float2* src = xd + static_cast<long long>(min(t0 + tok, n_tokens - 1)) * n_blocks + kb0 + b;
    mmq_cp4(sd + c, &src->x);
    if (T != WT_Q8_0) mmq_cp4(sd + MMQ_KB * MMQ_TOKENS + c, &src->y);
  }
}

// The 4-byte word at byte offset off (even) of a staged row, read as aligned words (off is a constant where
// b is an unrolled loop's index).
__device__ __forceinline__ unsigned mmq_word(const u8* row, int off) {
  const unsigned* w = reinterpret_cast<const unsigned*>(row + (off & ~3));
  return (off & 3) == 0 ? w[0] : __funnelshift_r(w[0], w[1], 16);
}

// Block b of a staged row as lane t's two A words (its k = 4 t .. and 16 + 4 t .. of the fragment) and the
// block's scale d (and min m of q4_1). q8_0: the int8 at bytes [8 t, 8 t + 8) of the 32 (the k permutation
// mmq_x reads the activations in). q4_0 / q4_1: the nibbles of bytes [4 t, 4 t + 4) of the 16, low nibbles
// elements 4 t .. 4 t + 3 and high ones 16 + 4 t .. (the fragment's own order), 0..15 as int8 (q4_0's - 8
// comes from the activations' sum).
template <int T>
__device__ __forceinline__ void mmq_weights(const u8* row, int b, int t, unsigned& lo, unsigned& hi, float& d,
                                            float& m) {
  const u8* block = row + mmq_block_bytes<T>() * b;
  d = half_to_f32(*reinterpret_cast<const u16*>(block));
  m = 0.0f;
  if (T == WT_Q8_0) {
    lo = mmq_word(row, 34 * b + 2 + 8 * t);
    hi = mmq_word(row, 34 * b + 6 + 8 * t);
  } else {
    const int first = T == WT_Q4_0 ? 18 * b + 2 : 20 * b + 4;  // the nibbles
    const unsigned q = mmq_word(row, first + 4 * t);
    lo = q & 0x0F0F0F0Fu;
    hi = (q >> 4) & 0x0F0F0F0Fu;
    if (T == WT_Q4_1) m = half_to_f32(*reinterpret_cast<const u16*>(block + 2));
  }
}

// Lane (g, t)'s B words of block b for the token whose staged int8 row is x, in mmq_weights's k order.
template <int T>
__device__ __forceinline__ void mmq_x(const u8* x, int b, int t, unsigned& b0, unsigned& b1) {
  if (T == WT_Q8_0) {
    const uint2 v = *reinterpret_cast<const uint2*>(x + 32 * b + 8 * t);
    b0 = v.x;
    b1 = v.y;
  } else {
    b0 = *reinterpret_cast<const unsigned*>(x + 32 * b + 4 * t);
    b1 = *reinterpret_cast<const unsigned*>(x + 32 * b + 16 + 4 * t);
  }
}

// One block's term of an output: the weight's (d, m), the token's (d, d * sum), the integer dot.
template <int T>
__device__ __forceinline__ float mmq_term(float dw, float mw, float2 dx, int dot) {
  if (T == WT_Q8_0) return dw * dx.x * static_cast<float>(dot);
  if (T == WT_Q4_0) return dw * (dx.x * static_cast<float>(dot) - 8.0f * dx.y);  // (q - 8) x
  return dw * dx.x * static_cast<float>(dot) + mw * dx.y;                          // (d q + m) x
}

template <int T>
__device__ __forceinline__ void mmq_product(const ProductOutputs& p, int n_in, const i8* __restrict__ xq,
                                            const float2* __restrict__ xd, int n_tokens, float* __restrict__ parts) {
  extern __shared__ __align__(16) u8 mmq_smem[];
  const ProductTarget target = product_target(p, static_cast<int>(blockIdx.x));
  const int o0 = (static_cast<int>(blockIdx.x) - target.first_block) * MMQ_ROWS;
  const int t0 = blockIdx.y * MMQ_TOKENS;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int wm = warp % MMQ_WARPS_M, wn = (warp / MMQ_WARPS_M) % MMQ_WARPS_N;
  const int wk = MMQ_KSPLIT == 1 ? 0 : warp / (MMQ_WARPS_M * MMQ_WARPS_N);
  const int n_blocks = n_in / 32, n_all = n_blocks / MMQ_KB;
  // Part blockIdx.z of gridDim.z takes stages [first, first + n_stages) of the length (mmq_sum adds the parts).
  const int part = blockIdx.z, n_parts = gridDim.z;
  const int first = n_all * part / n_parts, n_stages = n_all * (part + 1) / n_parts - first;

  float acc[MMQ_WM][MMQ_WN][4];
#pragma unroll
  for (int m = 0; m < MMQ_WM; ++m) {
#pragma unroll
    for (int n = 0; n < MMQ_WN; ++n) {
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[m][n][i] = 0.0f;
    }
  }

#pragma unroll
  for (int s = 0; s < MMQ_STAGES - 1; ++s) {
    if (s < n_stages) {
      mmq_load_stage<T>(mmq_smem + s * mmq_stage_bytes<T>(), target, o0, xq, xd, n_blocks, t0, n_tokens,
                        (first + s) * MMQ_KB);
    }
    mmq_commit();
  }
  for (int ks = 0; ks < n_stages; ++ks) {
    mmq_wait<MMQ_STAGES - 2>();
    __syncthreads();  // stage ks is in; every warp is past stage ks - 1, whose buffer is refilled next
    const int next = ks + MMQ_STAGES - 1;
    if (next < n_stages) {
      mmq_load_stage<T>(mmq_smem + (next % MMQ_STAGES) * mmq_stage_bytes<T>(), target, o0, xq, xd, n_blocks, t0,
                        n_tokens, (first + next) * MMQ_KB);
    }
    mmq_commit();
    const u8* sw = mmq_smem + (ks % MMQ_STAGES) * mmq_stage_bytes<T>();
    const u8* sx = sw + mmq_w_bytes<T>();
    const float* sd = reinterpret_cast<const float*>(sx + MMQ_X_BYTES);
    const u8* rows[MMQ_WM][2];
#pragma unroll
    for (int m = 0; m < MMQ_WM; ++m) {
      rows[m][0] = sw + (16 * (wm * MMQ_WM + m) + g) * mmq_w_stride<T>();
      rows[m][1] = rows[m][0] + 8 * mmq_w_stride<T>();
    }
#pragma unroll
    for (int bb = 0; bb < MMQ_KB / MMQ_KSPLIT; ++bb) {
      const int b = bb * MMQ_KSPLIT + wk;
      unsigned a[MMQ_WM][4];
      float dw[MMQ_WM][2], mw[MMQ_WM][2];
#pragma unroll
      for (int m = 0; m < MMQ_WM; ++m) {
        mmq_weights<T>(rows[m][0], b, t, a[m][0], a[m][2], dw[m][0], mw[m][0]);
        mmq_weights<T>(rows[m][1], b, t, a[m][1], a[m][3], dw[m][1], mw[m][1]);
      }
#pragma unroll
      for (int n = 0; n < MMQ_WN; ++n) {
        const int tok = 8 * (wn * MMQ_WN + n);  // the tile's first token in the block
        unsigned b0, b1;
        mmq_x<T>(sx + (tok + g) * MMQ_X_STRIDE, b, t, b0, b1);
        // The lane's tokens 2 t and 2 t + 1: (d, d * sum) of each.
        const float2 d01 = *reinterpret_cast<const float2*>(sd + b * MMQ_TOKENS + tok + 2 * t);
        float2 s01 = make_float2(0.0f, 0.0f);
        if (T != WT_Q8_0) s01 = *reinterpret_cast<const float2*>(sd + (MMQ_KB + b) * MMQ_TOKENS + tok + 2 * t);
        const float2 dx0 = make_float2(d01.x, s01.x), dx1 = make_float2(d01.y, s01.y);
#pragma unroll
        for (int m = 0; m < MMQ_WM; ++m) {
          int d[4] = {0, 0, 0, 0};
          mma_16832_s8(d, a[m], b0, b1);
          acc[m][n][0] += mmq_term<T>(dw[m][0], mw[m][0], dx0, d[0]);
          acc[m][n][1] += mmq_term<T>(dw[m][0], mw[m][0], dx1, d[1]);
          acc[m][n][2] += mmq_term<T>(dw[m][1], mw[m][1], dx0, d[2]);
          acc[m][n][3] += mmq_term<T>(dw[m][1], mw[m][1], dx1, d[3]);
        }
      }
    }
  }
  mmq_wait<0>();
  if (MMQ_KSPLIT > 1) {
    // The length's parts summed in warp order (a fixed order: batch invariance), through the stages' memory.
    constexpr int N_ACC = MMQ_WM * MMQ_WN * 4, TILES = MMQ_WARPS_M * MMQ_WARPS_N;
    float* red = reinterpret_cast<float*>(mmq_smem);  // [wk - 1][tile][acc][lane]
    const int tile = warp % TILES;
    __syncthreads();  // every warp is past the last stage
    if (wk > 0) {
#pragma unroll
      for (int m = 0; m < MMQ_WM; ++m) {
#pragma unroll
        for (int n = 0; n < MMQ_WN; ++n) {
#pragma unroll
          for (int i = 0; i < 4; ++i) red[(((wk - 1) * TILES + tile) * N_ACC + (m * MMQ_WN + n) * 4 + i) * 32 + lane] = acc[m][n][i];
        }
      }
    }
    __syncthreads();
    if (wk > 0) return;
#pragma unroll
    for (int k = 1; k < MMQ_KSPLIT; ++k) {
#pragma unroll
      for (int m = 0; m < MMQ_WM; ++m) {
#pragma unroll
        for (int n = 0; n < MMQ_WN; ++n) {
#pragma unroll
          for (int i = 0; i < 4; ++i) acc[m][n][i] += red[(((k - 1) * TILES + tile) * N_ACC + (m * MMQ_WN + n) * 4 + i) * 32 + lane];
        }
      }
    }
  }
  // acc[m][n][i] of lane (g, t): row 16 m + g + 8 (i / 2), token 8 n + 2 t + i % 2 of the warp's. One part:
  // the output; several: the part's slice of `parts` ([part][token][block x * MMQ_ROWS + row of the block]).
  const long long n_slots = static_cast<long long>(gridDim.x) * MMQ_ROWS;
  float* slice = parts + (static_cast<long long>(part) * n_tokens) * n_slots + blockIdx.x * MMQ_ROWS;
#pragma unroll
  for (int m = 0; m < MMQ_WM; ++m) {
#pragma unroll
    for (int n = 0; n < MMQ_WN; ++n) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int row = o0 + 16 * (wm * MMQ_WM + m) + g + 8 * (i / 2);
        const int token = t0 + 8 * (wn * MMQ_WN + n) + 2 * t + i % 2;
        if (row >= target.n_out || token >= n_tokens) continue;
        if (n_parts == 1) {
          target.y[static_cast<long long>(token) * target.n_out + row] = acc[m][n][i];
        } else {
          slice[token * n_slots + row - o0] = acc[m][n][i];
        }
      }
    }
  }
}

#define MMQ_ENTRY(NAME, T)                                                                                   \
  extern "C" __global__ void __launch_bounds__(MMQ_THREADS)                                                  \
      NAME(const ProductOutputs p, int n_in, const i8* xq, const float2* xd, int n_tokens, float* parts) {   \
    mmq_product<T>(p, n_in, xq, xd, n_tokens, parts);                                                        \
  }
MMQ_ENTRY(mmq_q8_0, WT_Q8_0)
MMQ_ENTRY(mmq_q4_0, WT_Q4_0)
MMQ_ENTRY(mmq_q4_1, WT_Q4_1)

// The parts of a length split over gridDim.z of an mmq_* launch of n_blocks_x blocks of rows, added in part
// order (a fixed order: an output's sum never depends on the batch) into the outputs: a thread an output row
// (grid.x over the launch's slots, n_blocks_x * MMQ_ROWS), grid.y a token.
extern "C" __global__ void __launch_bounds__(256)
    mmq_sum(const ProductOutputs p, const float* __restrict__ parts, int n_parts, int n_blocks_x, int n_tokens) {
  const long long n_slots = static_cast<long long>(n_blocks_x) * MMQ_ROWS;
  const int slot = blockIdx.x * 256 + threadIdx.x;
  if (slot >= n_slots) return;
  const ProductTarget target = product_target(p, slot / MMQ_ROWS);
  const int row = (slot / MMQ_ROWS - target.first_block) * MMQ_ROWS + slot % MMQ_ROWS;
  if (row >= target.n_out) return;
  const int token = blockIdx.y;
  const float* x = parts + static_cast<long long>(token) * n_slots + slot;
  float sum = x[0];
  for (int k = 1; k < n_parts; ++k) sum += x[static_cast<long long>(k) * n_tokens * n_slots];
  target.y[static_cast<long long>(token) * target.n_out + row] = sum;
}
