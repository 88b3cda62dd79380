// Products of few tokens on tensor cores, for f16 / bf16 weight rows of a multiple of 8 elements (the backend
// sends them those of 2 to 16 tokens, and of every count with --batch-invariant: project() in
// cuda_backend.cpp): a memory-bound product reads every weight once whatever the token count, so 16 tokens
// should cost what one does. mma.sync m16n8k16 (f16 or bf16 inputs, f32 accumulation: sm_80 and later), the weights as A (16 rows
// x 16 k), the activations as B (16 k x 8 tokens), one or two 8-token column tiles a block (entries _n8 and
// _n16; grid.y tiles more tokens, for --batch-invariant).
//
// Loads without shared memory: an mma sums over its 16 k in any order, so any permutation of k shared by A
// and B gives the same product. Lane (g = lane / 4, t = lane % 4) loads the 16 bytes of elements
// [32 c + 8 t, 32 c + 8 t + 8) of rows g and g + 8 of its tile (a group of 4 lanes reads 64 contiguous bytes of
// a row), and those 8 elements are its A registers for two mmas: elements 4 s + 0, 1 as the fragment's
// "k = 2 t, 2 t + 1" and 4 s + 2, 3 as "k = 2 t + 8, 2 t + 9" of mma s (s = 0, 1). Its B registers are the
// same 8 elements of token g's activations (B's column g, k = 2 t ...): one 32-byte f32 read.
//
// Activations keep (almost) f32 precision (MMA_EXACT_X): each is split into parts, the first its 16-bit
// rounding and each next one the rounding of what the parts before leave (f16: 2 parts, 22 bits of mantissa;
// bf16: 3, 24 bits), and every part goes through the mma: two or three mmas where one would round the
// activations to 11 or 8 bits, free in a product bound by the weights' bytes. Each mma's 16 terms start from
// zero and are added to the running sums in f32 (round to nearest): the tensor core's own accumulation
// truncates, an error that would grow with the running sum. An f16 weight's activations must stay within
// f16's range (65,504), as cuBLAS's f16 path requires.
//
// Split-K: the warps of a block share its rows, warp w taking the groups of MMA_UNROLL 32-element pieces
// w, w + MMA_WARPS, ...; their sums are added in warp order. Batch invariance by construction: an mma's
// column depends on its own B column only, and the order of a row's sums on the row's length only, never on
// how many tokens share the call (tokens past the call's end are zero columns).
//
// Tunables (defaults are what the backend launches, picked with orchard_bench_products' -D sweep on an
// H100; the host reads the rows and threads a block from product_launch.h's MatvecShape).

#ifndef MMA_WARPS
#define MMA_WARPS 8  // warps a block, splitting the rows' length
#endif
#ifndef MMA_TILES
#define MMA_TILES 1  // 16-row tiles a block (every warp takes them all, for its share of the length)
#endif
#ifndef MMA_UNROLL
#define MMA_UNROLL 4  // 32-element pieces of each row a lane loads at once
#endif
#ifndef MMA_PIPELINE
#define MMA_PIPELINE 1  // tiles of 8 tokens: a lane loads its next pieces before it multiplies the current ones
#endif
#ifndef MMA_PIPELINE_N16
#define MMA_PIPELINE_N16 0  // the same for tiles of 16 tokens (more registers)
#endif
#ifndef MMA_EXACT_X
#define MMA_EXACT_X 1  // activations split into 16-bit parts (near f32: 1) or rounded once to 16 bits (0)
#endif
#ifndef MMA_MIN_BLOCKS
#define MMA_MIN_BLOCKS 2  // blocks an SM must hold at once (__launch_bounds__: caps the registers)
#endif
#define MMA_THREADS (32 * MMA_WARPS)
#define MMA_ROWS (16 * MMA_TILES)

// Two floats as a pair of 16-bit values of type T (x0 in the low half: the lower k).
template <int T>
__device__ __forceinline__ unsigned mma_pack(float x0, float x1) {
  unsigned d;
  if (T == WT_F16) {
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(x1), "f"(x0));
  } else {
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(x1), "f"(x0));
  }
  return d;
}
template <int T>
__device__ __forceinline__ float mma_unpack(unsigned d, int half) {
  const u16 h = static_cast<u16>(half ? d >> 16 : d & 0xFFFF);
  return T == WT_F16 ? half_to_f32(h) : bf16_to_f32(h);
}

// d += a b: m16n8k16, row-major A, column-major B, f32 accumulators.
template <int T>
__device__ __forceinline__ void mma_16816(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  if (T == WT_F16) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// Weight pieces: for each of MMA_UNROLL pieces, tile m and half h (rows g, g + 8), the lane's 16 bytes.
template <int T>
__device__ __forceinline__ void mma_load_weights(const uint4* const (&rows)[MMA_TILES][2], int group, int t, int n8,
                                                 uint4 (&wv)[MMA_UNROLL][MMA_TILES][2]) {
#pragma unroll
  for (int u = 0; u < MMA_UNROLL; ++u) {
    const int k8 = 4 * (group * MMA_UNROLL + u) + t;  // the lane's 16-byte piece of the row
#pragma unroll
    for (int m = 0; m < MMA_TILES; ++m) {
#pragma unroll
      for (int h = 0; h < 2; ++h) wv[u][m][h] = k8 < n8 ? __ldg(rows[m][h] + k8) : make_uint4(0, 0, 0, 0);
    }
  }
}

template <int T, int NB>
__device__ __forceinline__ void mma_product(const ProductOutputs& p, int n_in, const float* __restrict__ x,
                                            int n_tokens) {
  const ProductTarget target = product_target(p, static_cast<int>(blockIdx.x));
  const int o0 = (static_cast<int>(blockIdx.x) - target.first_block) * MMA_ROWS;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int t0 = blockIdx.y * 8 * NB;
  // Rows past the output read its last row (their sums are dropped).
  const uint4* rows[MMA_TILES][2];
#pragma unroll
  for (int m = 0; m < MMA_TILES; ++m) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      rows[m][h] = reinterpret_cast<const uint4*>(target.w +
                                                  target.row_bytes * min(o0 + 16 * m + 8 * h + g, target.n_out - 1));
    }
  }
  // The lane's token in each column tile (B's column g); past the call's end a zero column.
  const float4* xs[NB];
  bool has[NB];
#pragma unroll
  for (int j = 0; j < NB; ++j) {
    const int tok = t0 + 8 * j + g;
    has[j] = tok < n_tokens;
    xs[j] = reinterpret_cast<const float4*>(x + static_cast<long long>(min(tok, n_tokens - 1)) * n_in);
  }
  float acc[MMA_TILES][NB][4];
#pragma unroll
  for (int m = 0; m < MMA_TILES; ++m) {
#pragma unroll
    for (int j = 0; j < NB; ++j) {
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[m][j][i] = 0.0f;
    }
  }
  constexpr bool PIPE = NB == 1 ? MMA_PIPELINE : MMA_PIPELINE_N16;
  constexpr int PARTS = MMA_EXACT_X ? (T == WT_F16 ? 2 : 3) : 1;
  const int n8 = n_in / 8;                                            // 16-byte pieces of a row
  const int n_groups = (n8 + 4 * MMA_UNROLL - 1) / (4 * MMA_UNROLL);  // groups of MMA_UNROLL 32-element pieces
  uint4 next[MMA_UNROLL][MMA_TILES][2];
  if (PIPE) mma_load_weights<T>(rows, warp, t, n8, next);
  for (int group = warp; group < n_groups; group += MMA_WARPS) {
    uint4 wv[MMA_UNROLL][MMA_TILES][2];
    if (PIPE) {
#pragma unroll
      for (int u = 0; u < MMA_UNROLL; ++u) {
#pragma unroll
        for (int m = 0; m < MMA_TILES; ++m) {
          wv[u][m][0] = next[u][m][0];
          wv[u][m][1] = next[u][m][1];
        }
      }
      mma_load_weights<T>(rows, group + MMA_WARPS, t, n8, next);
    } else {
      mma_load_weights<T>(rows, group, t, n8, wv);
    }
#pragma unroll
    for (int u = 0; u < MMA_UNROLL; ++u) {
      const int k8 = 4 * (group * MMA_UNROLL + u) + t;
      // B: the activations' 8 elements of the piece as 4 pairs, in PARTS parts.
      unsigned bx[NB][PARTS][4];
#pragma unroll
      for (int j = 0; j < NB; ++j) {
        float4 a = make_float4(0.0f, 0.0f, 0.0f, 0.0f), b = a;
        if (has[j] && k8 < n8) {
          a = __ldg(xs[j] + 2 * k8);
          b = __ldg(xs[j] + 2 * k8 + 1);
        }
        const float v[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          float r0 = v[2 * i], r1 = v[2 * i + 1];
#pragma unroll
          for (int q = 0; q < PARTS; ++q) {
            bx[j][q][i] = mma_pack<T>(r0, r1);
            r0 -= mma_unpack<T>(bx[j][q][i], 0);
            r1 -= mma_unpack<T>(bx[j][q][i], 1);
          }
        }
      }
#pragma unroll
      for (int s = 0; s < 2; ++s) {
#pragma unroll
        for (int m = 0; m < MMA_TILES; ++m) {
          const uint4& r0 = wv[u][m][0];  // row g
          const uint4& r8 = wv[u][m][1];  // row g + 8
          const unsigned a[4] = {s ? r0.z : r0.x, s ? r8.z : r8.x, s ? r0.w : r0.y, s ? r8.w : r8.y};
#pragma unroll
          for (int j = 0; j < NB; ++j) {
            // The parts' terms from zero, smallest part first, then added to the running sums in f32.
            float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
            for (int q = PARTS - 1; q >= 0; --q) mma_16816<T>(d, a, bx[j][q][2 * s], bx[j][q][2 * s + 1]);
#pragma unroll
            for (int i = 0; i < 4; ++i) acc[m][j][i] += d[i];
          }
        }
      }
    }
  }
  // The warps' sums in warp order. acc[m][j][i] of lane (g, t) is row 16 m + g + 8 (i / 2), token
  // 8 j + 2 t + i % 2.
  __shared__ float part[MMA_WARPS][MMA_TILES][NB][32][4];
#pragma unroll
  for (int m = 0; m < MMA_TILES; ++m) {
#pragma unroll
    for (int j = 0; j < NB; ++j) {
#pragma unroll
      for (int i = 0; i < 4; ++i) part[warp][m][j][lane][i] = acc[m][j][i];
    }
  }
  __syncthreads();
  // Thread e takes row e % MMA_ROWS of token e / MMA_ROWS: a token's rows stored together.
  for (int e = threadIdx.x; e < MMA_ROWS * 8 * NB; e += MMA_THREADS) {
    const int r = e % MMA_ROWS, tok = e / MMA_ROWS;
    const int row = o0 + r, token = t0 + tok;
    if (row >= target.n_out || token >= n_tokens) continue;
    const int m = r / 16, rg = r % 16, j = tok / 8, tn = tok % 8;
    const int l = 4 * (rg % 8) + tn / 2, i = 2 * (rg / 8) + tn % 2;
    float s = part[0][m][j][l][i];
#pragma unroll
    for (int w = 1; w < MMA_WARPS; ++w) s += part[w][m][j][l][i];
    target.y[static_cast<long long>(token) * target.n_out + row] = s;
  }
}

#define MMA_ENTRY(NAME, T, NB)                                                                            \
  extern "C" __global__ void __launch_bounds__(MMA_THREADS, MMA_MIN_BLOCKS)                               \
      NAME(const ProductOutputs p, int n_in, const float* x, int n_tokens) {                              \
    mma_product<T, NB>(p, n_in, x, n_tokens);                                                             \
  }
MMA_ENTRY(mma_f16_n8, WT_F16, 1)
MMA_ENTRY(mma_f16_n16, WT_F16, 2)
MMA_ENTRY(mma_bf16_n8, WT_BF16, 1)
MMA_ENTRY(mma_bf16_n16, WT_BF16, 2)
