// The CUDA backend's nf4 kernels (tensor::DType::nf4: bitsandbytes' NF4 in 36-byte blocks of 64, an f32
// absmax then 32 bytes of codes, element 2i in the HIGH nibble of byte i; docs/nf4.md), compiled at run time
// by NVRTC beside decoder_ops.cu, whose matmul_* / embed_* entries these mirror: same arguments, same grid
// and block, the backend picks them by the weight type's suffix.
//
// Batch invariance as there: a row's dot for token t is the same lanes over the same chunks whatever the
// other tokens.

typedef unsigned char u8;

#define TOKENS 8  // decoder_ops.cu's TOKENS and WARPS (the backend launches every product alike)
#define WARPS 4

// kernels::nf4_levels(): bitsandbytes' get_4bit_type("nf4") as float32.
__constant__ float kNf4Levels[16] = {
    -1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f, -0.28444138169288635f,
    -0.18477343022823334f, -0.09105003625154495f, 0.0f, 0.07958029955625534f, 0.16093020141124725f,
    0.24611230194568634f, 0.33791524171829224f, 0.44070982933044434f, 0.5626170039176941f,
    0.7229568362236023f, 1.0f};

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// The levels in shared memory: lanes pick different levels at once (constant memory would serialize them).
__device__ __forceinline__ void load_levels(float* levels) {
  if (threadIdx.x < 16) levels[threadIdx.x] = kNf4Levels[threadIdx.x];
  __syncthreads();
}

// Elements [32 c, 32 c + 32) of a row: half c % 2 of block c / 2, read as words (blocks are 4-byte aligned),
// each level[q] * absmax (one product: bitsandbytes' dequantization, bit for bit).
__device__ __forceinline__ void load_chunk(const u8* row, int c, const float* levels, float* w) {
  const unsigned* b = reinterpret_cast<const unsigned*>(row + 36 * (c >> 1));
  const float absmax = __uint_as_float(__ldg(b));
  const unsigned* q = b + 1 + 4 * (c & 1);
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const unsigned word = __ldg(q + k);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const unsigned byte = (word >> (8 * j)) & 0xFF;
      w[8 * k + 2 * j] = levels[byte >> 4] * absmax;
      w[8 * k + 2 * j + 1] = levels[byte & 0xF] * absmax;
    }
  }
}

// y[t][o] = sum_i W[o][i] x[t][i]: a warp per output row o and TOKENS tokens; lane l takes chunks l, l + 32,
// ... of the row (n_in a multiple of 64), dequantized once for all the tokens; the warp sums the lanes.
extern "C" __global__ void __launch_bounds__(WARPS * 32) matmul_nf4(const u8* w, long long row_bytes, int n_out,
                                                                    int n_in, const float* x, int n_tokens,
                                                                    float* y) {
  __shared__ float levels[16];
  load_levels(levels);
  const int lane = threadIdx.x & 31;
  const int o = blockIdx.x * WARPS + (threadIdx.x >> 5);
  const int t0 = blockIdx.y * TOKENS;
  if (o >= n_out) return;
  const u8* row = w + row_bytes * o;
  const int n_chunks = n_in / 32;
  float acc[TOKENS];
#pragma unroll
  for (int t = 0; t < TOKENS; ++t) acc[t] = 0.0f;
  for (int c = lane; c < n_chunks; c += 32) {
    float wv[32];
    load_chunk(row, c, levels, wv);
#pragma unroll
    for (int t = 0; t < TOKENS; ++t) {
      if (t0 + t < n_tokens) {
        const float4* xr = reinterpret_cast<const float4*>(x + static_cast<long long>(t0 + t) * n_in + 32 * c);
        float s = 0.0f;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const float4 v = xr[j];
          s += wv[4 * j] * v.x + wv[4 * j + 1] * v.y + wv[4 * j + 2] * v.z + wv[4 * j + 3] * v.w;
        }
        acc[t] += s;
      }
    }
  }
#pragma unroll
  for (int t = 0; t < TOKENS; ++t) {
    const float s = warp_sum(acc[t]);
    if (lane == 0 && t0 + t < n_tokens) y[static_cast<long long>(t0 + t) * n_out + o] = s;
  }
}

// out[t] = table[tokens[t]]: a block per token, a thread per chunk of 32.
extern "C" __global__ void embed_nf4(const u8* table, long long row_bytes, int n_embd, const int* tokens, float* out) {
  __shared__ float levels[16];
  load_levels(levels);
  const int t = blockIdx.x;
  const u8* row = table + row_bytes * tokens[t];
  float* o = out + static_cast<long long>(t) * n_embd;
  for (int c = threadIdx.x; c < n_embd / 32; c += blockDim.x) {
    float wv[32];
    load_chunk(row, c, levels, wv);
    for (int j = 0; j < 32; ++j) o[32 * c + j] = wv[j];
  }
}
