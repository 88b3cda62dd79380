// The tensor-core products' kernels (gemm.cpp), compiled at run time by NVRTC (no toolkit headers):
// the activations converted to f16 / bf16 for cuBLAS, and slabs of rows of a quantized weight
// expanded to f16 (a scratch that stays in L2 while cuBLAS reads it). The block layouts are
// decoder_ops.cu's load_chunk (the same rules, kept here so that each source compiles on its own).

typedef unsigned char u8;
typedef signed char i8;
typedef unsigned short u16;

// Weight types, as tensor::DType numbers them.
#define WT_Q4_0 3
#define WT_Q4_1 4
#define WT_Q8_0 7
#define WT_Q4_K 10
#define WT_Q5_K 11
#define WT_Q6_K 12

__device__ __forceinline__ float half_to_f32(u16 h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}
__device__ __forceinline__ u16 f32_to_half(float f) {
  u16 h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}
__device__ __forceinline__ u16 f32_to_bf16(float f) {
  u16 h;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}
__device__ __forceinline__ u16 ld16(const u8* p) { return static_cast<u16>(p[0] | (p[1] << 8)); }

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

// The 6-bit scale and min of sub-block j (0..7) of a q4_K / q5_K super-block.
__device__ __forceinline__ void scale_min_k4(int j, const u8* q, float& d, float& m) {
  if (j < 4) {
    d = static_cast<float>(q[j] & 63);
    m = static_cast<float>(q[j + 4] & 63);
  } else {
    d = static_cast<float>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    m = static_cast<float>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// Elements [32 c, 32 c + 32) of a row in w[0..32).
template <int T>
__device__ __forceinline__ void load_chunk(const u8* row, int c, float* w) {
  if (T == WT_Q8_0) {  // 34 bytes: d (f16), 32 int8; 2-byte aligned: read as 17 halfwords
    const u16* b = reinterpret_cast<const u16*>(row + 34 * c);
    const float d = half_to_f32(b[0]);
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      const u16 q = b[1 + j];
      w[2 * j] = d * static_cast<float>(static_cast<i8>(q & 0xFF));
      w[2 * j + 1] = d * static_cast<float>(static_cast<i8>(q >> 8));
    }
  } else if (T == WT_Q4_0) {  // 18 bytes: d, 16 bytes of nibbles (low: 0..15, high: 16..31), q - 8
    const u16* b = reinterpret_cast<const u16*>(row + 18 * c);
    const float d = half_to_f32(b[0]);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const u16 q = b[1 + j];
      w[2 * j] = d * static_cast<float>((q & 0xF) - 8);
      w[2 * j + 1] = d * static_cast<float>(((q >> 8) & 0xF) - 8);
      w[2 * j + 16] = d * static_cast<float>(((q >> 4) & 0xF) - 8);
      w[2 * j + 17] = d * static_cast<float>((q >> 12) - 8);
    }
  } else if (T == WT_Q4_1) {  // 20 bytes: d, m, 16 bytes of nibbles; d q + m; 4-byte aligned
    const unsigned* b = reinterpret_cast<const unsigned*>(row + 20 * c);
    const unsigned dm = b[0];
    const float d = half_to_f32(static_cast<u16>(dm & 0xFFFF)),
                m = half_to_f32(static_cast<u16>(dm >> 16));
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const unsigned q = b[1 + j];
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        w[4 * j + k] = d * static_cast<float>((q >> (8 * k)) & 0xF) + m;
        w[4 * j + k + 16] = d * static_cast<float>((q >> (8 * k + 4)) & 0xF) + m;
      }
    }
  } else if (T == WT_Q4_K || T == WT_Q5_K) {
    // 144 (q4_K) or 176 (q5_K) bytes per 256: d, dmin, 12 bytes of scales, [qh 32,] qs 128. Chunk j
    // of the super-block is the low (even j) or high (odd j) nibbles of qs[32 (j / 2) ..], with
    // scale/min j.
    const int sb = c >> 3, j = c & 7;
    const u8* b = row + (T == WT_Q4_K ? 144 : 176) * sb;
    const float d = half_to_f32(ld16(b)), dmin = half_to_f32(ld16(b + 2));
    float sc, mn;
    scale_min_k4(j, b + 4, sc, mn);
    const float dl = d * sc, ml = dmin * mn;
    const u8* qs = b + (T == WT_Q4_K ? 16 : 48) + 32 * (j >> 1);
    const int shift = (j & 1) ? 4 : 0;
#pragma unroll
    for (int l = 0; l < 32; ++l) {
      int q = (qs[l] >> shift) & 0xF;
      if (T == WT_Q5_K) q += ((b[16 + l] >> j) & 1) ? 16 : 0;
      w[l] = dl * static_cast<float>(q) - ml;
    }
  } else if (T == WT_Q6_K) {
    // 210 bytes per 256: ql 128, qh 64, scales 16 (int8), d. Chunk j: half h = j / 4 (128
    // elements), group g = j % 4 of it: ql[64 h + 32 (g & 1) + l] nibble (g >= 2: high), qh[32 h +
    // l] bits 2 g, scales 8 h + 2 g + l / 16.
    const int sb = c >> 3, j = c & 7, h = j >> 2, g = j & 3;
    const u8* b = row + 210 * sb;
    const float d = half_to_f32(ld16(b + 208));
    const u8* ql = b + 64 * h + 32 * (g & 1);
    const u8* qh = b + 128 + 32 * h;
    const i8* sc = reinterpret_cast<const i8*>(b + 192) + 8 * h + 2 * g;
    const int lshift = (g >= 2) ? 4 : 0;
#pragma unroll
    for (int l = 0; l < 32; ++l) {
      const int q = (((ql[l] >> lshift) & 0xF) | (((qh[l] >> (2 * g)) & 3) << 4)) - 32;
      w[l] = d * static_cast<float>(sc[l / 16]) * static_cast<float>(q);
    }
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
    load_chunk<T>(w + (first + r) * row_bytes, c, v);
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
