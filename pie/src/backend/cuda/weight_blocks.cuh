// What the CUDA backend's product sources share (decoder_ops.cu, gemm_ops.cu, matvec_mma_ops.cu): the
// element types, the weight types as tensor::DType numbers them, f16 / bf16 conversions, a 32-element chunk
// of a weight row read in every file type (load_chunk), and the outputs of one small-token product launch.
// NVRTC has no include path here: cuda_sources.cpp's kernel_text() puts this text before each source that
// needs it.

typedef unsigned char u8;
typedef signed char i8;
typedef unsigned short u16;

// Weight types, as tensor::DType numbers them.
#define WT_F32 0
#define WT_F16 1
#define WT_BF16 2
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
__device__ __forceinline__ float bf16_to_f32(u16 h) { return __uint_as_float(static_cast<unsigned>(h) << 16); }
__device__ __forceinline__ u16 ld16(const u8* p) { return static_cast<u16>(p[0] | (p[1] << 8)); }

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

// Elements [32 c, 32 c + 32) of a row of n elements (zeros past n) in w[0..32).
template <int T>
__device__ __forceinline__ void load_chunk(const u8* row, int c, int n, float* w) {
  if (T == WT_F32 || T == WT_F16 || T == WT_BF16) {
#pragma unroll
    for (int j = 0; j < 32; ++j) {
      const int i = 32 * c + j;
      float v = 0.0f;
      if (i < n) {
        if (T == WT_F32) v = reinterpret_cast<const float*>(row)[i];
        if (T == WT_F16) v = half_to_f32(reinterpret_cast<const u16*>(row)[i]);
        if (T == WT_BF16) v = bf16_to_f32(reinterpret_cast<const u16*>(row)[i]);
      }
      w[j] = v;
    }
  } else if (T == WT_Q8_0) {  // 34 bytes: d (f16), 32 int8; 2-byte aligned: read as 17 halfwords
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
    const float d = half_to_f32(static_cast<u16>(dm & 0xFFFF)), m = half_to_f32(static_cast<u16>(dm >> 16));
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
    // 144 (q4_K) or 176 (q5_K) bytes per 256: d, dmin, 12 bytes of scales, [qh 32,] qs 128. Chunk j of the
    // super-block is the low (even j) or high (odd j) nibbles of qs[32 (j / 2) ..], with scale/min j.
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
    // 210 bytes per 256: ql 128, qh 64, scales 16 (int8), d. Chunk j: half h = j / 4 (128 elements), group
    // g = j % 4 of it: ql[64 h + 32 (g & 1) + l] nibble (g >= 2: high), qh[32 h + l] bits 2 g, scales
    // 8 h + 2 g + l / 16.
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

// The outputs of one small-token product launch (the host's pie::cuda::ProductOutputs, product_launch.h, byte
// for byte): output j takes the grid's blocks [first_block[j], first_block[j + 1]).
#define PRODUCT_MAX_OUTS 4
struct ProductOutputs {
  const u8* w[PRODUCT_MAX_OUTS];
  float* y[PRODUCT_MAX_OUTS];
  long long row_bytes[PRODUCT_MAX_OUTS];
  int n_out[PRODUCT_MAX_OUTS];
  int first_block[PRODUCT_MAX_OUTS + 1];
  int count;
};

// The output that block bx of a launch computes.
struct ProductTarget {
  const u8* w;
  long long row_bytes;
  float* y;
  int n_out;
  int first_block;  // the output's first block: block bx takes its rows from (bx - first_block) * rows a block
};
__device__ __forceinline__ ProductTarget product_target(const ProductOutputs& p, int bx) {
  // Static indices only: the parameter block stays in constant memory (a dynamic index would copy it to
  // each thread's local memory).
  ProductTarget t{p.w[0], p.row_bytes[0], p.y[0], p.n_out[0], 0};
#pragma unroll
  for (int j = 1; j < PRODUCT_MAX_OUTS; ++j) {
    if (j < p.count && bx >= p.first_block[j]) {
      t = ProductTarget{p.w[j], p.row_bytes[j], p.y[j], p.n_out[j], p.first_block[j]};
    }
  }
  return t;
}
