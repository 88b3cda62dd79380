// Paged decode attention, split-KV (flash-decoding). One block per (split, KV head, sequence) handles the
// GROUP query heads that share the KV head over `chunk` tokens.
// Compile-time: HEAD_DIM (64, 128, 256), GROUP (query heads per KV head), KV_BF16, KV_F32, N_WARPS, UNROLL.
// The SIMT kernel (decode_attention_split) also takes query rows of a prefill (qo_indptr set): blockIdx.x is
// then split + n_splits * (sequence * max_q_len + the row's index in its sequence) (x: no 65,535 bound), the
// row sees the keys up to its own position, and blocks past a sequence's rows return at once. That is the prefill of f32 KV, which the tensor-core
// kernels (16-bit operands) do not read.
// With several splits, each block writes its partial rows and the last block of a (sequence, KV head) to
// finish merges them (finish_split): no second kernel, so the next kernel on the stream follows this one's
// last block directly.
//
// Each token's HEAD_DIM-vector of one KV head is read by LANES = HEAD_DIM / 8 lanes, 8 elements each, so
// a warp covers 32 / LANES tokens per step and UNROLL steps are in flight before the first use. The
// softmax runs online in the log2 domain, once per UNROLL steps. The block's page ids are staged in shared
// memory first (no dependent page-table load before each KV load), and the next step's K and V are loaded
// while the current one is computed. A split covers at most MAX_CHUNK tokens.

#define LANES (HEAD_DIM / 8)
#define TOKENS_PER_WARP (32 / LANES)
#define MAX_CHUNK 4096

struct DecodeParams {
  const kv_t* k_pages;       // [n_pages][16][n_kv_heads][HEAD_DIM]
  const kv_t* v_pages;       // [n_pages][16][n_kv_heads][HEAD_DIM]
  const int* page_indptr;    // [n_seqs + 1]
  const int* page_indices;   // [page_indptr[n_seqs]]
  const int* seq_lens;       // [n_seqs]
  const float* q;            // [n_seqs][n_q_heads][HEAD_DIM]
  float* out;                // [n_seqs][n_q_heads][HEAD_DIM]
  float* part_o;             // [n_seqs][n_q_heads][n_splits][HEAD_DIM], unnormalized (n_splits > 1)
  float* part_ml;            // [n_seqs][n_q_heads][n_splits][2]: running max (log2 domain), sum
  unsigned* counters;        // [n_seqs][n_kv_heads]: splits finished (n_splits > 1); zero between calls
  int n_kv_heads;
  int n_q_heads;
  int n_splits;
  int chunk;                 // tokens per split
  float scale;               // logits = scale * q.k
  float soft_cap;            // 0: off
  int window;                // 0: off
  const int* qo_indptr;      // null: decode; else query rows of a prefill (PrefillArgs::qo_indptr)
  int max_q_len;             // rows per sequence in blockIdx.z (with qo_indptr)
};

#define MERGE_BATCH 16  // partial rows in flight per thread in the merge (one round for up to 16 splits)

// The merge: run by the last block of a (query row, KV head) to finish, once every split's partial
// rows are in memory (qrow: the sequence in decode, the query row in a prefill). Each thread owns 4 dims of one of the GROUP query rows and folds the splits into a
// running max and sum, MERGE_BATCH partial rows per round of loads. Partials are read through L2 (.cg):
// other blocks wrote them during this kernel. Splits [s_lo, s_hi) are the ones that hold tokens.
__device__ __forceinline__ void merge_group(const DecodeParams& p, int qrow, int kvh, int s_lo, int s_hi) {
  for (int idx = threadIdx.x; idx < GROUP * (HEAD_DIM / 4); idx += N_WARPS * 32) {
    const int r = idx / (HEAD_DIM / 4);
    const int dq = idx % (HEAD_DIM / 4);
    const long long row = static_cast<long long>(qrow) * p.n_q_heads + kvh * GROUP + r;
    const float2* ml = reinterpret_cast<const float2*>(p.part_ml) + row * p.n_splits;
    const float4* po = reinterpret_cast<const float4*>(p.part_o + row * p.n_splits * HEAD_DIM) + dq;
    float m = ORCHARD_NEG_BIG, l = 0.0f;
    float4 o = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int s0 = s_lo; s0 < s_hi; s0 += MERGE_BATCH) {
      float2 a[MERGE_BATCH];
      float4 v[MERGE_BATCH];
#pragma unroll
      for (int i = 0; i < MERGE_BATCH; ++i) {
        if (s0 + i < s_hi) {
          a[i] = __ldcg(ml + s0 + i);
          v[i] = __ldcg(po + static_cast<long long>(s0 + i) * (HEAD_DIM / 4));
        } else {
          a[i] = make_float2(ORCHARD_NEG_BIG, 0.0f);
          v[i] = make_float4(0.f, 0.f, 0.f, 0.f);
        }
      }
      float mx = m;
#pragma unroll
      for (int i = 0; i < MERGE_BATCH; ++i) mx = fmaxf(mx, a[i].x);
      const float c = exp2f(m - mx);
      l *= c;
      o.x *= c; o.y *= c; o.z *= c; o.w *= c;
#pragma unroll
      for (int i = 0; i < MERGE_BATCH; ++i) {
        const float w = exp2f(a[i].x - mx);
        l += w * a[i].y;
        o.x += w * v[i].x; o.y += w * v[i].y; o.z += w * v[i].z; o.w += w * v[i].w;
      }
      m = mx;
    }
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    reinterpret_cast<float4*>(p.out + row * HEAD_DIM)[dq] = make_float4(o.x * inv, o.y * inv, o.z * inv, o.w * inv);
  }
}

// After a block has written its partial rows: counts it in, and if it is the last split of its (sequence,
// KV head) to finish, merges them all and leaves the counter at zero for the next call. Every thread of the
// block calls this (it holds barriers).
__device__ __forceinline__ void finish_split(const DecodeParams& p, int qrow, int kvh, int len) {
  __shared__ int sm_last;
  __threadfence();  // this thread's partial rows are visible device-wide before the block is counted
  __syncthreads();
  unsigned* counter = p.counters + static_cast<long long>(qrow) * p.n_kv_heads + kvh;
  if (threadIdx.x == 0) {
    sm_last = atomicAdd(counter, 1u) == static_cast<unsigned>(p.n_splits - 1);
    __threadfence();
  }
  __syncthreads();
  if (!sm_last) return;
  const int s_hi = min(p.n_splits, (len + p.chunk - 1) / p.chunk);
  const int s_lo = p.window > 0 && len > p.window ? (len - p.window) / p.chunk : 0;
  merge_group(p, qrow, kvh, s_lo, s_hi);
  if (threadIdx.x == 0) *counter = 0u;
}

__device__ __forceinline__ float score_to_log2(float dot, const DecodeParams& p) {
  // q was pre-multiplied by scale (and by log2(e) when there is no soft cap).
  if (p.soft_cap > 0.0f) return p.soft_cap * tanhf(dot / p.soft_cap) * ORCHARD_LOG2E;
  return dot;
}

extern "C" __global__ void __launch_bounds__(N_WARPS * 32) decode_attention_split(const DecodeParams p) {
#if __CUDA_ARCH__ >= 900
  // Launched as a programmatic dependent of whatever ran before on the stream (its launch and block start-up
  // overlap that kernel's tail): nothing it wrote (q, pages, the split workspace) is touched before this.
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
  const int kvh = blockIdx.y;
  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;
  const int sub = lane / LANES;  // which of the warp's tokens
  const int dl = lane % LANES;   // which 8 dims

  // The query row (q, out, partials, counters) and the keys it sees: [0, len) of its sequence.
  int split = blockIdx.x, seq = blockIdx.z, qrow = blockIdx.z, len;
  if (p.qo_indptr != nullptr) {
    split = blockIdx.x % p.n_splits;
    const int z = blockIdx.x / p.n_splits;
    seq = z / p.max_q_len;
    const int i = z % p.max_q_len;
    const int first = p.qo_indptr[seq], n = p.qo_indptr[seq + 1] - first;
    if (i >= n) return;
    qrow = first + i;
    len = p.seq_lens[seq] - n + i + 1;
  } else {
    len = p.seq_lens[seq];
  }
  int t_begin = split * p.chunk;
  const int t_end = min(len, t_begin + p.chunk);
  if (p.window > 0) t_begin = max(t_begin, len - p.window);

  const float q_mul = p.soft_cap > 0.0f ? p.scale : p.scale * ORCHARD_LOG2E;
  float q[GROUP][8];
#pragma unroll
  for (int g = 0; g < GROUP; ++g) {
    const float4* qp = reinterpret_cast<const float4*>(
        p.q + (static_cast<long long>(qrow) * p.n_q_heads + kvh * GROUP + g) * HEAD_DIM + dl * 8);
    const float4 a = qp[0], b = qp[1];
    q[g][0] = a.x * q_mul; q[g][1] = a.y * q_mul; q[g][2] = a.z * q_mul; q[g][3] = a.w * q_mul;
    q[g][4] = b.x * q_mul; q[g][5] = b.y * q_mul; q[g][6] = b.z * q_mul; q[g][7] = b.w * q_mul;
  }

  float m[GROUP], l[GROUP], acc[GROUP][8];
#pragma unroll
  for (int g = 0; g < GROUP; ++g) {
    m[g] = ORCHARD_NEG_BIG;
    l[g] = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[g][i] = 0.0f;
  }

  // The split's page ids, staged in shared memory.
  __shared__ int sm_pages[MAX_CHUNK / 16 + 1];
  const int* pages = p.page_indices + p.page_indptr[seq];
  const int first_page = t_begin >> 4;
  if (t_begin < t_end) {
    const int n_pages = ((t_end - 1) >> 4) - first_page + 1;
    for (int i = threadIdx.x; i < n_pages; i += N_WARPS * 32) sm_pages[i] = pages[first_page + i];
  }
  __syncthreads();

  const long long slot_stride = static_cast<long long>(p.n_kv_heads) * HEAD_DIM;
  const long long head_off = static_cast<long long>(kvh) * HEAD_DIM + dl * 8;
  const int step = N_WARPS * TOKENS_PER_WARP * UNROLL;

  kv8_t kr[UNROLL], vr[UNROLL];
  auto load = [&](int base, kv8_t* kd, kv8_t* vd) {
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const int t = base + u * TOKENS_PER_WARP + sub;
      if (t < t_end) {
        const long long off = (static_cast<long long>(sm_pages[(t >> 4) - first_page]) * 16 + (t & 15)) * slot_stride + head_off;
        kd[u] = load_kv8(p.k_pages + off);
        vd[u] = load_kv8(p.v_pages + off);
      } else {
        kd[u] = kv8_zero();
        vd[u] = kv8_zero();
      }
    }
  };
  int base = t_begin + warp * TOKENS_PER_WARP * UNROLL;
  if (base < t_end) load(base, kr, vr);

  for (; base < t_end; base += step) {
    kv8_t kn[UNROLL], vn[UNROLL];
    if (base + step < t_end) load(base + step, kn, vn);  // in flight while this step computes
    float s[UNROLL][GROUP];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      float kf[8];
      kv8_to_f32(kr[u], kf);
#pragma unroll
      for (int g = 0; g < GROUP; ++g) {
        float d = 0.0f;
#pragma unroll
        for (int i = 0; i < 8; ++i) d = fmaf(q[g][i], kf[i], d);
        s[u][g] = d;
      }
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
#pragma unroll
      for (int g = 0; g < GROUP; ++g) {
#pragma unroll
        for (int off = LANES / 2; off > 0; off >>= 1) s[u][g] += __shfl_xor_sync(0xffffffffu, s[u][g], off);
      }
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const bool valid = base + u * TOKENS_PER_WARP + sub < t_end;
#pragma unroll
      for (int g = 0; g < GROUP; ++g) s[u][g] = valid ? score_to_log2(s[u][g], p) : -INFINITY;
    }
#pragma unroll
    for (int g = 0; g < GROUP; ++g) {
      float mx = m[g];
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) mx = fmaxf(mx, s[u][g]);
      const float corr = exp2f(m[g] - mx);
      m[g] = mx;
      l[g] *= corr;
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[g][i] *= corr;
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      float vf[8];
      kv8_to_f32(vr[u], vf);
#pragma unroll
      for (int g = 0; g < GROUP; ++g) {
        const float pw = exp2f(s[u][g] - m[g]);
        l[g] += pw;
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[g][i] = fmaf(pw, vf[i], acc[g][i]);
      }
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      kr[u] = kn[u];
      vr[u] = vn[u];
    }
  }

#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");  // the next kernel may get scheduled now
#endif
  // Merge the warp's token groups (lanes with the same dims), then the warps through shared memory.
#pragma unroll
  for (int off = LANES; off < 32; off <<= 1) {
#pragma unroll
    for (int g = 0; g < GROUP; ++g) {
      const float mo = __shfl_xor_sync(0xffffffffu, m[g], off);
      const float lo = __shfl_xor_sync(0xffffffffu, l[g], off);
      const float mn = fmaxf(m[g], mo);
      const float a = exp2f(m[g] - mn), b = exp2f(mo - mn);
      m[g] = mn;
      l[g] = l[g] * a + lo * b;
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const float ao = __shfl_xor_sync(0xffffffffu, acc[g][i], off);
        acc[g][i] = acc[g][i] * a + ao * b;
      }
    }
  }

  __shared__ float sm_m[N_WARPS][GROUP];
  __shared__ float sm_l[N_WARPS][GROUP];
  __shared__ __align__(16) float sm_acc[N_WARPS][GROUP][HEAD_DIM];
  if (sub == 0) {
#pragma unroll
    for (int g = 0; g < GROUP; ++g) {
      if (dl == 0) {
        sm_m[warp][g] = m[g];
        sm_l[warp][g] = l[g];
      }
      float4* dst = reinterpret_cast<float4*>(&sm_acc[warp][g][dl * 8]);
      dst[0] = make_float4(acc[g][0], acc[g][1], acc[g][2], acc[g][3]);
      dst[1] = make_float4(acc[g][4], acc[g][5], acc[g][6], acc[g][7]);
    }
  }
  __syncthreads();

  for (int idx = threadIdx.x; idx < GROUP * HEAD_DIM; idx += N_WARPS * 32) {
    const int g = idx / HEAD_DIM;
    const int d = idx % HEAD_DIM;
    float mx = ORCHARD_NEG_BIG;
#pragma unroll
    for (int w = 0; w < N_WARPS; ++w) mx = fmaxf(mx, sm_m[w][g]);
    float sum = 0.0f, o = 0.0f;
#pragma unroll
    for (int w = 0; w < N_WARPS; ++w) {
      const float f = exp2f(sm_m[w][g] - mx);
      sum += sm_l[w][g] * f;
      o += sm_acc[w][g][d] * f;
    }
    const long long row = static_cast<long long>(qrow) * p.n_q_heads + kvh * GROUP + g;
    if (p.n_splits == 1) {
      p.out[row * HEAD_DIM + d] = sum > 0.0f ? o / sum : 0.0f;
    } else {
      p.part_o[(row * p.n_splits + split) * HEAD_DIM + d] = o;
      if (d == 0) {
        p.part_ml[(row * p.n_splits + split) * 2] = mx;
        p.part_ml[(row * p.n_splits + split) * 2 + 1] = sum;
      }
    }
  }
  if (p.n_splits > 1) finish_split(p, qrow, kvh, len);
}

// --- Tensor-core decode (HEAD_DIM <= 128, GROUP <= 16) ------------------------------------------------------
// The GROUP query heads of a KV head are the rows of an m16n8k16 MMA (padded to 16), so a token costs a few
// tensor-core instructions instead of GROUP * HEAD_DIM / 8 FMAs per lane, and K/V stream through shared
// memory by cp.async: each warp owns tiles of MMA_KEYS keys (tile i of the split goes to warp i % N_WARPS),
// two stages deep, with its own online softmax; the warps meet in shared memory at the end. The page table is
// read and the first tiles are prefetched into L2 before the kernel waits for its predecessor on the stream.
#if HEAD_DIM <= 128 && GROUP <= 16 && !KV_F32
#define MMA_KEYS 32
#define MMA_STRIDE (HEAD_DIM + 8)
#ifndef MMA_STAGES
#define MMA_STAGES 2  // tiles in flight per warp (2 or 3)
#endif
// K and V are read once per call: their lines are marked to leave L2 first, so that they do not push out
// what is read again (the page table, the query, the split partials, the tiles the next kernel prefetched).
// (Batch 1, 32k context: 80.3% -> 83.0% of the copy bandwidth, the working set rotated over four caches
// so that no call finds the previous call's lines; a 256-byte L2 prefetch size instead measured slower.)
__device__ __forceinline__ unsigned long long l2_evict_first_policy() {
  unsigned long long policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
  return policy;
}
__device__ __forceinline__ void cp_async16_evict_first(void* dst, const void* src, bool valid,
                                                       unsigned long long policy) {
  const int n = valid ? 16 : 0;  // 0: fill the 16 bytes with zeros
  asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;\n" ::"r"(smem_addr(dst)), "l"(src),
               "r"(n), "l"(policy));
}
// The block signals the next kernel on the stream (griddepcontrol.launch_dependents) when each warp has
// this many tiles left, so that kernel's blocks start up and prefetch during this one's last tiles instead
// of after them (batch 1, 32k: 83.0% -> 83.6% against a signal after the last tile; 2 and 8 no better).
#define MMA_TRIGGER_TILES 4
#define MMA_STAGE_ELEMS (2 * MMA_KEYS * MMA_STRIDE)  // K then V of one tile
#define MMA_WARP_ELEMS (MMA_STAGES * MMA_STAGE_ELEMS)

__device__ __forceinline__ void mma_load_tile(const DecodeParams& p, const int* pages, int first_page, int kvh,
                                              long long slot_stride, int tile_start, int t_end, kv_t* sk, kv_t* sv,
                                              int lane) {
  constexpr int kChunks = HEAD_DIM / 8;
  const unsigned long long policy = l2_evict_first_policy();
#pragma unroll
  for (int c = lane; c < MMA_KEYS * kChunks; c += 32) {
    const int r = c / kChunks;
    const int col = (c % kChunks) * 8;
    const int t = tile_start + r;
    const bool valid = t < t_end;
    long long off = 0;
    if (valid) off = (static_cast<long long>(pages[(t >> 4) - first_page]) * 16 + (t & 15)) * slot_stride + kvh * HEAD_DIM + col;
    cp_async16_evict_first(sk + r * MMA_STRIDE + col, p.k_pages + off, valid, policy);
    cp_async16_evict_first(sv + r * MMA_STRIDE + col, p.v_pages + off, valid, policy);
  }
}

extern "C" __global__ void __launch_bounds__(N_WARPS * 32) decode_attention_mma(const DecodeParams p) {
  extern __shared__ __align__(16) kv_t dsmem[];
  __shared__ int sm_pages[MAX_CHUNK / 16 + 1];
  __shared__ float sm_m[N_WARPS][GROUP];
  __shared__ float sm_l[N_WARPS][GROUP];
  const int split = blockIdx.x;
  const int kvh = blockIdx.y;
  const int seq = blockIdx.z;
  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;
  const int g = lane >> 2;
  const int t4 = lane & 3;
  const int mi = lane >> 3;

  // Before waiting for the previous kernel on the stream: seq_lens and the page table (written by host copies,
  // never by the kernel this one follows; see attention_cuda.h) are read, the split's page ids staged, and the
  // first tiles of every warp prefetched into L2 (a hint; L2 is the point of coherence, so a line that the
  // previous kernel writes later is still read fresh). Q and the pages themselves are read after the wait.
  const int len = p.seq_lens[seq];
  int t_begin = split * p.chunk;
  const int t_end = min(len, t_begin + p.chunk);
  if (p.window > 0) t_begin = max(t_begin, len - p.window);
  const int first_page = t_begin >> 4;
  const int* pages = p.page_indices + p.page_indptr[seq];
  const long long slot_stride = static_cast<long long>(p.n_kv_heads) * HEAD_DIM;
  const int n_tiles = t_begin < t_end ? (t_end - t_begin + MMA_KEYS - 1) / MMA_KEYS : 0;
  if (t_begin < t_end) {
    const int n_pages = ((t_end - 1) >> 4) - first_page + 1;
    for (int i = threadIdx.x; i < n_pages; i += N_WARPS * 32) sm_pages[i] = pages[first_page + i];
  }
  __syncthreads();
#pragma unroll
  for (int k = 0; k < MMA_STAGES; ++k) {
    // Lane r of a warp prefetches token r of each of its first MMA_STAGES tiles: K and V, HEAD_DIM * 2 bytes
    // each. (Four or eight tiles per warp measured slower at batch 1 and 64.)
    const int t = t_begin + (warp + k * N_WARPS) * MMA_KEYS + lane;
    if (t < t_end) {
      const long long off =
          (static_cast<long long>(sm_pages[(t >> 4) - first_page]) * 16 + (t & 15)) * slot_stride + kvh * HEAD_DIM;
      prefetch_l2<HEAD_DIM * 2>(p.k_pages + off);
      prefetch_l2<HEAD_DIM * 2>(p.v_pages + off);
    }
  }
#if __CUDA_ARCH__ >= 900
  // Launched as a programmatic dependent of whatever ran before on the stream (its launch and block start-up
  // overlap that kernel's tail): nothing it wrote (q, pages, the split workspace) is touched before this.
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif

  // Query rows (the group's heads) as A fragments; rows past GROUP are zeros.
  unsigned qa[HEAD_DIM / 16][4];
  {
    const float* qb = p.q + (static_cast<long long>(seq) * p.n_q_heads + kvh * GROUP) * HEAD_DIM;
#pragma unroll
    for (int kk = 0; kk < HEAD_DIM / 16; ++kk) {
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int row = g + (r & 1) * 8;
        const int col = kk * 16 + 2 * t4 + (r >> 1) * 8;
        float2 v = make_float2(0.f, 0.f);
        if (row < GROUP) v = *reinterpret_cast<const float2*>(qb + row * HEAD_DIM + col);
        qa[kk][r] = f32x2_to_kv2(v.x, v.y);
      }
    }
  }

  const float s_mul = p.soft_cap > 0.0f ? p.scale : p.scale * ORCHARD_LOG2E;
  kv_t* my = dsmem + warp * MMA_WARP_ELEMS;
#pragma unroll
  for (int k = 0; k < MMA_STAGES - 1; ++k) {
    const int tile = warp + k * N_WARPS;
    kv_t* st = my + k * MMA_STAGE_ELEMS;
    if (tile < n_tiles) {
      mma_load_tile(p, sm_pages, first_page, kvh, slot_stride, t_begin + tile * MMA_KEYS, t_end, st,
                    st + MMA_KEYS * MMA_STRIDE, lane);
    }
    cp_async_commit();
  }

  float o[HEAD_DIM / 8][4];
#pragma unroll
  for (int i = 0; i < HEAD_DIM / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  float m_a = -INFINITY, m_b = -INFINITY, l_a = 0.0f, l_b = 0.0f;
  int stage = 0;
  for (int it = warp; it < n_tiles; it += N_WARPS) {
#if __CUDA_ARCH__ >= 900
    if (it + MMA_TRIGGER_TILES * N_WARPS >= n_tiles && (it == warp || it + (MMA_TRIGGER_TILES - 1) * N_WARPS < n_tiles)) {
      asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");  // this warp's last tiles
    }
#endif
    const int pre = it + (MMA_STAGES - 1) * N_WARPS;  // the tile MMA_STAGES - 1 rounds ahead
    {
      int pst = stage + MMA_STAGES - 1;
      if (pst >= MMA_STAGES) pst -= MMA_STAGES;
      kv_t* st = my + pst * MMA_STAGE_ELEMS;
      if (pre < n_tiles) {
        mma_load_tile(p, sm_pages, first_page, kvh, slot_stride, t_begin + pre * MMA_KEYS, t_end, st,
                      st + MMA_KEYS * MMA_STRIDE, lane);
      }
    }
    cp_async_commit();
    cp_async_wait<MMA_STAGES - 1>();
    __syncwarp();
    const kv_t* sk = my + stage * MMA_STAGE_ELEMS;
    const kv_t* sv = sk + MMA_KEYS * MMA_STRIDE;
    const int tile_start = t_begin + it * MMA_KEYS;

    float s[MMA_KEYS / 8][4];
#pragma unroll
    for (int nt = 0; nt < MMA_KEYS / 8; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < HEAD_DIM / 16; ++kk) {
#pragma unroll
      for (int nt = 0; nt < MMA_KEYS / 8; nt += 2) {
        unsigned b[4];
        ldmatrix_x4(b, sk + ((nt + (mi >> 1)) * 8 + (lane & 7)) * MMA_STRIDE + kk * 16 + (mi & 1) * 8);
        mma16816(s[nt], qa[kk], b);
        mma16816(s[nt + 1], qa[kk], b + 2);
      }
    }
    const bool need_mask = tile_start + MMA_KEYS > t_end;
    float mx_a = m_a, mx_b = m_b;
#pragma unroll
    for (int nt = 0; nt < MMA_KEYS / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float x = s[nt][e] * s_mul;
        if (p.soft_cap > 0.0f) x = p.soft_cap * tanhf(x / p.soft_cap) * ORCHARD_LOG2E;
        if (need_mask && tile_start + nt * 8 + 2 * t4 + (e & 1) >= t_end) x = -INFINITY;
        s[nt][e] = x;
        if (e < 2) mx_a = fmaxf(mx_a, x); else mx_b = fmaxf(mx_b, x);
      }
    }
    mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffffu, mx_a, 1));
    mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffffu, mx_a, 2));
    mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffffu, mx_b, 1));
    mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffffu, mx_b, 2));
    const float ref_a = mx_a == -INFINITY ? 0.0f : mx_a;
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
    unsigned pa[MMA_KEYS / 16][4];
#pragma unroll
    for (int nt = 0; nt < MMA_KEYS / 8; ++nt) {
      const float p0 = exp2f(s[nt][0] - ref_a), p1 = exp2f(s[nt][1] - ref_a);
      const float p2 = exp2f(s[nt][2] - ref_b), p3 = exp2f(s[nt][3] - ref_b);
      l_a += p0 + p1;
      l_b += p2 + p3;
      pa[nt / 2][(nt & 1) * 2 + 0] = f32x2_to_kv2(p0, p1);
      pa[nt / 2][(nt & 1) * 2 + 1] = f32x2_to_kv2(p2, p3);
    }
#pragma unroll
    for (int kk = 0; kk < MMA_KEYS / 16; ++kk) {
      const kv_t* vrow = sv + (kk * 16 + (mi & 1) * 8 + (lane & 7)) * MMA_STRIDE + (mi >> 1) * 8;
#pragma unroll
      for (int dn = 0; dn < HEAD_DIM / 8; dn += 2) {
        unsigned b[4];
        ldmatrix_x4_trans(b, vrow + dn * 8);
        mma16816(o[dn], pa[kk], b);
        mma16816(o[dn + 1], pa[kk], b + 2);
      }
    }
    __syncwarp();  // every lane is done with this stage before it is refilled
    stage = stage + 1 == MMA_STAGES ? 0 : stage + 1;
  }
  cp_async_wait<0>();

  l_a += __shfl_xor_sync(0xffffffffu, l_a, 1);
  l_a += __shfl_xor_sync(0xffffffffu, l_a, 2);
  l_b += __shfl_xor_sync(0xffffffffu, l_b, 1);
  l_b += __shfl_xor_sync(0xffffffffu, l_b, 2);
  __syncthreads();  // all warps are out of their tiles: the tile memory becomes the merge buffer
  float* sm_o = reinterpret_cast<float*>(dsmem);  // [N_WARPS][GROUP][HEAD_DIM]: the group's rows only
  float* ow = sm_o + warp * GROUP * HEAD_DIM;
#pragma unroll
  for (int dn = 0; dn < HEAD_DIM / 8; ++dn) {
    if (g < GROUP) *reinterpret_cast<float2*>(ow + g * HEAD_DIM + dn * 8 + 2 * t4) = make_float2(o[dn][0], o[dn][1]);
    if (g + 8 < GROUP) {
      *reinterpret_cast<float2*>(ow + (g + 8) * HEAD_DIM + dn * 8 + 2 * t4) = make_float2(o[dn][2], o[dn][3]);
    }
  }
  if (t4 == 0 && g < GROUP) {
    sm_m[warp][g] = m_a;
    sm_l[warp][g] = l_a;
  }
  if (t4 == 0 && g + 8 < GROUP) {
    sm_m[warp][g + 8] = m_b;
    sm_l[warp][g + 8] = l_b;
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < GROUP * HEAD_DIM; idx += N_WARPS * 32) {
    const int r = idx / HEAD_DIM;
    const int d = idx % HEAD_DIM;
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < N_WARPS; ++w) mx = fmaxf(mx, sm_m[w][r]);
    float sum = 0.0f, acc = 0.0f;
#pragma unroll
    for (int w = 0; w < N_WARPS; ++w) {
      const float f = sm_m[w][r] == -INFINITY ? 0.0f : exp2f(sm_m[w][r] - mx);
      sum += sm_l[w][r] * f;
      acc += sm_o[(w * GROUP + r) * HEAD_DIM + d] * f;
    }
    const long long row = static_cast<long long>(seq) * p.n_q_heads + kvh * GROUP + r;
    if (p.n_splits == 1) {
      p.out[row * HEAD_DIM + d] = sum > 0.0f ? acc / sum : 0.0f;
    } else {
      p.part_o[(row * p.n_splits + split) * HEAD_DIM + d] = acc;
      if (d == 0) {
        p.part_ml[(row * p.n_splits + split) * 2] = fmaxf(mx, ORCHARD_NEG_BIG);
        p.part_ml[(row * p.n_splits + split) * 2 + 1] = sum;
      }
    }
  }
  if (p.n_splits > 1) finish_split(p, seq, kvh, len);
}
#endif
