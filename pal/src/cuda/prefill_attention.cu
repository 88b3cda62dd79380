// Paged prefill attention (causal, chunked prefill over cached pages) on the tensor cores: mma.sync
// m16n8k16 with bf16 or f16 operands (the KV type) and f32 accumulators, flash-attention style.
// One block of PREFILL_WARPS warps (4 or 8) takes 16 query rows per warp of one (sequence, query head). K and V
// tiles of 64 keys are gathered from their pages into shared memory by cp.async, two stages deep.
// Compile-time: HEAD_DIM (64, 128, 256), KV_BF16.

#ifndef PREFILL_WARPS
#define PREFILL_WARPS 4
#endif
#define BLOCK_M (PREFILL_WARPS * 16)
#define BLOCK_N 64
#define N_THREADS (PREFILL_WARPS * 32)
#define STRIDE (HEAD_DIM + 8)  // padded smem row (elements): conflict-free fragment loads
#define Q_IN_REGISTERS (HEAD_DIM <= 128)  // at 256 the accumulators leave no room

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

// Gathers keys [kt * 64, kt * 64 + 64) of K and V into one smem stage; keys past the sequence are zeros.
__device__ __forceinline__ void load_kv_tile(const PrefillParams& p, const int* pages, int len, int kvh, int kt,
                                             kv_t* sk, kv_t* sv) {
  constexpr int kChunks = HEAD_DIM / 8;  // 16-byte chunks per row
  const long long slot_stride = static_cast<long long>(p.n_kv_heads) * HEAD_DIM;
  for (int c = threadIdx.x; c < BLOCK_N * kChunks; c += N_THREADS) {
    const int r = c / kChunks;
    const int col = (c % kChunks) * 8;
    const int t = kt * BLOCK_N + r;
    const bool valid = t < len;
    long long off = 0;
    if (valid) off = (static_cast<long long>(pages[t >> 4]) * 16 + (t & 15)) * slot_stride + kvh * HEAD_DIM + col;
    cp_async16(sk + r * STRIDE + col, p.k_pages + off, valid);
    cp_async16(sv + r * STRIDE + col, p.v_pages + off, valid);
  }
}

extern "C" __global__ void __launch_bounds__(N_THREADS) prefill_attention(const PrefillParams p) {
  extern __shared__ __align__(16) kv_t smem[];
  kv_t* sq = smem;                                 // [BLOCK_M][STRIDE]
  kv_t* sk0 = sq + BLOCK_M * STRIDE;               // 2 stages of [BLOCK_N][STRIDE]
  kv_t* sv0 = sk0 + 2 * BLOCK_N * STRIDE;          // 2 stages of [BLOCK_N][STRIDE]

  const int seq = blockIdx.z;
  const int h = blockIdx.y;
  const int q_begin = p.qo_indptr[seq];
  const int n = p.qo_indptr[seq + 1] - q_begin;
  const int row0 = blockIdx.x * BLOCK_M;
  if (row0 >= n) return;
  const int len = p.seq_lens[seq];
  const int kvh = h / (p.n_q_heads / p.n_kv_heads);
  const int* pages = p.page_indices + p.page_indptr[seq];
  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;
  const int g = lane >> 2;  // fragment row
  const int t4 = lane & 3;  // fragment column pair

  // Query rows of the block as 16-bit operands (rows past n are zeros).
  const long long q_row_stride = static_cast<long long>(p.n_q_heads) * HEAD_DIM;
  for (int c = threadIdx.x; c < BLOCK_M * (HEAD_DIM / 4); c += N_THREADS) {
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

#if Q_IN_REGISTERS
  __syncthreads();
  unsigned qa[HEAD_DIM / 16][4];  // this warp's 16 query rows as mma A fragments, loaded once
  {
    const kv_t* qw = sq + (warp * 16) * STRIDE;
#pragma unroll
    for (int kk = 0; kk < HEAD_DIM / 16; ++kk) {
      qa[kk][0] = *reinterpret_cast<const unsigned*>(qw + g * STRIDE + kk * 16 + 2 * t4);
      qa[kk][1] = *reinterpret_cast<const unsigned*>(qw + (g + 8) * STRIDE + kk * 16 + 2 * t4);
      qa[kk][2] = *reinterpret_cast<const unsigned*>(qw + g * STRIDE + kk * 16 + 2 * t4 + 8);
      qa[kk][3] = *reinterpret_cast<const unsigned*>(qw + (g + 8) * STRIDE + kk * 16 + 2 * t4 + 8);
    }
  }
#endif

  // Positions: row i of the sequence's queries sits at len - n + i.
  const int pos_first = len - n + row0;
  const int pos_last = len - n + min(n, row0 + BLOCK_M) - 1;
  int kt_begin = 0;
  if (p.window > 0) kt_begin = max(0, pos_first - p.window + 1) / BLOCK_N;
  const int kt_end = pos_last / BLOCK_N + 1;

  const int my_row_a = row0 + warp * 16 + g;  // this thread's two rows (sequence-relative)
  const int pos_a = len - n + my_row_a;
  const int pos_b = pos_a + 8;
  const float s_mul = p.soft_cap > 0.0f ? p.scale : p.scale * ORCHARD_LOG2E;

  float o[HEAD_DIM / 8][4];
#pragma unroll
  for (int i = 0; i < HEAD_DIM / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  float m_a = -INFINITY, m_b = -INFINITY, l_a = 0.0f, l_b = 0.0f;

  load_kv_tile(p, pages, len, kvh, kt_begin, sk0, sv0);
  cp_async_commit();

  for (int kt = kt_begin; kt < kt_end; ++kt) {
    const int stage = (kt - kt_begin) & 1;
    if (kt + 1 < kt_end) {
      load_kv_tile(p, pages, len, kvh, kt + 1, sk0 + (stage ^ 1) * BLOCK_N * STRIDE,
                   sv0 + (stage ^ 1) * BLOCK_N * STRIDE);
    }
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    const kv_t* sk = sk0 + stage * BLOCK_N * STRIDE;
    const kv_t* sv = sv0 + stage * BLOCK_N * STRIDE;

    // S = Q K^T for this warp's 16 rows and the tile's 64 keys; K fragments by ldmatrix, two key tiles each.
    float s[BLOCK_N / 8][4];
#pragma unroll
    for (int nt = 0; nt < BLOCK_N / 8; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
    const int mi = lane >> 3;
#pragma unroll
    for (int kk = 0; kk < HEAD_DIM / 16; ++kk) {
#if Q_IN_REGISTERS
      const unsigned* a = qa[kk];
#else
      unsigned a[4];
      const kv_t* qw = sq + (warp * 16) * STRIDE;
      a[0] = *reinterpret_cast<const unsigned*>(qw + g * STRIDE + kk * 16 + 2 * t4);
      a[1] = *reinterpret_cast<const unsigned*>(qw + (g + 8) * STRIDE + kk * 16 + 2 * t4);
      a[2] = *reinterpret_cast<const unsigned*>(qw + g * STRIDE + kk * 16 + 2 * t4 + 8);
      a[3] = *reinterpret_cast<const unsigned*>(qw + (g + 8) * STRIDE + kk * 16 + 2 * t4 + 8);
#endif
#pragma unroll
      for (int nt = 0; nt < BLOCK_N / 8; nt += 2) {
        unsigned b[4];
        ldmatrix_x4(b, sk + ((nt + (mi >> 1)) * 8 + (lane & 7)) * STRIDE + kk * 16 + (mi & 1) * 8);
        mma16816(s[nt], a, b);
        mma16816(s[nt + 1], a, b + 2);
      }
    }

    // Scale, soft-cap, mask (causal, window, past the sequence), online softmax in the log2 domain. Only
    // tiles that reach past the warp's first row (the diagonal) or below its window need the mask.
    const int warp_pos_first = len - n + row0 + warp * 16;
    const bool need_mask = kt * BLOCK_N + BLOCK_N - 1 > warp_pos_first ||
                           (p.window > 0 && kt * BLOCK_N <= warp_pos_first + 15 - p.window);
    float mx_a = m_a, mx_b = m_b;
#pragma unroll
    for (int nt = 0; nt < BLOCK_N / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float x = s[nt][e] * s_mul;
        if (p.soft_cap > 0.0f) x = p.soft_cap * tanhf(x / p.soft_cap) * ORCHARD_LOG2E;
        if (need_mask) {
          const int key = kt * BLOCK_N + nt * 8 + 2 * t4 + (e & 1);
          const int pos = e < 2 ? pos_a : pos_b;
          const bool visible = key <= pos && (p.window <= 0 || key > pos - p.window);
          x = visible ? x : -INFINITY;
        }
        s[nt][e] = x;
        if (e < 2) mx_a = fmaxf(mx_a, x); else mx_b = fmaxf(mx_b, x);
      }
    }
    mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffffu, mx_a, 1));
    mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffffu, mx_a, 2));
    mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffffu, mx_b, 1));
    mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffffu, mx_b, 2));
    const float ref_a = mx_a == -INFINITY ? 0.0f : mx_a;  // a row that has seen no key yet
    const float ref_b = mx_b == -INFINITY ? 0.0f : mx_b;
    const float corr_a = exp2f(m_a - ref_a), corr_b = exp2f(m_b - ref_b);
    m_a = mx_a;
    m_b = mx_b;
    l_a *= corr_a;
    l_b *= corr_b;
#pragma unroll
    for (int i = 0; i < HEAD_DIM / 8; ++i) {
      o[i][0] *= corr_a; o[i][1] *= corr_a;
      o[i][2] *= corr_b; o[i][3] *= corr_b;
    }
    unsigned pa[BLOCK_N / 16][4];
#pragma unroll
    for (int nt = 0; nt < BLOCK_N / 8; ++nt) {
      const float p0 = exp2f(s[nt][0] - ref_a), p1 = exp2f(s[nt][1] - ref_a);
      const float p2 = exp2f(s[nt][2] - ref_b), p3 = exp2f(s[nt][3] - ref_b);
      l_a += p0 + p1;
      l_b += p2 + p3;
      pa[nt / 2][(nt & 1) * 2 + 0] = f32x2_to_kv2(p0, p1);
      pa[nt / 2][(nt & 1) * 2 + 1] = f32x2_to_kv2(p2, p3);
    }

    // O += P V: V fragments by transposed ldmatrix, two 8-column tiles per instruction.
#pragma unroll
    for (int kk = 0; kk < BLOCK_N / 16; ++kk) {
      const int mi = lane >> 3;
      const kv_t* vrow = sv + (kk * 16 + (mi & 1) * 8 + (lane & 7)) * STRIDE + (mi >> 1) * 8;
#pragma unroll
      for (int dn = 0; dn < HEAD_DIM / 8; dn += 2) {
        unsigned b[4];
        ldmatrix_x4_trans(b, vrow + dn * 8);
        mma16816(o[dn], pa[kk], b);
        mma16816(o[dn + 1], pa[kk], b + 2);
      }
    }
    __syncthreads();  // the stage is overwritten by the next iteration's loads
  }
  cp_async_wait<0>();

  l_a += __shfl_xor_sync(0xffffffffu, l_a, 1);
  l_a += __shfl_xor_sync(0xffffffffu, l_a, 2);
  l_b += __shfl_xor_sync(0xffffffffu, l_b, 1);
  l_b += __shfl_xor_sync(0xffffffffu, l_b, 2);
  const float inv_a = l_a > 0.0f ? 1.0f / l_a : 0.0f;
  const float inv_b = l_b > 0.0f ? 1.0f / l_b : 0.0f;
  float* out_a = p.out + (q_begin + my_row_a) * q_row_stride + h * HEAD_DIM;
  float* out_b = out_a + 8 * q_row_stride;
#pragma unroll
  for (int dn = 0; dn < HEAD_DIM / 8; ++dn) {
    const int col = dn * 8 + 2 * t4;
    if (my_row_a < n) *reinterpret_cast<float2*>(out_a + col) = make_float2(o[dn][0] * inv_a, o[dn][1] * inv_a);
    if (my_row_a + 8 < n) *reinterpret_cast<float2*>(out_b + col) = make_float2(o[dn][2] * inv_b, o[dn][3] * inv_b);
  }
}
