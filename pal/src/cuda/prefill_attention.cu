// Paged prefill attention (causal, chunked prefill over cached pages) on the tensor cores: mma.sync
// m16n8k16 with bf16 or f16 operands (the KV type) and f32 accumulators, flash-attention style.
// One block of PREFILL_WARPS warps (4 or 8) takes 16 * PREFILL_M_TILES query rows per warp of one (sequence,
// query head); with two m16 tiles per warp every K and V fragment read from shared memory feeds two MMAs. K and V
// tiles of PREFILL_BLOCK_N keys (32 or 64) are gathered from their pages into shared memory by cp.async, two
// stages deep, one barrier per tile; the first two are in flight while the block converts its query rows. The
// softmax keeps a reference maximum per row that moves only when the row's maximum grows by more than 2^8, so
// the O accumulators are rarely rescaled: each thread compares its own scores' maxima (a tree of pairwise
// maxima, not a dependent chain) with its rows' references, and one warp vote skips the shuffles, corrections
// and rescale when no row grew that much (most tiles). Blocks are numbered heaviest (last, longest causal span)
// query tile first, heads fastest, so a KV head's query heads run side by side and share its tiles in L2.
// Compile-time: HEAD_DIM (64, 128, 256), KV_BF16, PREFILL_WARPS, PREFILL_M_TILES (1 or 2), PREFILL_BLOCK_N,
// PREFILL_SOFT_CAP and PREFILL_WINDOW (0 or 1).

#ifndef PREFILL_WARPS
#define PREFILL_WARPS 4
#endif
// 0 compiles out the soft-cap (tanh) or sliding-window code, for calls that use neither (fewer registers).
#ifndef PREFILL_SOFT_CAP
#define PREFILL_SOFT_CAP 1
#endif
#ifndef PREFILL_WINDOW
#define PREFILL_WINDOW 1
#endif
#ifndef PREFILL_M_TILES
#define PREFILL_M_TILES 1
#endif
#define MT PREFILL_M_TILES
#define WARP_ROWS (MT * 16)
#define BLOCK_M (PREFILL_WARPS * WARP_ROWS)
#ifndef PREFILL_BLOCK_N
#define PREFILL_BLOCK_N 64
#endif
#define BLOCK_N PREFILL_BLOCK_N
#define STAGES 2  // K/V tiles in flight (3 measured no faster with 32-key tiles)
#define N_THREADS (PREFILL_WARPS * 32)
#define STRIDE (HEAD_DIM + 8)  // padded smem row (elements): conflict-free fragment loads
#define Q_IN_REGISTERS (HEAD_DIM * MT <= 128)  // beyond, the accumulators leave no room

// 2^x by the special-function unit, flushing denormal results to zero (softmax weights that small vanish
// against the row's maximum weight of 1 anyway); 2^-inf = 0.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// The O accumulators of one m16 tile times the per-row corrections (rows g and g + 8).
__device__ __forceinline__ void scale_rows(float (*o)[4], const float* corr) {
#pragma unroll
  for (int i = 0; i < HEAD_DIM / 8; ++i) {
    o[i][0] *= corr[0]; o[i][1] *= corr[0];
    o[i][2] *= corr[1]; o[i][3] *= corr[1];
  }
}

// Softmax weights of one m16 tile of raw scores: exp2(s * s_mul + neg), summed into l and packed as the A
// operand of P V.
__device__ __forceinline__ void exp_tile(float (*s)[4], const float* neg, float* l, unsigned (*pa)[4],
                                         float s_mul) {
  float la = l[0], lb = l[1];
#pragma unroll
  for (int nt = 0; nt < BLOCK_N / 8; ++nt) {
    const float p0 = fast_exp2(fmaf(s[nt][0], s_mul, neg[0]));
    const float p1 = fast_exp2(fmaf(s[nt][1], s_mul, neg[0]));
    const float p2 = fast_exp2(fmaf(s[nt][2], s_mul, neg[1]));
    const float p3 = fast_exp2(fmaf(s[nt][3], s_mul, neg[1]));
    la += p0 + p1;
    lb += p2 + p3;
    pa[nt / 2][(nt & 1) * 2 + 0] = f32x2_to_kv2(p0, p1);
    pa[nt / 2][(nt & 1) * 2 + 1] = f32x2_to_kv2(p2, p3);
  }
  l[0] = la;
  l[1] = lb;
}

struct PrefillParams {
  const kv_t* k_pages;       // [n_pages][16][n_kv_heads][HEAD_DIM]
  const kv_t* v_pages;       // [n_pages][16][n_kv_heads][HEAD_DIM]
  const int* page_indptr;    // [n_seqs + 1]
  const int* page_indices;   // [page_indptr[n_seqs]]
  const int* seq_lens;       // [n_seqs]
  const int* qo_indptr;      // [n_seqs + 1]
  const float* q;            // [qo_indptr[n_seqs]][n_q_heads][HEAD_DIM]
  float* out;                // [qo_indptr[n_seqs]][n_q_heads][HEAD_DIM]
  int n_kv_heads;
  int n_q_heads;
  float scale;
  float soft_cap;            // 0: off
  int window;                // 0: off
};

// The page ids of tile kt (one per 16-token page; 0 past the sequence), read one tile ahead of their use so
// that no page-table load stands between a barrier and the tile's cp.async.
__device__ __forceinline__ void tile_pages(const int* pages, int len, int kt, int* ids) {
#pragma unroll
  for (int pg = 0; pg < BLOCK_N / 16; ++pg) {
    const int t0 = kt * BLOCK_N + pg * 16;
    ids[pg] = t0 < len ? pages[t0 >> 4] : 0;
  }
}

// Gathers keys [kt * BLOCK_N, kt * BLOCK_N + BLOCK_N) of K and V into one smem stage; keys past the sequence
// are zeros. The tile is whole pages (16 tokens each) whose ids are given, in 16-byte chunks spread over threads.
__device__ __forceinline__ void load_kv_tile(const PrefillParams& p, const int* ids, int len, int kvh, int kt,
                                             kv_t* sk, kv_t* sv) {
  constexpr int kChunks = HEAD_DIM / 8;  // 16-byte chunks per row
  constexpr int kPageChunks = 16 * kChunks;
  const int slot_stride = p.n_kv_heads * HEAD_DIM;  // elements per token slot
#pragma unroll
  for (int pg = 0; pg < BLOCK_N / 16; ++pg) {
    const int t0 = kt * BLOCK_N + pg * 16;
    const long long page_base = static_cast<long long>(ids[pg]) * 16 * slot_stride;
#pragma unroll
    for (int i = 0; i < (kPageChunks + N_THREADS - 1) / N_THREADS; ++i) {
      const int c = threadIdx.x + i * N_THREADS;
      if (kPageChunks % N_THREADS == 0 || c < kPageChunks) {
        const int r = c / kChunks;
        const int col = (c % kChunks) * 8;
        const bool valid = t0 + r < len;
        const long long off = valid ? page_base + r * slot_stride + kvh * HEAD_DIM + col : 0;
        cp_async16(sk + (pg * 16 + r) * STRIDE + col, p.k_pages + off, valid);
        cp_async16(sv + (pg * 16 + r) * STRIDE + col, p.v_pages + off, valid);
      }
    }
  }
}

extern "C" __global__ void __launch_bounds__(N_THREADS) prefill_attention(const PrefillParams p) {
  extern __shared__ __align__(16) kv_t smem[];
  kv_t* sq = smem;                                 // [BLOCK_M][STRIDE]
  kv_t* sk0 = sq + BLOCK_M * STRIDE;                   // STAGES stages of [BLOCK_N][STRIDE]
  kv_t* sv0 = sk0 + STAGES * BLOCK_N * STRIDE;         // STAGES stages of [BLOCK_N][STRIDE]

  const int h = blockIdx.x;
  const int seq = blockIdx.y;
  const int q_begin = p.qo_indptr[seq];
  const int n = p.qo_indptr[seq + 1] - q_begin;
  const int row0 = (gridDim.z - 1 - blockIdx.z) * BLOCK_M;  // heaviest tiles first
  if (row0 >= n) return;
  const int len = p.seq_lens[seq];
  const int kvh = h / (p.n_q_heads / p.n_kv_heads);
  const int* pages = p.page_indices + p.page_indptr[seq];
  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;
  const int g = lane >> 2;  // fragment row
  const int t4 = lane & 3;  // fragment column pair

  // Positions: row i of the sequence's queries sits at len - n + i.
  const int pos_first = len - n + row0;
  const int pos_last = len - n + min(n, row0 + BLOCK_M) - 1;
  int kt_begin = 0;
  if (PREFILL_WINDOW && p.window > 0) kt_begin = max(0, pos_first - p.window + 1) / BLOCK_N;
  const int kt_end = pos_last / BLOCK_N + 1;

  // The first STAGES K/V tiles (every stage is free) are in flight while the query rows are loaded and converted.
  int ids[BLOCK_N / 16];
#pragma unroll
  for (int st = 0; st < STAGES; ++st) {
    if (kt_begin + st < kt_end) {
      tile_pages(pages, len, kt_begin + st, ids);
      load_kv_tile(p, ids, len, kvh, kt_begin + st, sk0 + st * BLOCK_N * STRIDE, sv0 + st * BLOCK_N * STRIDE);
    }
    cp_async_commit();
  }
  if (kt_begin + STAGES < kt_end) tile_pages(pages, len, kt_begin + STAGES, ids);  // the next tile to load

  // Query rows of the block as 16-bit operands (rows past n are zeros); all of a thread's loads in flight at once.
  const long long q_row_stride = static_cast<long long>(p.n_q_heads) * HEAD_DIM;
  constexpr int kQIters = BLOCK_M * (HEAD_DIM / 4) / N_THREADS;
#pragma unroll
  for (int i = 0; i < kQIters; ++i) {
    const int c = threadIdx.x + i * N_THREADS;
    const int r = c / (HEAD_DIM / 4);
    const int col = (c % (HEAD_DIM / 4)) * 4;
    float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
    if (row0 + r < n) {
      v = *reinterpret_cast<const float4*>(p.q + (q_begin + row0 + r) * q_row_stride + h * HEAD_DIM + col);
    }
    unsigned* dst = reinterpret_cast<unsigned*>(sq + r * STRIDE + col);
    dst[0] = f32x2_to_kv2(v.x, v.y);
    dst[1] = f32x2_to_kv2(v.z, v.w);
  }
  __syncthreads();
  // This lane's ldmatrix address inside a 16 x 16 A tile of the warp's query rows.
  const kv_t* qw = sq + (warp * WARP_ROWS + (lane & 15)) * STRIDE + (lane >> 4) * 8;

#if Q_IN_REGISTERS
  unsigned qa[MT][HEAD_DIM / 16][4];  // this warp's query rows as mma A fragments, loaded once
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int kk = 0; kk < HEAD_DIM / 16; ++kk) ldmatrix_x4(qa[mt][kk], qw + mt * 16 * STRIDE + kk * 16);
  }
#endif

  const int warp_row0 = row0 + warp * WARP_ROWS;  // sequence-relative
  const bool warp_has_rows = warp_row0 < n;
  const int warp_pos_first = len - n + warp_row0;
  const int warp_pos_last = len - n + min(n, warp_row0 + WARP_ROWS) - 1;
  // Raw scores times s_mul are log2-domain logits (soft-capped scores are already in that domain).
  const float s_mul = (PREFILL_SOFT_CAP && p.soft_cap > 0.0f) ? 1.0f : p.scale * ORCHARD_LOG2E;

  float o[MT][HEAD_DIM / 8][4];
  float m[MT][2], l[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int i = 0; i < HEAD_DIM / 8; ++i) o[mt][i][0] = o[mt][i][1] = o[mt][i][2] = o[mt][i][3] = 0.0f;
    m[mt][0] = m[mt][1] = -INFINITY;
    l[mt][0] = l[mt][1] = 0.0f;
  }

  int cs = 0, ls = 0;  // stage of the tile computed now; stage freed by the previous tile
  for (int kt = kt_begin; kt < kt_end; ++kt) {
    // One barrier per tile: once tile kt has landed for every thread, every warp is also done with tile kt - 1,
    // so its stage takes tile kt - 1 + STAGES (the first STAGES were issued before the loop).
    if (kt == kt_begin) cp_async_wait<STAGES - 1>(); else cp_async_wait<STAGES - 2>();
    __syncthreads();
    if (kt > kt_begin) {
      const int next = kt - 1 + STAGES;
      if (next < kt_end) {
        load_kv_tile(p, ids, len, kvh, next, sk0 + ls * BLOCK_N * STRIDE, sv0 + ls * BLOCK_N * STRIDE);
        if (next + 1 < kt_end) tile_pages(pages, len, next + 1, ids);  // in flight during this tile's compute
      }
      cp_async_commit();
      ls = ls + 1 == STAGES ? 0 : ls + 1;
    }
    const kv_t* sk = sk0 + cs * BLOCK_N * STRIDE;
    const kv_t* sv = sv0 + cs * BLOCK_N * STRIDE;
    cs = cs + 1 == STAGES ? 0 : cs + 1;

    // Warp-uniform: does any key of the tile reach any of this warp's rows (causal, window)?
    const bool warp_active = warp_has_rows && kt * BLOCK_N <= warp_pos_last &&
                             ((!PREFILL_WINDOW || p.window <= 0) || kt * BLOCK_N + BLOCK_N - 1 > warp_pos_first - p.window);
    if (warp_active) {
      // S = Q K^T for this warp's rows and the tile's 64 keys; each K fragment (ldmatrix, two key tiles) feeds
      // every m16 tile of the warp.
      float s[MT][BLOCK_N / 8][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int nt = 0; nt < BLOCK_N / 8; ++nt) s[mt][nt][0] = s[mt][nt][1] = s[mt][nt][2] = s[mt][nt][3] = 0.0f;
      }
      const int mi = lane >> 3;
#pragma unroll
      for (int kk = 0; kk < HEAD_DIM / 16; ++kk) {
        unsigned af[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
#if Q_IN_REGISTERS
#pragma unroll
          for (int e = 0; e < 4; ++e) af[mt][e] = qa[mt][kk][e];
#else
          ldmatrix_x4(af[mt], qw + mt * 16 * STRIDE + kk * 16);
#endif
        }
#pragma unroll
        for (int nt = 0; nt < BLOCK_N / 8; nt += 2) {
          unsigned b[4];
          ldmatrix_x4(b, sk + ((nt + (mi >> 1)) * 8 + (lane & 7)) * STRIDE + kk * 16 + (mi & 1) * 8);
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            mma16816(s[mt][nt], af[mt], b);
            mma16816(s[mt][nt + 1], af[mt], b + 2);
          }
        }
      }

      // Soft-cap (into the log2 domain), mask (causal, window, past the sequence), online softmax. Without a soft
      // cap the scores stay raw and the scale (with log2(e)) is folded into one FMA before each exp2. Only tiles
      // that reach past the warp's first row (the diagonal) or below its window need the mask.
      const bool need_mask = kt * BLOCK_N + BLOCK_N - 1 > warp_pos_first ||
                             ((PREFILL_WINDOW && p.window > 0) && kt * BLOCK_N <= warp_pos_last - p.window);
      unsigned pa[MT][BLOCK_N / 16][4];
      // Each thread's own row maxima first; one vote over the warp's rows then says whether any row grew by
      // more than 2^8 past its reference (or from -inf). Mostly none does (weights up to 256 are exact enough in
      // f32 sums and 16-bit P), and the shuffles, corrections and rescale are skipped.
      float mx[MT][2];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        const int pos_a = warp_pos_first + mt * 16 + g;
        const int pos_b = pos_a + 8;
        if (PREFILL_SOFT_CAP && p.soft_cap > 0.0f) {
#pragma unroll
          for (int nt = 0; nt < BLOCK_N / 8; ++nt) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              s[mt][nt][e] = p.soft_cap * tanhf(s[mt][nt][e] * p.scale / p.soft_cap) * ORCHARD_LOG2E;
            }
          }
        }
        if (need_mask) {
#pragma unroll
          for (int nt = 0; nt < BLOCK_N / 8; ++nt) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int key = kt * BLOCK_N + nt * 8 + 2 * t4 + (e & 1);
              const int pos = e < 2 ? pos_a : pos_b;
              const bool visible = key <= pos && ((!PREFILL_WINDOW || p.window <= 0) || key > pos - p.window);
              s[mt][nt][e] = visible ? s[mt][nt][e] : -INFINITY;
            }
          }
        }
        // Pairwise (a tree, not a chain of dependent maxima).
        float ta[BLOCK_N / 8], tb[BLOCK_N / 8];
#pragma unroll
        for (int nt = 0; nt < BLOCK_N / 8; ++nt) {
          ta[nt] = fmaxf(s[mt][nt][0], s[mt][nt][1]);
          tb[nt] = fmaxf(s[mt][nt][2], s[mt][nt][3]);
        }
#pragma unroll
        for (int w = BLOCK_N / 16; w >= 1; w /= 2) {
#pragma unroll
          for (int i = 0; i < w; ++i) {
            ta[i] = fmaxf(ta[i], ta[i + w]);
            tb[i] = fmaxf(tb[i], tb[i + w]);
          }
        }
        mx[mt][0] = fmaxf(ta[0], m[mt][0]);
        mx[mt][1] = fmaxf(tb[0], m[mt][1]);
      }
      bool grow_any = false;
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        grow_any |= (mx[mt][0] - m[mt][0]) * s_mul > 8.0f || (mx[mt][1] - m[mt][1]) * s_mul > 8.0f;
      }
      if (__any_sync(0xffffffffu, grow_any)) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          float mx_a = mx[mt][0], mx_b = mx[mt][1];
          mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffffu, mx_a, 1));
          mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffffu, mx_a, 2));
          mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffffu, mx_b, 1));
          mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffffu, mx_b, 2));
          const bool grow = (mx_a - m[mt][0]) * s_mul > 8.0f || (mx_b - m[mt][1]) * s_mul > 8.0f;
          if (__any_sync(0xffffffffu, grow)) {
            const float ref_a = mx_a == -INFINITY ? 0.0f : mx_a;
            const float ref_b = mx_b == -INFINITY ? 0.0f : mx_b;
            float corr[2];
            corr[0] = fast_exp2((m[mt][0] - ref_a) * s_mul);
            corr[1] = fast_exp2((m[mt][1] - ref_b) * s_mul);
            m[mt][0] = mx_a;
            m[mt][1] = mx_b;
            scale_rows(o[mt], corr);
            l[mt][0] *= corr[0];
            l[mt][1] *= corr[1];
          }
        }
      }
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        float neg[2];
        neg[0] = m[mt][0] == -INFINITY ? 0.0f : -m[mt][0] * s_mul;  // a row that has seen no key yet: ref 0
        neg[1] = m[mt][1] == -INFINITY ? 0.0f : -m[mt][1] * s_mul;
        exp_tile(s[mt], neg, l[mt], pa[mt], s_mul);
      }

      // O += P V: P stays in registers as the A operand; V fragments by transposed ldmatrix, two 8-column tiles
      // per instruction, each feeding every m16 tile.
#pragma unroll
      for (int kk = 0; kk < BLOCK_N / 16; ++kk) {
        const kv_t* vrow = sv + (kk * 16 + (mi & 1) * 8 + (lane & 7)) * STRIDE + (mi >> 1) * 8;
#pragma unroll
        for (int dn = 0; dn < HEAD_DIM / 8; dn += 2) {
          unsigned b[4];
          ldmatrix_x4_trans(b, vrow + dn * 8);
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            mma16816(o[mt][dn], pa[mt][kk], b);
            mma16816(o[mt][dn + 1], pa[mt][kk], b + 2);
          }
        }
      }
    }
  }
  cp_async_wait<0>();

#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    float la = l[mt][0], lb = l[mt][1];
    la += __shfl_xor_sync(0xffffffffu, la, 1);
    la += __shfl_xor_sync(0xffffffffu, la, 2);
    lb += __shfl_xor_sync(0xffffffffu, lb, 1);
    lb += __shfl_xor_sync(0xffffffffu, lb, 2);
    const float inv_a = la > 0.0f ? 1.0f / la : 0.0f;
    const float inv_b = lb > 0.0f ? 1.0f / lb : 0.0f;
    const int row_a = warp_row0 + mt * 16 + g;  // this thread's two rows (sequence-relative)
    float* out_a = p.out + (q_begin + row_a) * q_row_stride + h * HEAD_DIM;
    float* out_b = out_a + 8 * q_row_stride;
#pragma unroll
    for (int dn = 0; dn < HEAD_DIM / 8; ++dn) {
      const int col = dn * 8 + 2 * t4;
      if (row_a < n) *reinterpret_cast<float2*>(out_a + col) = make_float2(o[mt][dn][0] * inv_a, o[mt][dn][1] * inv_a);
      if (row_a + 8 < n) {
        *reinterpret_cast<float2*>(out_b + col) = make_float2(o[mt][dn][2] * inv_b, o[mt][dn][3] * inv_b);
      }
    }
  }
}
