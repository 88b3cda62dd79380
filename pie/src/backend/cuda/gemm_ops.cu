// The tensor-core products' kernels (gemm.cpp), compiled at run time by NVRTC (no toolkit headers):
// the activations converted to f16 / bf16 for cuBLAS, and slabs of rows of a quantized weight
// expanded to f16 (a scratch that stays in L2 while cuBLAS reads it) by weight_blocks.cuh's load_chunk,
// whose text kernel_text() puts first.

__device__ __forceinline__ u16 f32_to_bf16(float f) {
  u16 h;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}

// x (n floats, n a multiple of 4, 16-byte aligned) as f16 / bf16, round to nearest even: four a
// thread.
template <bool BF16>
__device__ __forceinline__ void convert(const float* __restrict__ x, long long n4,
                                        u16* __restrict__ out) {
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n4;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const float4 v = reinterpret_cast<const float4*>(x)[i];
    const float f[4] = {v.x, v.y, v.z, v.w};
    u16 h[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) h[j] = BF16 ? f32_to_bf16(f[j]) : f32_to_half(f[j]);
    reinterpret_cast<uint2*>(out)[i] = make_uint2(h[0] | (static_cast<unsigned>(h[1]) << 16),
                                                  h[2] | (static_cast<unsigned>(h[3]) << 16));
  }
}
extern "C" __global__ void to_f16(const float* x, long long n4, u16* out) {
  convert<false>(x, n4, out);
}
extern "C" __global__ void to_bf16(const float* x, long long n4, u16* out) {
  convert<true>(x, n4, out);
}

// y[t][o] (rows ldy apart) = the sum of a cut product's parts, p[s][t][o] for s < parts (p dense,
// [parts, n_tokens, n_out]).
extern "C" __global__ void sum_parts(const float* __restrict__ p, int parts, long long n_out,
                                     long long n_tokens, float* __restrict__ y, long long ldy) {
  const long long n = n_out * n_tokens;
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    float acc = p[i];
    for (int s = 1; s < parts; ++s) acc += p[s * n + i];
    y[(i / n_out) * ldy + i % n_out] = acc;
  }
}
// As sum_parts, four outputs a thread (n_out and ldy multiples of 4, p and y 16-byte aligned).
extern "C" __global__ void sum_parts4(const float4* __restrict__ p, int parts, long long n_out4,
                                      long long n_tokens, float* __restrict__ y, long long ldy) {
  const long long n = n_out4 * n_tokens;
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    float4 acc = p[i];
    for (int s = 1; s < parts; ++s) {
      const float4 v = p[s * n + i];
      acc.x += v.x;
      acc.y += v.y;
      acc.z += v.z;
      acc.w += v.w;
    }
    reinterpret_cast<float4*>(y + (i / n_out4) * ldy)[i % n_out4] = acc;
  }
}

// Rows [first, first + n_rows) of a weight (rows row_bytes apart, n_in elements each, a multiple of
// the block) as f16 into out [n_rows, n_in]: a thread per 32-element chunk, written as four 16-byte
// stores.
template <int T>
__device__ __forceinline__ void dequantize_rows(const u8* __restrict__ w, long long row_bytes,
                                                int n_in, long long first, int n_rows,
                                                u16* __restrict__ out) {
  const int n_chunks = n_in / 32;
  const long long total = static_cast<long long>(n_rows) * n_chunks;
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const long long r = i / n_chunks;
    const int c = static_cast<int>(i % n_chunks);
    float v[32];
    load_chunk<T>(w + (first + r) * row_bytes, c, n_in, v);
    uint4* dst = reinterpret_cast<uint4*>(out + r * n_in + 32 * c);
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      unsigned p[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        p[j] = f32_to_half(v[8 * q + 2 * j]) |
               (static_cast<unsigned>(f32_to_half(v[8 * q + 2 * j + 1])) << 16);
      }
      dst[q] = make_uint4(p[0], p[1], p[2], p[3]);
    }
  }
}

// Elements [8 e, 8 e + 8) of a row of q8_0 / q4_0 / q4_1 blocks in w[0..8): quarter e % 4 of block
// e / 4. q4_0 / q4_1 keep elements 0..15 of a block in the low nibbles of its 16 bytes, 16..31 in
// the high ones.
template <int T>
__device__ __forceinline__ void load_eight(const u8* row, int e, float* w) {
  const int b = e >> 2, part = e & 3;
  if (T == WT_Q8_0) {  // 34 bytes: d (f16), 32 int8; 2-byte aligned
    const u16* p = reinterpret_cast<const u16*>(row + 34 * b);
    const float d = half_to_f32(p[0]);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const u16 q = p[1 + 4 * part + j];
      w[2 * j] = d * static_cast<float>(static_cast<i8>(q & 0xFF));
      w[2 * j + 1] = d * static_cast<float>(static_cast<i8>(q >> 8));
    }
  } else {  // q4_0: 18 bytes (d, 16 of nibbles), d (q - 8); q4_1: 20 bytes (d, m, 16 of nibbles), d
            // q + m
    const u8* blk = row + (T == WT_Q4_0 ? 18 : 20) * b;
    const float d = half_to_f32(ld16(blk));
    const float m = T == WT_Q4_1 ? half_to_f32(ld16(blk + 2)) : 0.0f;
    const u8* qs = blk + (T == WT_Q4_0 ? 2 : 4) + 8 * (part & 1);
    const int shift = part >= 2 ? 4 : 0;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int q = (qs[j] >> shift) & 0xF;
      if (T == WT_Q4_0) {
        w[j] = d * static_cast<float>(q - 8);
      } else {
        w[j] = d * static_cast<float>(q) + m;
      }
    }
  }
}

// As dequantize_rows for the 32-element block types, a thread per 8 elements: a warp's 16-byte
// stores cover 512 contiguous bytes and its loads the blocks under them.
template <int T>
__device__ __forceinline__ void dequantize_rows8(const u8* __restrict__ w, long long row_bytes,
                                                 int n_in, long long first, int n_rows,
                                                 u16* __restrict__ out) {
  const int n8 = n_in / 8;
  const long long total = static_cast<long long>(n_rows) * n8;
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const long long r = i / n8;
    const int e = static_cast<int>(i % n8);
    float v[8];
    load_eight<T>(w + (first + r) * row_bytes, e, v);
    unsigned p[4];
#pragma unroll
    for (int j = 0; j < 4; ++j)
      p[j] = f32_to_half(v[2 * j]) | (static_cast<unsigned>(f32_to_half(v[2 * j + 1])) << 16);
    reinterpret_cast<uint4*>(out + r * n_in)[e] = make_uint4(p[0], p[1], p[2], p[3]);
  }
}

#define DEQUANTIZE_ENTRY(NAME, T)                                                              \
  extern "C" __global__ void NAME(const u8* w, long long row_bytes, int n_in, long long first, \
                                  int n_rows, u16* out) {                                      \
    if (T == WT_Q8_0 || T == WT_Q4_0 || T == WT_Q4_1) {                                        \
      dequantize_rows8<T>(w, row_bytes, n_in, first, n_rows, out);                             \
    } else {                                                                                   \
      dequantize_rows<T>(w, row_bytes, n_in, first, n_rows, out);                              \
    }                                                                                          \
  }
DEQUANTIZE_ENTRY(dequantize_f16_q8_0, WT_Q8_0)
DEQUANTIZE_ENTRY(dequantize_f16_q4_0, WT_Q4_0)
DEQUANTIZE_ENTRY(dequantize_f16_q4_1, WT_Q4_1)
DEQUANTIZE_ENTRY(dequantize_f16_q4_K, WT_Q4_K)
DEQUANTIZE_ENTRY(dequantize_f16_q5_K, WT_Q5_K)
DEQUANTIZE_ENTRY(dequantize_f16_q6_K, WT_Q6_K)
