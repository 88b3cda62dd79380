// LoRA's low-rank products on the GPU (pie/src/backend/cuda/cuda_lora.cpp), compiled at run time by NVRTC:
// the step's rows grouped by adapter, as Punica's BGMV / S-LoRA describe: a shrink (t = x A^T for each
// (adapter, row) entry, any rank without padding) and an expand adding scale t B^T into the projection's
// output, each row's adapters in the step's group order. An adapter's pairs are found through its table
// of pair descriptors, one per (layer, site) slot (rank 0: no pair there), so one launch serves every
// adapter of the step.
//
// Batch invariance: an entry's shrink and a row's expand read that row alone, in an order fixed by the
// shapes.

// One pair of a resident adapter: A [rank, n_in] and B [n_out, rank] as the adapter holds them, in device
// memory (16-byte aligned).
struct LoraPairDesc {
  const float* a;
  const float* b;
  int rank;     // 0: the adapter has no pair in this slot
  float scale;  // alpha / rank (alpha / sqrt(rank) with rsLoRA)
};

// One adapter of the step: its descriptor table and the request's scale.
struct LoraGroupDesc {
  const LoraPairDesc* pairs;  // [(n_layer + 1) * 8], slot (layer + 1) * 8 + site
  float scale;
  int unused;
};

#define LORA_T_STRIDE 256  // floats per entry of t: the largest rank

__device__ __forceinline__ float lora_warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// t[e][k] = x[entry_row[e]] . A[k] for the ranks k of block (e, y): one warp per rank, 16-byte loads
// where rows allow. Grid (n_entries, ceil(max rank / warps)).
extern "C" __global__ void lora_shrink(const float* x, int n_in, const int* entry_group, const int* entry_row,
                                       const LoraGroupDesc* groups, int slot, float* t) {
  const int e = blockIdx.x;
  const LoraPairDesc d = groups[entry_group[e]].pairs[slot];
  const int warps = blockDim.x / 32;
  const int k = blockIdx.y * warps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (k >= d.rank) return;
  const float* xr = x + static_cast<long long>(entry_row[e]) * n_in;
  const float* ak = d.a + static_cast<long long>(k) * n_in;
  float s = 0.0f;
  if ((n_in & 3) == 0) {
    const float4* x4 = reinterpret_cast<const float4*>(xr);
    const float4* a4 = reinterpret_cast<const float4*>(ak);
    for (int j = lane; j < n_in / 4; j += 32) {
      const float4 xv = x4[j], av = a4[j];
      s += xv.x * av.x + xv.y * av.y + xv.z * av.z + xv.w * av.w;
    }
  } else {
    for (int j = lane; j < n_in; j += 32) s += xr[j] * ak[j];
  }
  s = lora_warp_sum(s);
  if (lane == 0) t[static_cast<long long>(e) * LORA_T_STRIDE + k] = s;
}

// y[row][j] += sum over the row's entries e (group order) of scale_g scale_pair sum_k t[e][k] B[j][k]:
// one thread per column, reading B's row j (16-byte loads where the rank allows; a warp's rows are
// contiguous). Grid (ceil(n_out / block), n_rows); rows without entries return at once.
extern "C" __global__ void lora_expand(const float* t, const int* row_ptr, const int* row_entries,
                                       const int* entry_group, const LoraGroupDesc* groups, int slot, int n_out,
                                       float* y) {
  const int row = blockIdx.y;
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  const int e0 = row_ptr[row], e1 = row_ptr[row + 1];
  if (e0 == e1 || j >= n_out) return;
  float* yr = y + static_cast<long long>(row) * n_out;
  float acc = yr[j];
  for (int i = e0; i < e1; ++i) {
    const int e = row_entries[i];
    const LoraGroupDesc g = groups[entry_group[e]];
    const LoraPairDesc d = g.pairs[slot];
    if (d.rank == 0) continue;
    const float* te = t + static_cast<long long>(e) * LORA_T_STRIDE;
    const float* bj = d.b + static_cast<long long>(j) * d.rank;
    float s = 0.0f;
    if ((d.rank & 3) == 0) {
      const float4* b4 = reinterpret_cast<const float4*>(bj);
      const float4* t4 = reinterpret_cast<const float4*>(te);
      for (int k = 0; k < d.rank / 4; ++k) {
        const float4 bv = b4[k], tv = t4[k];
        s += tv.x * bv.x + tv.y * bv.y + tv.z * bv.z + tv.w * bv.w;
      }
    } else {
      for (int k = 0; k < d.rank; ++k) s += te[k] * bj[k];
    }
    acc += g.scale * d.scale * s;
  }
  yr[j] = acc;
}
