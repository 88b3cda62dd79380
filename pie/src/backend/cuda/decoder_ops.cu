// The CUDA backend's kernels (pie/src/backend/cuda/cuda_backend.cpp), compiled at run time by NVRTC (no
// toolkit headers): embedding lookup, RMSNorm, products with the weights in their file type (the blocks
// read and dequantized in registers, never expanded in memory), bias, residual add, SwiGLU, row gather and
// soft-capping; RoPE, KV append and paged attention for the head dims pal's CUDA kernels do not take.
//
// Batch invariance: every kernel computes a row from that row alone, in an order that depends on the row's
// length only (a product's dot for token t is the same lanes over the same chunks whatever the other tokens).

// The types, conversions and load_chunk come first, from weight_blocks.cuh (cuda_sources.cpp: kernel_text).

// Programmatic dependent launch (sm_90 and later; cuda_backend.cpp launches every entry of this file with it
// unless ORCHARD_CUDA_PDL=0): a kernel may be scheduled while the one before it on the stream still runs, so
// its blocks are resident and waiting when that one ends (no launch ramp between the two), and a product
// loads its first weights, which no kernel writes, during the kernel before. Every entry calls
// let_next_kernel_start() first (the next kernel's blocks may then take the room this one leaves) and
// wait_for_previous_kernel() before it reads or writes anything another kernel touches: that wait returns
// once the kernel before has finished and its writes are visible, and since every entry waits, so have
// all kernels before it. Both are no-ops on a plain launch and before sm_90.
__device__ __forceinline__ void let_next_kernel_start() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void wait_for_previous_kernel() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
#define AFTER_PREVIOUS_KERNEL() \
  let_next_kernel_start();      \
  wait_for_previous_kernel()

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// The products' blocks: WARPS warps share one output row o = blockIdx.x (warp w takes the row's pieces
// 32 w + lane, + 32 WARPS, ...: four times the warps a row per warp gives, for the short-row, few-row
// products), TOKENS tokens a block (blockIdx.y). The warps' sums are added in warp order: a fixed order that
// depends on the row's length only (batch invariance).
#define TOKENS 8
#define WARPS 4
__device__ __forceinline__ void store_row(float (&acc)[TOKENS], int t0, int n_tokens, int n_out, int o, float* y) {
  __shared__ float partial[WARPS][TOKENS];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int t = 0; t < TOKENS; ++t) {
    const float s = warp_sum(acc[t]);
    if (lane == 0) partial[warp][t] = s;
  }
  __syncthreads();
  const int t = threadIdx.x;
  if (t < TOKENS && t0 + t < n_tokens) {
    float s = 0.0f;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) s += partial[w][t];
    y[static_cast<long long>(t0 + t) * n_out + o] = s;
  }
}

// y[t][o] = sum_i W[o][i] x[t][i]: a block per output row o and TOKENS tokens; thread i of the block takes
// chunks i, i + 32 WARPS, ... of the row, dequantized once for all the tokens (store_row sums them). The
// K-quants, and the float types' rows of other than a multiple of 8 (the matvec_* kernels below take the
// rest).
template <int T>
__device__ __forceinline__ void matmul(const u8* __restrict__ w, long long row_bytes, int n_out, int n_in,
                                       const float* __restrict__ x, int n_tokens, float* __restrict__ y) {
  const int o = blockIdx.x;
  const int t0 = blockIdx.y * TOKENS;
  const u8* row = w + row_bytes * o;
  const int n_chunks = (n_in + 31) / 32;
  float acc[TOKENS];
#pragma unroll
  for (int t = 0; t < TOKENS; ++t) acc[t] = 0.0f;
  for (int c = threadIdx.x; c < n_chunks; c += 32 * WARPS) {
    float wv[32];
    load_chunk<T>(row, c, n_in, wv);
#pragma unroll
    for (int t = 0; t < TOKENS; ++t) {
      if (t0 + t < n_tokens) {
        const float* xr = x + static_cast<long long>(t0 + t) * n_in + 32 * c;
        float s = 0.0f;
        if (32 * c + 32 <= n_in && (n_in & 3) == 0) {
#pragma unroll
          for (int j = 0; j < 32; j += 4) {
            const float4 v = *reinterpret_cast<const float4*>(xr + j);
            s += wv[j] * v.x + wv[j + 1] * v.y + wv[j + 2] * v.z + wv[j + 3] * v.w;
          }
        } else {
          for (int j = 0; j < 32 && 32 * c + j < n_in; ++j) s += wv[j] * xr[j];
        }
        acc[t] += s;
      }
    }
  }
  store_row(acc, t0, n_tokens, n_out, o, y);
}

#define MATMUL_ENTRY(NAME, T)                                                                               \
  extern "C" __global__ void __launch_bounds__(WARPS * 32) NAME(const u8* w, long long row_bytes, int n_out, \
                                                                int n_in, const float* x, int n_tokens,       \
                                                                float* y) {                                   \
    AFTER_PREVIOUS_KERNEL();                                                                                  \
    matmul<T>(w, row_bytes, n_out, n_in, x, n_tokens, y);                                                     \
  }
MATMUL_ENTRY(matmul_f32, WT_F32)
MATMUL_ENTRY(matmul_f16, WT_F16)
MATMUL_ENTRY(matmul_bf16, WT_BF16)
MATMUL_ENTRY(matmul_q8_0, WT_Q8_0)
MATMUL_ENTRY(matmul_q4_0, WT_Q4_0)
MATMUL_ENTRY(matmul_q4_1, WT_Q4_1)
MATMUL_ENTRY(matmul_q4_K, WT_Q4_K)
MATMUL_ENTRY(matmul_q5_K, WT_Q5_K)
MATMUL_ENTRY(matmul_q6_K, WT_Q6_K)

// Activations quantized to 8 bits once per input (as llama.cpp's MMVQ reads them), for the products of
// the 32-element block types: token t's block b is xq[t][32 b .. 32 b + 32) (int8, 16-byte aligned rows of
// n_blocks * 32) with xd[t][b] = (d, d * sum q). The CPU backend's q8_0 rule, so that both round alike:
// q = roundf(x * (1 / (amax / 127))), d = amax / 127 rounded to f16. A warp per block, a lane per element
// (zeros past n_in).
// One 32-element block of a row as q8_1, a lane per element (v: the lane's element, 0 past the row's end):
// the warp's amax, the lane's int8, the block's (d, d * sum q). Shared by every kernel that writes q8_1
// blocks, so that a row quantized where it is made rounds as quantize_q8_1 rounds it.
__device__ __forceinline__ void quantize_block_q8_1(float v, int lane, i8* __restrict__ q_out,
                                                    float2* __restrict__ d_out) {
  float amax = fabsf(v);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  const int q = static_cast<int>(roundf(__fmul_rn(v, id)));
  const float sum = warp_sum(static_cast<float>(q));  // integers below 2^24: exact
  const float d16 = half_to_f32(f32_to_half(d));
  *q_out = static_cast<i8>(q);
  if (lane == 0) *d_out = make_float2(d16, d16 * sum);
}

extern "C" __global__ void quantize_q8_1(const float* __restrict__ x, int n_in, int n_tokens, i8* __restrict__ xq,
                                         float2* __restrict__ xd) {
  AFTER_PREVIOUS_KERNEL();
  const int n_blocks = (n_in + 31) / 32;
  const long long w = static_cast<long long>(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (w >= static_cast<long long>(n_blocks) * n_tokens) return;
  const int t = static_cast<int>(w / n_blocks), b = static_cast<int>(w % n_blocks), lane = threadIdx.x & 31;
  const int i = 32 * b + lane;
  const float v = i < n_in ? x[static_cast<long long>(t) * n_in + i] : 0.0f;
  quantize_block_q8_1(v, lane, xq + static_cast<long long>(t) * n_blocks * 32 + i,
                      xd + static_cast<long long>(t) * n_blocks + b);
}

// A row of n (a multiple of 32) as q8_1 blocks by a whole block of threads, a warp per 32 elements: the row
// was written by this block before a __syncthreads().
__device__ __forceinline__ void quantize_row_q8_1(const float* row, int n, i8* __restrict__ xq,
                                                  float2* __restrict__ xd) {
  const int lane = threadIdx.x & 31;
  for (int b = threadIdx.x >> 5; b < n / 32; b += blockDim.x >> 5) {
    quantize_block_q8_1(row[32 * b + lane], lane, xq + 32 * b + lane, xd + b);
  }
}

__device__ __forceinline__ int dp4a(int a, int b, int c) {
  int r;
  asm("dp4a.s32.s32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c));
  return r;
}

// ---- The small-token products (matvec_*): 1 to 8 tokens a block, up to four outputs a launch. ----
//
// A block of MV_WARPS warps computes ROWS output rows for a tile of NT tokens (NT = 1, 2, 4 or 8: the entry's
// _t suffix; the backend picks the smallest tile that holds the call's tokens, tiles of 8 past that). Its
// threads stride over the row together (split-K across the block: a short row still spreads over 128 lanes),
// each loading a piece of every one of the ROWS rows at once (ROWS independent loads in flight a lane); for
// the float types' tiles of 4 and 8 a lane loads its next pieces before it computes the current ones (their
// computing, 4-8 tokens' worth, then overlaps the loads). The activations are read once per piece for all
// ROWS rows, the weights once for all NT tokens. Sums: each lane's in the order of its pieces, then the warp's
// butterfly, then the warps in warp order: an order set by the row's length alone, so a token's result does
// not depend on how many tokens share the call (batch invariance; the tokens never mix, fmaf keeps the same
// roundings).
//
// One launch covers several outputs of one type that read the same input (q, k and v; gate and up): output j
// takes the grid's blocks [first_block[j], first_block[j + 1]). The k / v projections (1,024 rows of an
// 8B-shaped model, 256 blocks alone) no longer run as launches too small to fill the card.
//
// Tunables (defaults are what the backend launches, picked from orchard_bench_products' sweep on an H100,
// docs/PERFORMANCE.md; the benchmark passes others with -D, and the host side reads the rows from
// product_launch.h).
#ifndef MV_ROWS_NARROW
#define MV_ROWS_NARROW 2  // rows a block for tiles of 1 or 2 tokens
#endif
#ifndef MV_ROWS_WIDE
#define MV_ROWS_WIDE 4  // rows a block for tiles of 4 or 8 tokens (the activations' reads shared by more rows)
#endif
#ifndef MV_UNROLL
#define MV_UNROLL 1  // pieces (blocks, for the q8_1 types) of each row a lane loads at once
#endif
#ifndef MV_SPLIT
#define MV_SPLIT 1  // lanes sharing one 32-element block in the q8_1 products: 1, 2 or 4
#endif
#ifndef MV_PREFETCH_L2
#define MV_PREFETCH_L2 0  // the rows past a lane's first loads asked into L2 before waiting for the kernel before
#endif                    // (measured slower: docs/cuda-backend.md, "Programmatic dependent launch")
#ifndef MV_PIPELINE_WIDE
#define MV_PIPELINE_WIDE 1  // float types, tiles of 4 or 8: a lane loads its next pieces before it computes
#endif
#ifndef MV_PIPELINE
#define MV_PIPELINE 0  // the other products (the same pipelining measured no faster, or slower, for them)
#endif
#define MV_WARPS 4
#define MV_THREADS (32 * MV_WARPS)
#define MV_MAX_OUTS PRODUCT_MAX_OUTS
#define MV_ROWS_FOR(NT) ((NT) >= 4 ? MV_ROWS_WIDE : MV_ROWS_NARROW)

// This block's output, its first row o0, and its ROWS row pointers (a row past n_out reads row n_out - 1;
// its sums are dropped).
template <int ROWS>
__device__ __forceinline__ void mv_target(const ProductOutputs& p, const u8* (&rows)[ROWS], float*& y, int& n_out,
                                          int& o0) {
  const int bx = static_cast<int>(blockIdx.x);
  const ProductTarget t = product_target(p, bx);
  y = t.y;
  n_out = t.n_out;
  const u8* w = t.w;
  const long long row_bytes = t.row_bytes;
  const int first = t.first_block;
  o0 = (bx - first) * ROWS;
#pragma unroll
  for (int r = 0; r < ROWS; ++r) rows[r] = w + row_bytes * min(o0 + r, n_out - 1);
}

// Before a product waits for the kernel before it (wait_for_previous_kernel), its lanes have loaded the first
// piece (block) of each of the block's rows; with MV_PREFETCH_L2, bytes [from, to) of the rows, the rest, are
// asked into L2 here, a 128-byte line a lane at a time (off: every block's extra requests cost more than the
// early start of the first wave's rest gained).
template <int ROWS>
__device__ __forceinline__ void mv_prefetch_rest(const u8* const (&rows)[ROWS], long long from, long long to) {
  if (!MV_PREFETCH_L2) return;
  for (long long b = from + 128LL * threadIdx.x; b < to; b += 128LL * MV_THREADS) {
#pragma unroll
    for (int r = 0; r < ROWS; ++r) asm volatile("prefetch.global.L2 [%0];" ::"l"(rows[r] + b));
  }
}

// The block's sums of acc[r][t] (each warp's butterfly, then the warps in order) into y[t0 + t][o0 + r].
template <int ROWS, int NT>
__device__ __forceinline__ void mv_store(float (&acc)[ROWS][NT], float* y, int n_out, int o0, int t0,
                                         int n_tokens) {
  __shared__ float partial[MV_WARPS][ROWS * NT];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    if (t0 + t < n_tokens) {
#pragma unroll
      for (int r = 0; r < ROWS; ++r) {
        const float s = warp_sum(acc[r][t]);
        if (lane == 0) partial[warp][r * NT + t] = s;
      }
    }
  }
  __syncthreads();
  if (threadIdx.x < ROWS * NT) {
    const int r = threadIdx.x / NT, t = threadIdx.x % NT;
    if (o0 + r < n_out && t0 + t < n_tokens) {
      float s = partial[0][threadIdx.x];
#pragma unroll
      for (int w = 1; w < MV_WARPS; ++w) s += partial[w][threadIdx.x];
      y[static_cast<long long>(t0 + t) * n_out + o0 + r] = s;
    }
  }
}

// The 8 elements of a 16-byte piece (f16 / bf16; f32 pieces are two 16-byte words) as floats.
template <int T>
__device__ __forceinline__ void piece_floats(const uint4 (&raw)[2], float (&w)[8]) {
  if (T == WT_F32) {
    const unsigned words[8] = {raw[0].x, raw[0].y, raw[0].z, raw[0].w, raw[1].x, raw[1].y, raw[1].z, raw[1].w};
#pragma unroll
    for (int j = 0; j < 8; ++j) w[j] = __uint_as_float(words[j]);
  } else {
    const unsigned words[4] = {raw[0].x, raw[0].y, raw[0].z, raw[0].w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if (T == WT_F16) {
        w[2 * j] = half_to_f32(static_cast<u16>(words[j] & 0xFFFF));
        w[2 * j + 1] = half_to_f32(static_cast<u16>(words[j] >> 16));
      } else {
        w[2 * j] = __uint_as_float(words[j] << 16);
        w[2 * j + 1] = __uint_as_float(words[j] & 0xFFFF0000u);
      }
    }
  }
}

// Pieces k0 + u MV_THREADS (u < MV_UNROLL) of each row (zeros past n8, nothing read).
template <int T, int ROWS>
__device__ __forceinline__ void dense_load(const u8* const (&rows)[ROWS], int k0, int n8,
                                           uint4 (&raw)[MV_UNROLL][ROWS][2]) {
  constexpr int WORDS = T == WT_F32 ? 2 : 1;
#pragma unroll
  for (int u = 0; u < MV_UNROLL; ++u) {
    const int k = k0 + u * MV_THREADS;
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        raw[u][r][h] = (k < n8 && h < WORDS) ? __ldg(reinterpret_cast<const uint4*>(rows[r]) + WORDS * k + h)
                                             : make_uint4(0, 0, 0, 0);
      }
    }
  }
}

// f32 / f16 / bf16 rows of a multiple of 8 elements: piece k is elements [8 k, 8 k + 8) (16 bytes, 32 for
// f32), lane i of the block takes pieces i, i + MV_THREADS, ...: each warp's loads cover 512 contiguous bytes.
template <int T, int NT>
__device__ __forceinline__ void matvec_dense(const ProductOutputs& p, int n_in, const float* __restrict__ x,
                                             int n_tokens) {
  let_next_kernel_start();
  constexpr int ROWS = MV_ROWS_FOR(NT);
  const u8* rows[ROWS];
  float* y;
  int n_out, o0;
  mv_target<ROWS>(p, rows, y, n_out, o0);
  const int t0 = blockIdx.y * NT;
  const int n8 = n_in / 8;
  float acc[ROWS][NT];
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
#pragma unroll
    for (int t = 0; t < NT; ++t) acc[r][t] = 0.0f;
  }
  constexpr int STEP = MV_THREADS * MV_UNROLL;
  constexpr bool PIPE = NT >= 4 ? MV_PIPELINE_WIDE : MV_PIPELINE;
  uint4 raw[MV_UNROLL][ROWS][2];
  dense_load<T, ROWS>(rows, threadIdx.x, n8, raw);
  constexpr long long PIECE_BYTES = T == WT_F32 ? 32 : 16;
  mv_prefetch_rest<ROWS>(rows, PIECE_BYTES * STEP, PIECE_BYTES * n8);
  wait_for_previous_kernel();  // x, y: written or read by the kernels before
  for (int k0 = threadIdx.x; k0 < n8; k0 += STEP) {
    uint4 cur[MV_UNROLL][ROWS][2];
#pragma unroll
    for (int u = 0; u < MV_UNROLL; ++u) {
#pragma unroll
      for (int r = 0; r < ROWS; ++r) {
        cur[u][r][0] = raw[u][r][0];
        cur[u][r][1] = raw[u][r][1];
      }
    }
    if (PIPE) dense_load<T, ROWS>(rows, k0 + STEP, n8, raw);
#pragma unroll
    for (int u = 0; u < MV_UNROLL; ++u) {
      const int k = k0 + u * MV_THREADS;
      if (k >= n8) break;
      float w[ROWS][8];
#pragma unroll
      for (int r = 0; r < ROWS; ++r) piece_floats<T>(cur[u][r], w[r]);
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        if (t0 + t < n_tokens) {
          const float4* xr = reinterpret_cast<const float4*>(x + static_cast<long long>(t0 + t) * n_in) + 2 * k;
          const float4 a = __ldg(xr), b = __ldg(xr + 1);
#pragma unroll
          for (int r = 0; r < ROWS; ++r) {
            float s = acc[r][t];
            s = fmaf(w[r][0], a.x, s);
            s = fmaf(w[r][1], a.y, s);
            s = fmaf(w[r][2], a.z, s);
            s = fmaf(w[r][3], a.w, s);
            s = fmaf(w[r][4], b.x, s);
            s = fmaf(w[r][5], b.y, s);
            s = fmaf(w[r][6], b.z, s);
            s = fmaf(w[r][7], b.w, s);
            acc[r][t] = s;
          }
        }
      }
    }
    if (!PIPE) dense_load<T, ROWS>(rows, k0 + STEP, n8, raw);
  }
  mv_store<ROWS, NT>(acc, y, n_out, o0, t0, n_tokens);
}

// Where part h (of MV_SPLIT) of block c of a q8_0 / q4_0 / q4_1 row starts (an even address: q8_0's 34-byte
// and q4_0's 18-byte blocks start at any even byte).
template <int T>
__device__ __forceinline__ const u8* q8_part(const u8* row, int c, int h) {
  constexpr int PW = T == WT_Q8_0 ? 8 / MV_SPLIT : 4 / MV_SPLIT;  // words a part
  if (T == WT_Q8_0) return row + 34 * c + 2 + 4 * PW * h;
  if (T == WT_Q4_0) return row + 18 * c + 2 + 4 * PW * h;
  return row + 20 * c + 4 + 4 * PW * h;
}

// One stage of a lane's loads: for each of MV_UNROLL blocks and ROWS rows, the part's aligned words (PW, and
// one more where the part is not 4-byte aligned; that word stays inside the allocation, whose size the pool
// rounds up) and the block's scale word, raw: nothing is done with them until they are used, so that a
// stage's loads can stay in flight while the previous stage computes.
template <int T, int ROWS>
struct Q8Stage {
  static constexpr int PW = T == WT_Q8_0 ? 8 / MV_SPLIT : 4 / MV_SPLIT;
  unsigned w[MV_UNROLL][ROWS][PW + 1];
  unsigned dm[MV_UNROLL][ROWS];  // q8_0 / q4_0: d (f16) in the low half; q4_1: d, m
};

template <int T, int ROWS>
__device__ __forceinline__ void q8_load(const u8* const (&rows)[ROWS], int c0, int n_blocks, int h,
                                        Q8Stage<T, ROWS>& st) {
  constexpr int PW = Q8Stage<T, ROWS>::PW, STRIDE = MV_THREADS / MV_SPLIT;
#pragma unroll
  for (int u = 0; u < MV_UNROLL; ++u) {
    const int c = c0 + u * STRIDE;
    if (c >= n_blocks) break;
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      const unsigned long long addr = reinterpret_cast<unsigned long long>(q8_part<T>(rows[r], c, h));
      const unsigned* a = reinterpret_cast<const unsigned*>(addr & ~3ull);
#pragma unroll
      for (int j = 0; j < PW; ++j) st.w[u][r][j] = __ldg(a + j);
      st.w[u][r][PW] = (T != WT_Q4_1 && (addr & 2)) ? __ldg(a + PW) : 0u;
      if (T == WT_Q4_1) {
        st.dm[u][r] = __ldg(reinterpret_cast<const unsigned*>(rows[r] + 20 * c));
      } else {
        st.dm[u][r] = __ldg(reinterpret_cast<const u16*>(rows[r] + (T == WT_Q8_0 ? 34 : 18) * c));
      }
    }
  }
}

__device__ __forceinline__ unsigned shift_right_clamp(unsigned lo, unsigned hi, unsigned s) {
  unsigned r;
  asm("shf.r.clamp.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(lo), "r"(hi), "r"(s));
  return r;
}

// N consecutive ints of 16-byte aligned q8_1 activations (N = 1, 2, 4 or 8; 4 N-byte aligned).
template <int N>
__device__ __forceinline__ void load_run(const int* p, int* out) {
  if (N >= 4) {
#pragma unroll
    for (int j = 0; j < N; j += 4) {
      const int4 v = __ldg(reinterpret_cast<const int4*>(p + j));
      out[j] = v.x;
      out[j + 1] = v.y;
      out[j + 2] = v.z;
      out[j + 3] = v.w;
    }
  } else if (N == 2) {
    const int2 v = __ldg(reinterpret_cast<const int2*>(p));
    out[0] = v.x;
    out[1] = v.y;
  } else {
    out[0] = __ldg(p);
  }
}

// q8_0 / q4_0 / q4_1 rows against the q8_1 activations (quantize_q8_1): the lanes of a block of 32 elements
// (MV_SPLIT of them; one by default: a lane reads a whole block, 9 aligned words of q8_0's 34 bytes) take
// QV = 8 / MV_SPLIT of its 8 words each (part h), read as aligned 4-byte words and funnel-shifted into place,
// and dot them with the activations' matching words (dp4a); lane i of the block takes part i % MV_SPLIT of
// blocks i / MV_SPLIT, + MV_THREADS / MV_SPLIT, ...: a warp reads 32 / MV_SPLIT consecutive blocks at once. q4_0 / q4_1 words hold 8 nibbles: part h takes nibble words NV h .. NV h + NV
// (NV = 4 / MV_SPLIT), whose low nibbles are elements 4 (NV h + i) .. + 3 and high nibbles those + 16.
template <int T, int NT>
__device__ __forceinline__ void matvec_q8(const ProductOutputs& p, int n_in, const i8* __restrict__ xq,
                                          const float2* __restrict__ xd, int n_tokens) {
  let_next_kernel_start();
  constexpr int ROWS = MV_ROWS_FOR(NT);
  constexpr int QV = 8 / MV_SPLIT, NV = 4 / MV_SPLIT, PW = Q8Stage<T, ROWS>::PW;
  const u8* rows[ROWS];
  float* y;
  int n_out, o0;
  mv_target<ROWS>(p, rows, y, n_out, o0);
  const int t0 = blockIdx.y * NT;
  const int n_blocks = n_in / 32;
  const int h = threadIdx.x % MV_SPLIT;
  constexpr int STRIDE = MV_THREADS / MV_SPLIT, STEP = STRIDE * MV_UNROLL;
  float acc[ROWS][NT];
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
#pragma unroll
    for (int t = 0; t < NT; ++t) acc[r][t] = 0.0f;
  }
  Q8Stage<T, ROWS> st;
  q8_load<T, ROWS>(rows, threadIdx.x / MV_SPLIT, n_blocks, h, st);
  constexpr long long BLOCK_BYTES = T == WT_Q8_0 ? 34 : T == WT_Q4_0 ? 18 : 20;
  mv_prefetch_rest<ROWS>(rows, BLOCK_BYTES * STEP, BLOCK_BYTES * n_blocks);
  wait_for_previous_kernel();  // xq, xd, y: written or read by the kernels before
  for (int c0 = threadIdx.x / MV_SPLIT; c0 < n_blocks; c0 += STEP) {
    const Q8Stage<T, ROWS> cur = st;
    if (MV_PIPELINE) q8_load<T, ROWS>(rows, c0 + STEP, n_blocks, h, st);
#pragma unroll
    for (int u = 0; u < MV_UNROLL; ++u) {
      const int c = c0 + u * STRIDE;
      if (c >= n_blocks) break;
      int q[ROWS][QV];  // the part's weights as bytes, in the order of the activation words below
      float d[ROWS], m[ROWS];
#pragma unroll
      for (int r = 0; r < ROWS; ++r) {
        const unsigned s = static_cast<unsigned>(reinterpret_cast<unsigned long long>(q8_part<T>(rows[r], c, h)) & 2) * 8;
        int words[PW];
#pragma unroll
        for (int j = 0; j < PW; ++j) words[j] = static_cast<int>(shift_right_clamp(cur.w[u][r][j], cur.w[u][r][j + 1], s));
        d[r] = half_to_f32(static_cast<u16>(cur.dm[u][r] & 0xFFFF));
        m[r] = T == WT_Q4_1 ? half_to_f32(static_cast<u16>(cur.dm[u][r] >> 16)) : 0.0f;
        if (T == WT_Q8_0) {
#pragma unroll
          for (int i = 0; i < QV; ++i) q[r][i] = words[i];
        } else {
#pragma unroll
          for (int i = 0; i < NV; ++i) {
            q[r][i] = words[i] & 0x0F0F0F0F;
            q[r][NV + i] = (words[i] >> 4) & 0x0F0F0F0F;
          }
        }
      }
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        if (t0 + t < n_tokens) {
          const long long tb = static_cast<long long>(t0 + t) * n_blocks + c;
          const int* xb = reinterpret_cast<const int*>(xq + 32 * tb);
          int xv[QV];
          if (T == WT_Q8_0) {
            load_run<QV>(xb + QV * h, xv);
          } else {
            load_run<NV>(xb + NV * h, xv);
            load_run<NV>(xb + 4 + NV * h, xv + NV);
          }
          const float2 ds = __ldg(xd + tb);
#pragma unroll
          for (int r = 0; r < ROWS; ++r) {
            int dot = 0;
#pragma unroll
            for (int i = 0; i < QV; ++i) dot = dp4a(q[r][i], xv[i], dot);
            const float sum = static_cast<float>(dot);
            if (T == WT_Q8_0) acc[r][t] += d[r] * ds.x * sum;
            if (T == WT_Q4_0) acc[r][t] += d[r] * (ds.x * sum - (h == 0 ? 8.0f * ds.y : 0.0f));  // (q - 8) x
            if (T == WT_Q4_1) acc[r][t] += d[r] * ds.x * sum + (h == 0 ? m[r] * ds.y : 0.0f);  // (d q + m) x
          }
        }
      }
    }
    if (!MV_PIPELINE) q8_load<T, ROWS>(rows, c0 + STEP, n_blocks, h, st);
  }
  mv_store<ROWS, NT>(acc, y, n_out, o0, t0, n_tokens);
}

#define MATVEC_DENSE_ENTRY(NAME, T, NT)                                                                      \
  extern "C" __global__ void __launch_bounds__(MV_THREADS)                                                   \
      NAME(const ProductOutputs p, int n_in, const float* x, int n_tokens) {                                 \
    matvec_dense<T, NT>(p, n_in, x, n_tokens);                                                               \
  }
#define MATVEC_Q8_ENTRY(NAME, T, NT)                                                                         \
  extern "C" __global__ void __launch_bounds__(MV_THREADS)                                                   \
      NAME(const ProductOutputs p, int n_in, const i8* xq, const float2* xd, int n_tokens) {                 \
    matvec_q8<T, NT>(p, n_in, xq, xd, n_tokens);                                                             \
  }
#define MATVEC_TILES(ENTRY, NAME, T) \
  ENTRY(NAME##_t1, T, 1) ENTRY(NAME##_t2, T, 2) ENTRY(NAME##_t4, T, 4) ENTRY(NAME##_t8, T, 8)
MATVEC_TILES(MATVEC_DENSE_ENTRY, matvec_f32, WT_F32)
MATVEC_TILES(MATVEC_DENSE_ENTRY, matvec_f16, WT_F16)
MATVEC_TILES(MATVEC_DENSE_ENTRY, matvec_bf16, WT_BF16)
MATVEC_TILES(MATVEC_Q8_ENTRY, matvec_q8_1_q8_0, WT_Q8_0)
MATVEC_TILES(MATVEC_Q8_ENTRY, matvec_q8_1_q4_0, WT_Q4_0)
MATVEC_TILES(MATVEC_Q8_ENTRY, matvec_q8_1_q4_1, WT_Q4_1)

// out[t] = table[tokens[t]]: a block per token, a thread per chunk of 32.
template <int T>
__device__ __forceinline__ void embed(const u8* table, long long row_bytes, int n_embd, const int* tokens,
                                      float* out) {
  const int t = blockIdx.x;
  const u8* row = table + row_bytes * tokens[t];
  float* o = out + static_cast<long long>(t) * n_embd;
  for (int c = threadIdx.x; c < (n_embd + 31) / 32; c += blockDim.x) {
    float wv[32];
    load_chunk<T>(row, c, n_embd, wv);
    for (int j = 0; j < 32 && 32 * c + j < n_embd; ++j) o[32 * c + j] = wv[j];
  }
}
#define EMBED_ENTRY(NAME, T)                                                                                   \
  extern "C" __global__ void NAME(const u8* table, long long row_bytes, int n_embd, const int* tokens, float* out) { \
    AFTER_PREVIOUS_KERNEL();                                                                                     \
    embed<T>(table, row_bytes, n_embd, tokens, out);                                                             \
  }
EMBED_ENTRY(embed_f32, WT_F32)
EMBED_ENTRY(embed_f16, WT_F16)
EMBED_ENTRY(embed_bf16, WT_BF16)
EMBED_ENTRY(embed_q8_0, WT_Q8_0)
EMBED_ENTRY(embed_q4_0, WT_Q4_0)
EMBED_ENTRY(embed_q4_1, WT_Q4_1)
EMBED_ENTRY(embed_q4_K, WT_Q4_K)
EMBED_ENTRY(embed_q5_K, WT_Q5_K)
EMBED_ENTRY(embed_q6_K, WT_Q6_K)

// o = xr / sqrt(mean(xr^2) + eps) * w for one row, by a whole block. Rows of a multiple of 4 are read as
// float4 with four loads in flight a thread (a decode step's norm is one row: its time is the loads'
// latency); the squares are summed in an order set by n and the block size alone.
__device__ __forceinline__ void rms_norm_row(const float* xr, const float* w, float eps, int n, float* o) {
  __shared__ float partial[32];
  const bool vec = (n & 3) == 0;
  float s = 0.0f;
  if (vec) {
    const float4* x4 = reinterpret_cast<const float4*>(xr);
#pragma unroll 4
    for (int i = threadIdx.x; i < n / 4; i += blockDim.x) {
      const float4 v = x4[i];
      s += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
    }
  } else {
    for (int i = threadIdx.x; i < n; i += blockDim.x) s += xr[i] * xr[i];
  }
  s = warp_sum(s);
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = s;
  __syncthreads();
  if (threadIdx.x < 32) {
    float v = threadIdx.x < (blockDim.x >> 5) ? partial[threadIdx.x] : 0.0f;
    v = warp_sum(v);
    if (threadIdx.x == 0) partial[0] = v;
  }
  __syncthreads();
  const float scale = rsqrtf(partial[0] / static_cast<float>(n) + eps);
  if (vec) {
    const float4* x4 = reinterpret_cast<const float4*>(xr);
    const float4* w4 = reinterpret_cast<const float4*>(w);
    float4* o4 = reinterpret_cast<float4*>(o);
#pragma unroll 4
    for (int i = threadIdx.x; i < n / 4; i += blockDim.x) {
      const float4 v = x4[i], g = w4[i];
      o4[i] = make_float4(v.x * scale * g.x, v.y * scale * g.y, v.z * scale * g.z, v.w * scale * g.w);
    }
  } else {
    for (int i = threadIdx.x; i < n; i += blockDim.x) o[i] = xr[i] * scale * w[i];
  }
}


// q8_1 of a row as a block of threads holds it, a float4 (elements 4 i .. 4 i + 3) a thread: the 8 lanes
// of a 32-element block (i = 8 b .. 8 b + 7, aligned lanes of one warp) find its amax and its sum with 3
// shuffles each. The same blocks quantize_block_q8_1 makes (max and integer sums: exact in any order).
// Every lane of the warp calls it; `in` says whether the lane holds elements (whole groups of 8 do or don't).
__device__ __forceinline__ void quantize4_q8_1(float4 v, long long i, bool in, i8* __restrict__ xq,
                                               float2* __restrict__ xd) {
  float amax = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
#pragma unroll
  for (int o = 1; o < 8; o <<= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  const int qx = static_cast<int>(roundf(__fmul_rn(v.x, id))), qy = static_cast<int>(roundf(__fmul_rn(v.y, id)));
  const int qz = static_cast<int>(roundf(__fmul_rn(v.z, id))), qw = static_cast<int>(roundf(__fmul_rn(v.w, id)));
  int sum = qx + qy + qz + qw;
#pragma unroll
  for (int o = 1; o < 8; o <<= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  if (!in) return;
  const float d16 = half_to_f32(f32_to_half(d));
  *reinterpret_cast<char4*>(xq + 4 * i) =
      make_char4(static_cast<signed char>(qx), static_cast<signed char>(qy), static_cast<signed char>(qz),
                 static_cast<signed char>(qw));
  if ((i & 7) == 0) xd[i / 8] = make_float2(d16, d16 * static_cast<float>(sum));
}

// The float4s a thread keeps in registers between a row's sum of squares and its output: rows up to
// NORM_CACHE * 4 * blockDim elements (8,192 at 256 threads) are read from memory once.
#define NORM_CACHE 8

// One row's norm by a block: o = row / sqrt(mean(row^2) + eps) * w, where row is acc, or acc + x written
// back to acc (ADD: the residual add); with xq, also o as q8_1 blocks (n a multiple of 32). Rows of a
// multiple of 4 up to the cache's size are read once (row, x and w loads all in flight together, the
// row kept in registers); others take rms_norm_row over the row in memory. Either way the squares are
// summed in the order rms_norm_row sums them (a thread's float4s in order, then the block's tree), so a
// row's norm is the same bits with or without the add.
template <bool ADD>
__device__ __forceinline__ void norm_row(float* acc, const float* x, const float* w, float eps, int n, float* o,
                                         i8* xq, float2* xd) {
  const int n4 = n / 4;
  if ((n & 3) != 0 || n4 > NORM_CACHE * static_cast<int>(blockDim.x)) {
    if (ADD) {
      for (int i = threadIdx.x; i < n; i += blockDim.x) acc[i] += x[i];
      __syncthreads();  // the row's sums, written by other threads of the block
    }
    rms_norm_row(acc, w, eps, n, o);
    if (xq != nullptr) {
      __syncthreads();  // the row's elements, written by other threads of the block
      quantize_row_q8_1(o, n, xq, xd);
    }
    return;
  }
  __shared__ float partial[32];
  float4* a4 = reinterpret_cast<float4*>(acc);
  const float4* x4 = reinterpret_cast<const float4*>(x);
  const float4* w4 = reinterpret_cast<const float4*>(w);
  float4 v[NORM_CACHE], g[NORM_CACHE];
  float s = 0.0f;
#pragma unroll
  for (int k = 0; k < NORM_CACHE; ++k) {
    const int i = threadIdx.x + k * blockDim.x;
    if (i < n4) {
      v[k] = a4[i];
      if (ADD) {
        const float4 b = x4[i];
        v[k] = make_float4(v[k].x + b.x, v[k].y + b.y, v[k].z + b.z, v[k].w + b.w);
        a4[i] = v[k];
      }
      g[k] = w4[i];
      s += v[k].x * v[k].x + v[k].y * v[k].y + v[k].z * v[k].z + v[k].w * v[k].w;
    }
  }
  s = warp_sum(s);
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = s;
  __syncthreads();
  if (threadIdx.x < 32) {
    float t = threadIdx.x < (blockDim.x >> 5) ? partial[threadIdx.x] : 0.0f;
    t = warp_sum(t);
    if (threadIdx.x == 0) partial[0] = t;
  }
  __syncthreads();
  const float scale = rsqrtf(partial[0] / static_cast<float>(n) + eps);
  float4* o4 = reinterpret_cast<float4*>(o);
#pragma unroll
  for (int k = 0; k < NORM_CACHE; ++k) {
    if (k * static_cast<int>(blockDim.x) >= n4) break;  // the same for the whole block
    const int i = threadIdx.x + k * blockDim.x;
    const bool in = i < n4;
    float4 r = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (in) {
      r = make_float4(v[k].x * scale * g[k].x, v[k].y * scale * g[k].y, v[k].z * scale * g[k].z,
                      v[k].w * scale * g[k].w);
      o4[i] = r;
    }
    if (xq != nullptr) quantize4_q8_1(r, i, in, xq, xd);
  }
}

// out[r] = rms_norm(x[r]) * w: a block per row; with xq, also out[r] as q8_1 blocks. out may be x.
extern "C" __global__ void rms_norm(const float* x, const float* w, float eps, int n, float* out, i8* xq, float2* xd) {
  AFTER_PREVIOUS_KERNEL();
  const long long r = blockIdx.x;
  norm_row<false>(const_cast<float*>(x) + r * n, nullptr, w, eps, n, out + r * n, xq == nullptr ? nullptr : xq + r * n,
                  xd == nullptr ? nullptr : xd + r * (n / 32));
}

// acc[r] += x[r], then out[r] = rms_norm(acc[r]) * w (a residual add and the next norm): a block per row;
// with xq, also out[r] as q8_1 blocks.
extern "C" __global__ void add_rms_norm(float* acc, const float* x, const float* w, float eps, int n, float* out,
                                        i8* xq, float2* xd) {
  AFTER_PREVIOUS_KERNEL();
  const long long r = blockIdx.x;
  norm_row<true>(acc + r * n, x + r * n, w, eps, n, out + r * n, xq == nullptr ? nullptr : xq + r * n,
                 xd == nullptr ? nullptr : xd + r * (n / 32));
}

// x[r][i] += bias[i], over n_rows * n elements.
extern "C" __global__ void add_bias(float* x, const float* bias, int n, long long total) {
  AFTER_PREVIOUS_KERNEL();
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    x[i] += bias[i % n];
  }
}

extern "C" __global__ void add(float* acc, const float* x, long long total) {
  AFTER_PREVIOUS_KERNEL();
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    acc[i] += x[i];
  }
}

__device__ __forceinline__ float silu_mul(float g, float u) { return g / (1.0f + expf(-g)) * u; }

// gate = silu(gate) * up.
extern "C" __global__ void swiglu(float* gate, const float* up, long long total) {
  AFTER_PREVIOUS_KERNEL();
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    gate[i] = silu_mul(gate[i], up[i]);
  }
}

// gate = silu(gate) * up, and the result as q8_1 blocks for the down product: a warp per 32 elements
// (n_blocks of them in all; rows of a multiple of 32, so a block never spans two rows).
extern "C" __global__ void swiglu_q8_1(float* gate, const float* up, long long n_blocks, i8* xq, float2* xd) {
  AFTER_PREVIOUS_KERNEL();
  const long long b = static_cast<long long>(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (b >= n_blocks) return;
  const int lane = threadIdx.x & 31;
  const long long i = 32 * b + lane;
  const float v = silu_mul(gate[i], up[i]);
  gate[i] = v;
  quantize_block_q8_1(v, lane, xq + i, xd + b);
}

extern "C" __global__ void soft_cap(float* x, float cap, long long total) {
  AFTER_PREVIOUS_KERNEL();
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    x[i] = cap * tanhf(x[i] / cap);
  }
}

// out[i] = x[rows[i]] (scatter: out[rows[i]] = x[i]): a block per row.
extern "C" __global__ void gather_rows(const float* x, const int* rows, int n, float* out) {
  AFTER_PREVIOUS_KERNEL();
  const float* s = x + static_cast<long long>(rows[blockIdx.x]) * n;
  float* d = out + static_cast<long long>(blockIdx.x) * n;
  for (int i = threadIdx.x; i < n; i += blockDim.x) d[i] = s[i];
}

// RoPE in place on the heads of x [n_tokens][n_heads][head_dim] from the step's cos/sin rows
// ([n_tokens][n_pairs], the attention factor folded in): NeoX pairs (i, i + n_pairs), GPT-J (2i, 2i + 1).
extern "C" __global__ void rope_rows(float* x, const float* cos_rows, const float* sin_rows, int n_heads,
                                     int head_dim, int n_pairs, int gptj) {
  AFTER_PREVIOUS_KERNEL();
  const int t = blockIdx.x;
  const float* cs = cos_rows + static_cast<long long>(t) * n_pairs;
  const float* sn = sin_rows + static_cast<long long>(t) * n_pairs;
  for (int k = threadIdx.x; k < n_heads * n_pairs; k += blockDim.x) {
    const int h = k / n_pairs, i = k % n_pairs;
    float* v = x + (static_cast<long long>(t) * n_heads + h) * head_dim;
    const int i0 = gptj ? 2 * i : i, i1 = gptj ? 2 * i + 1 : i + n_pairs;
    const float x0 = v[i0], x1 = v[i1];
    v[i0] = x0 * cs[i] - x1 * sn[i];
    v[i1] = x1 * cs[i] + x0 * sn[i];
  }
}

// K and V rows [n_tokens][row] into their f16 page slots (slot = page * 16 + offset): a block per token.
extern "C" __global__ void kv_append_f16(const float* k, const float* v, const int* slots, int row, u16* k_pages,
                                         u16* v_pages) {
  AFTER_PREVIOUS_KERNEL();
  const int t = blockIdx.x;
  const long long dst = static_cast<long long>(slots[t]) * row;
  for (int i = threadIdx.x; i < row; i += blockDim.x) {
    k_pages[dst + i] = f32_to_half(k[static_cast<long long>(t) * row + i]);
    v_pages[dst + i] = f32_to_half(v[static_cast<long long>(t) * row + i]);
  }
}

// Paged attention for any even head dim up to 256, f16 pages, one warp per (query, query head): query i is
// step row rows[i] of sequence seqs[i] at position pos[rows[i]] (pos: the step's positions, by row), and
// sees keys max(0, pos - window + 1) .. pos.
// Online softmax over the keys in order (lane l holds dims l, l + 32, ...).
#define MAX_DIMS_PER_LANE 8
extern "C" __global__ void attention_generic(const float* q, float* out, const int* rows, const int* seqs,
                                             const int* pos, int n_queries, const int* page_indptr,
                                             const int* page_indices, const u16* k_pages, const u16* v_pages,
                                             int n_q_heads, int n_kv_heads, int head_dim, float scale,
                                             float soft_cap, int window) {
  AFTER_PREVIOUS_KERNEL();
  const int warp = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (warp >= n_queries * n_q_heads) return;
  const int i = warp / n_q_heads, h = warp % n_q_heads;
  const int kvh = h / (n_q_heads / n_kv_heads);
  const long long q_off = (static_cast<long long>(rows[i]) * n_q_heads + h) * head_dim;
  float qv[MAX_DIMS_PER_LANE], acc[MAX_DIMS_PER_LANE];
#pragma unroll
  for (int d = 0; d < MAX_DIMS_PER_LANE; ++d) {
    const int dim = lane + 32 * d;
    qv[d] = dim < head_dim ? q[q_off + dim] : 0.0f;
    acc[d] = 0.0f;
  }
  const int p = pos[rows[i]];
  const int first = window > 0 ? max(0, p - window + 1) : 0;
  const int* pages = page_indices + page_indptr[seqs[i]];
  float m = -1.0e30f, l = 0.0f;
  for (int j = first; j <= p; ++j) {
    const long long kv_off = ((static_cast<long long>(pages[j >> 4]) * 16 + (j & 15)) * n_kv_heads + kvh) * head_dim;
    float s = 0.0f;
#pragma unroll
    for (int d = 0; d < MAX_DIMS_PER_LANE; ++d) {
      const int dim = lane + 32 * d;
      if (dim < head_dim) s += qv[d] * half_to_f32(k_pages[kv_off + dim]);
    }
    s = warp_sum(s) * scale;
    if (soft_cap > 0.0f) s = soft_cap * tanhf(s / soft_cap);
    const float m_new = fmaxf(m, s);
    const float correction = expf(m - m_new), e = expf(s - m_new);
    l = l * correction + e;
#pragma unroll
    for (int d = 0; d < MAX_DIMS_PER_LANE; ++d) {
      const int dim = lane + 32 * d;
      const float vv = dim < head_dim ? half_to_f32(v_pages[kv_off + dim]) : 0.0f;
      acc[d] = acc[d] * correction + e * vv;
    }
    m = m_new;
  }
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
  for (int d = 0; d < MAX_DIMS_PER_LANE; ++d) {
    const int dim = lane + 32 * d;
    if (dim < head_dim) out[q_off + dim] = acc[d] * inv;
  }
}

// out[rows[i]] = x[i]: a block per row.
extern "C" __global__ void scatter_rows(const float* x, const int* rows, int n, float* out) {
  AFTER_PREVIOUS_KERNEL();
  const float* s = x + static_cast<long long>(blockIdx.x) * n;
  float* d = out + static_cast<long long>(rows[blockIdx.x]) * n;
  for (int i = threadIdx.x; i < n; i += blockDim.x) d[i] = s[i];
}

// dst[i] = src[i] for n 16-bit elements (KV page copies; the ranges do not overlap).
extern "C" __global__ void copy_u16(const u16* src, u16* dst, long long n) {
  AFTER_PREVIOUS_KERNEL();
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    dst[i] = src[i];
  }
}
