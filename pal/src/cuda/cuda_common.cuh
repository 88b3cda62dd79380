// Device helpers shared by the pal CUDA kernels (prepended to each kernel source by the launchers; NVRTC
// compiles them with no toolkit headers). KV elements are f32 when KV_F32 is 1, else 16-bit: bf16 when
// KV_BF16 is 1, else f16. The tensor-core kernels take the 16-bit types only.
#ifndef ORCHARD_PAL_CUDA_COMMON_CUH
#define ORCHARD_PAL_CUDA_COMMON_CUH

#ifndef KV_F32
#define KV_F32 0
#endif
#ifndef KV_BF16
#define KV_BF16 0
#endif

#if KV_F32
typedef float kv_t;
#else
typedef unsigned short kv_t;  // raw bits of one bf16 or f16 element
#endif
#define ORCHARD_LOG2E 1.4426950408889634f
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif
#define ORCHARD_NEG_BIG -1.0e30f  // running-max start: finite, so exp2(m_old - m_new) never sees inf - inf

__device__ __forceinline__ float f16_bits_to_f32(unsigned short h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}

// One 16-bit element of the KV type to f32.
__device__ __forceinline__ float kv_to_f32(unsigned short x) {
#if KV_BF16
  return __uint_as_float(static_cast<unsigned>(x) << 16);
#else
  return f16_bits_to_f32(x);
#endif
}

// The low and high halves of a 32-bit word of two KV elements.
__device__ __forceinline__ void kv2_to_f32(unsigned w, float& lo, float& hi) {
#if KV_BF16
  lo = __uint_as_float(w << 16);
  hi = __uint_as_float(w & 0xffff0000u);
#else
  lo = f16_bits_to_f32(static_cast<unsigned short>(w & 0xffffu));
  hi = f16_bits_to_f32(static_cast<unsigned short>(w >> 16));
#endif
}

// Eight KV elements (16 bytes) to f32.
__device__ __forceinline__ void kv8_to_f32(const uint4& v, float* f) {
  kv2_to_f32(v.x, f[0], f[1]);
  kv2_to_f32(v.y, f[2], f[3]);
  kv2_to_f32(v.z, f[4], f[5]);
  kv2_to_f32(v.w, f[6], f[7]);
}

// Two f32 to a word of two KV elements (round to nearest even): `lo` in the low half.
__device__ __forceinline__ unsigned f32x2_to_kv2(float lo, float hi) {
  unsigned r;
#if KV_BF16
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
#else
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
#endif
  return r;
}

// --- KV elements of any type: loads of eight, stores of one to eight (aligned to their count) ---
#if KV_F32
struct kv8_t {
  float4 lo, hi;
};
__device__ __forceinline__ kv8_t load_kv8(const kv_t* p) {
  const float4* v = reinterpret_cast<const float4*>(p);
  return {__ldg(v), __ldg(v + 1)};
}
__device__ __forceinline__ kv8_t kv8_zero() {
  return {make_float4(0.f, 0.f, 0.f, 0.f), make_float4(0.f, 0.f, 0.f, 0.f)};
}
__device__ __forceinline__ void kv8_to_f32(const kv8_t& v, float* f) {
  f[0] = v.lo.x; f[1] = v.lo.y; f[2] = v.lo.z; f[3] = v.lo.w;
  f[4] = v.hi.x; f[5] = v.hi.y; f[6] = v.hi.z; f[7] = v.hi.w;
}
__device__ __forceinline__ kv_t f32_to_kv(float x) { return x; }
__device__ __forceinline__ void store_kv2(kv_t* d, float a, float b) {
  *reinterpret_cast<float2*>(d) = make_float2(a, b);
}
__device__ __forceinline__ void store_kv4(kv_t* d, const float4& v) { *reinterpret_cast<float4*>(d) = v; }
__device__ __forceinline__ void store_kv8(kv_t* d, const float4& a, const float4& b) {
  reinterpret_cast<float4*>(d)[0] = a;
  reinterpret_cast<float4*>(d)[1] = b;
}
#else
typedef uint4 kv8_t;
__device__ __forceinline__ kv8_t load_kv8(const kv_t* p) { return __ldg(reinterpret_cast<const uint4*>(p)); }
__device__ __forceinline__ kv8_t kv8_zero() { return make_uint4(0, 0, 0, 0); }
__device__ __forceinline__ kv_t f32_to_kv(float x) {
  return static_cast<unsigned short>(f32x2_to_kv2(x, 0.0f) & 0xffffu);
}
__device__ __forceinline__ void store_kv2(kv_t* d, float a, float b) {
  *reinterpret_cast<unsigned*>(d) = f32x2_to_kv2(a, b);
}
__device__ __forceinline__ void store_kv4(kv_t* d, const float4& v) {
  *reinterpret_cast<uint2*>(d) = make_uint2(f32x2_to_kv2(v.x, v.y), f32x2_to_kv2(v.z, v.w));
}
__device__ __forceinline__ void store_kv8(kv_t* d, const float4& a, const float4& b) {
  *reinterpret_cast<uint4*>(d) =
      make_uint4(f32x2_to_kv2(a.x, a.y), f32x2_to_kv2(a.z, a.w), f32x2_to_kv2(b.x, b.y), f32x2_to_kv2(b.z, b.w));
}
#endif

// --- shared memory, cp.async, tensor-core fragments (sm_80+) ---

__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
  const int n = valid ? 16 : 0;  // 0: fill the 16 bytes with zeros
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(n));
}
// A hint to bring the BYTES bytes at p (a multiple of 128, from a 128-byte boundary) into L2, one line per
// instruction; nothing is read into registers, and nothing waits for it. (The bulk prefetch of sm_90 takes
// its address in a uniform register: per-lane addresses would be issued one lane at a time.)
template <int BYTES>
__device__ __forceinline__ void prefetch_l2(const void* p) {
#pragma unroll
  for (int i = 0; i < BYTES; i += 128) {
    asm volatile("prefetch.global.L2 [%0];\n" ::"l"(static_cast<const char*>(p) + i) : "memory");
  }
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void mma16816(float* c, const unsigned* a, const unsigned* b) {
#if KV_BF16
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

__device__ __forceinline__ void ldmatrix_x4(unsigned* r, const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}

__device__ __forceinline__ void ldmatrix_x4_trans(unsigned* r, const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}

#endif  // ORCHARD_PAL_CUDA_COMMON_CUH
