// Writing this step's K and V into their pages, with RoPE fused (rope_append), and copying whole pages
// (copy_pages: the copy-on-write of a shared last page). Compile-time: HEAD_DIM, KV_BF16, KV_F32.
//
// rope_append: one block per token. The token's cos/sin come from inv_freq in double (as the reference);
// query heads rotate in place (f32), K heads rotate and are rounded to the KV type into their slot, V is
// rounded into its slot. rotary_dim == 0 turns the rotation off (a plain KV append).

struct RopeAppendParams {
  float* q;                  // [n_tokens][n_q_heads][HEAD_DIM], rotated in place (may be null)
  const float* k;            // [n_tokens][n_kv_heads][HEAD_DIM]
  const float* v;            // [n_tokens][n_kv_heads][HEAD_DIM]
  kv_t* k_pages;             // [n_pages][16][n_kv_heads][HEAD_DIM]
  kv_t* v_pages;             // [n_pages][16][n_kv_heads][HEAD_DIM]
  const int* positions;      // [n_tokens]
  const int* slots;          // [n_tokens]: page * 16 + slot where the token's K and V go
  const double* inv_freq;    // [rotary_dim / 2]
  double attention_factor;   // cos and sin are multiplied by it (YaRN)
  int n_tokens;
  int n_q_heads;
  int n_kv_heads;
  int rotary_dim;            // even, <= HEAD_DIM; 0: no rotation
  int gptj;                  // 1: pairs (2i, 2i + 1); 0: NeoX pairs (i, i + rotary_dim / 2)
};

#define MAX_PAIRS (HEAD_DIM / 2)

// Element indices of pair slot j of a head: rotated pairs first, then the pass-through dims two by two.
__device__ __forceinline__ void pair_dims(int j, int half, int gptj, int& i0, int& i1) {
  if (j < half) {
    i0 = gptj ? 2 * j : j;
    i1 = gptj ? 2 * j + 1 : j + half;
  } else {
    i0 = 2 * j;  // past the rotary dims: 2 * half + 2 * (j - half)
    i1 = 2 * j + 1;
  }
}

// cos/sin (times the attention factor) of token t's rotary angles into shared memory, one pair per slot;
// double precision so long positions keep their phase. Ends with a block barrier.
__device__ void fill_rope_table(const RopeAppendParams& p, int t, float* cs, float* sn) {
  const double pos = static_cast<double>(p.positions[t]);
  for (int i = threadIdx.x; i < p.rotary_dim / 2; i += blockDim.x) {
    double s, c;
    sincos(pos * p.inv_freq[i], &s, &c);
    cs[i] = static_cast<float>(c * p.attention_factor);
    sn[i] = static_cast<float>(s * p.attention_factor);
  }
  __syncthreads();
}

extern "C" __global__ void __launch_bounds__(256) rope_append(const RopeAppendParams p) {
  __shared__ float cs[MAX_PAIRS];
  __shared__ float sn[MAX_PAIRS];
  const int t = blockIdx.x;
  const int half = p.rotary_dim / 2;
  fill_rope_table(p, t, cs, sn);
  const int slot = p.slots[t];

  if (p.q != nullptr && half > 0) {
    float* q = p.q + static_cast<long long>(t) * p.n_q_heads * HEAD_DIM;
    for (int idx = threadIdx.x; idx < p.n_q_heads * half; idx += blockDim.x) {
      const int h = idx / half;
      const int j = idx % half;
      int i0, i1;
      pair_dims(j, half, p.gptj, i0, i1);
      float* x = q + h * HEAD_DIM;
      const float x0 = x[i0], x1 = x[i1];
      x[i0] = x0 * cs[j] - x1 * sn[j];
      x[i1] = x1 * cs[j] + x0 * sn[j];
    }
  }
  const float* k = p.k + static_cast<long long>(t) * p.n_kv_heads * HEAD_DIM;
  const float* v = p.v + static_cast<long long>(t) * p.n_kv_heads * HEAD_DIM;
  kv_t* kd = p.k_pages + static_cast<long long>(slot) * p.n_kv_heads * HEAD_DIM;
  kv_t* vd = p.v_pages + static_cast<long long>(slot) * p.n_kv_heads * HEAD_DIM;
  for (int idx = threadIdx.x; idx < p.n_kv_heads * MAX_PAIRS; idx += blockDim.x) {
    const int h = idx / MAX_PAIRS;
    const int j = idx % MAX_PAIRS;
    int i0, i1;
    pair_dims(j, half, p.gptj, i0, i1);
    const float* x = k + h * HEAD_DIM;
    float y0 = x[i0], y1 = x[i1];
    if (j < half) {
      const float x0 = y0, x1 = y1;
      y0 = x0 * cs[j] - x1 * sn[j];
      y1 = x1 * cs[j] + x0 * sn[j];
    }
    kd[h * HEAD_DIM + i0] = f32_to_kv(y0);
    kd[h * HEAD_DIM + i1] = f32_to_kv(y1);
    // V: its own coalesced pass, two consecutive elements per thread.
    const float2 vv = reinterpret_cast<const float2*>(v + h * HEAD_DIM)[j];
    store_kv2(vd + h * HEAD_DIM + 2 * j, vv.x, vv.y);
  }
  // Pass-through query dims need no write: they are unchanged in place.
}

// rope_append with four pair slots per thread and 16-byte accesses; needs rotary_dim % 8 == 0 (so that
// every group of four slots is all rotated or all pass-through and the vectors are aligned).
__device__ __forceinline__ void rotate4(float4& a, float4& b, const float* c, const float* sn) {
  // (a.x, b.x) is pair 0 of the group, ... (a.w, b.w) pair 3.
  const float4 x0 = a, x1 = b;
  a.x = x0.x * c[0] - x1.x * sn[0]; b.x = x1.x * c[0] + x0.x * sn[0];
  a.y = x0.y * c[1] - x1.y * sn[1]; b.y = x1.y * c[1] + x0.y * sn[1];
  a.z = x0.z * c[2] - x1.z * sn[2]; b.z = x1.z * c[2] + x0.z * sn[2];
  a.w = x0.w * c[3] - x1.w * sn[3]; b.w = x1.w * c[3] + x0.w * sn[3];
}

// GPT-J pairs sit side by side: (v0.x, v0.y) (v0.z, v0.w) (v1.x, v1.y) (v1.z, v1.w).
__device__ __forceinline__ void rotate4_interleaved(float4& v0, float4& v1, const float* c, const float* sn) {
  float4 a = make_float4(v0.x, v0.z, v1.x, v1.z), b = make_float4(v0.y, v0.w, v1.y, v1.w);
  rotate4(a, b, c, sn);
  v0 = make_float4(a.x, b.x, a.y, b.y);
  v1 = make_float4(a.z, b.z, a.w, b.w);
}

// Rotates (or passes through) group `jg` of one head row x, in place, returning the values.
__device__ __forceinline__ void group_values(const float* x, int jg, int half, int gptj, const float* cs,
                                             const float* sn, float4& a, float4& b, bool& split_halves) {
  const int j = jg * 4;
  if (j < half && !gptj) {
    a = *reinterpret_cast<const float4*>(x + j);
    b = *reinterpret_cast<const float4*>(x + j + half);
    rotate4(a, b, cs + j, sn + j);
    split_halves = true;  // a goes to dims j.., b to dims j + half..
  } else {
    a = *reinterpret_cast<const float4*>(x + 2 * j);
    b = *reinterpret_cast<const float4*>(x + 2 * j + 4);
    if (j < half) rotate4_interleaved(a, b, cs + j, sn + j);
    split_halves = false;  // a and b are dims 2j .. 2j + 7
  }
}

extern "C" __global__ void __launch_bounds__(256) rope_append_vec(const RopeAppendParams p) {
  __shared__ __align__(16) float cs[MAX_PAIRS];
  __shared__ __align__(16) float sn[MAX_PAIRS];
  const int t = blockIdx.x;
  const int half = p.rotary_dim / 2;
  fill_rope_table(p, t, cs, sn);
  constexpr int kGroups = HEAD_DIM / 8;  // groups of four pair slots per head
  const int slot = p.slots[t];

  if (p.q != nullptr && half > 0) {
    float* q = p.q + static_cast<long long>(t) * p.n_q_heads * HEAD_DIM;
    const int rot_groups = half / 4;  // only rotated groups change
    for (int idx = threadIdx.x; idx < p.n_q_heads * rot_groups; idx += blockDim.x) {
      const int h = idx / rot_groups;
      const int jg = idx % rot_groups;
      float* x = q + h * HEAD_DIM;
      float4 a, b;
      bool split;
      group_values(x, jg, half, p.gptj, cs, sn, a, b, split);
      if (split) {
        *reinterpret_cast<float4*>(x + jg * 4) = a;
        *reinterpret_cast<float4*>(x + jg * 4 + half) = b;
      } else {
        *reinterpret_cast<float4*>(x + jg * 8) = a;
        *reinterpret_cast<float4*>(x + jg * 8 + 4) = b;
      }
    }
  }
  const float* k = p.k + static_cast<long long>(t) * p.n_kv_heads * HEAD_DIM;
  const float* v = p.v + static_cast<long long>(t) * p.n_kv_heads * HEAD_DIM;
  kv_t* kd = p.k_pages + static_cast<long long>(slot) * p.n_kv_heads * HEAD_DIM;
  kv_t* vd = p.v_pages + static_cast<long long>(slot) * p.n_kv_heads * HEAD_DIM;
  for (int idx = threadIdx.x; idx < p.n_kv_heads * kGroups; idx += blockDim.x) {
    const int h = idx / kGroups;
    const int jg = idx % kGroups;
    float4 a, b;
    bool split;
    group_values(k + h * HEAD_DIM, jg, half, p.gptj, cs, sn, a, b, split);
    kv_t* row = kd + h * HEAD_DIM;
    if (split) {
      store_kv4(row + jg * 4, a);
      store_kv4(row + jg * 4 + half, b);
    } else {
      store_kv8(row + jg * 8, a, b);
    }
    const float4 v0 = *reinterpret_cast<const float4*>(v + h * HEAD_DIM + jg * 8);
    const float4 v1 = *reinterpret_cast<const float4*>(v + h * HEAD_DIM + jg * 8 + 4);
    store_kv8(vd + h * HEAD_DIM + jg * 8, v0, v1);
  }
}

// Copies whole pages (K and V): dst_pages[i] <- src_pages[i]. grid (n_copies, chunks), 256 threads.
extern "C" __global__ void __launch_bounds__(256) copy_pages(kv_t* k_pages, kv_t* v_pages, const int* src_pages,
                                                             const int* dst_pages, int n_copies,
                                                             long long page_vec16) {
  const int c = blockIdx.x;
  const long long src = static_cast<long long>(src_pages[c]) * page_vec16;
  const long long dst = static_cast<long long>(dst_pages[c]) * page_vec16;
  uint4* k = reinterpret_cast<uint4*>(k_pages);
  uint4* v = reinterpret_cast<uint4*>(v_pages);
  for (long long i = blockIdx.y * blockDim.x + threadIdx.x; i < page_vec16; i += static_cast<long long>(gridDim.y) * blockDim.x) {
    k[dst + i] = k[src + i];
    v[dst + i] = v[src + i];
  }
}
