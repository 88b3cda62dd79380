// The CUDA benchmark: measures the machine's limits (device-to-device copy bandwidth; cuBLAS bf16 GEMM
// rate on random data), then every Orchard CUDA kernel as a fraction of them. One JSON object per line on
// stdout: kernel, dtype, shape, value, unit, limit, fraction (and time_us). `--check` first runs the
// kernel lab (tests/cuda/cuda_lab.h) and prints one line per case. scripts/bench-cuda.sh runs this and the
// PyTorch peer (sdpa_peer.py) and merges peer_value into the lines.
//
//   orchard_bench_cuda [--check] [--no-bench] [--seed N] [--reps N] [--only KERNEL]
#include <cublas_v2.h>
#include <kernels/cuda/bitmask_cuda.h>
#include <pal/cuda/attention_cuda.h>
#include <pal/cuda/kv_write_cuda.h>
#include <tensor/cuda/device.h>
#include <tensor/cuda/jit.h>
#include <tensor/cuda/memory_pool.h>
#include <tensor/cuda/stream.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cuda_lab.h"

namespace {

namespace tc = tensor::cuda;
using tc::DeviceBuffer;
using tc::MemoryPool;

int g_reps = 15;
std::string g_only;  // --only: run the kernels whose name contains this (the limits always run)

bool want(const char* kernel) { return g_only.empty() || std::string(kernel).find(g_only) != std::string::npos; }

// Random fills on the device (a hash of the index: never zeros, never the same twice for another seed).
constexpr const char* kFillSource = R"(
__device__ unsigned hash32(unsigned long long x) {
  x ^= x >> 33; x *= 0xff51afd7ed558ccdULL; x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ULL; x ^= x >> 33;
  return (unsigned)x;
}
__device__ float uniform_pm1(unsigned long long i, unsigned seed) {
  return (hash32(i * 0x9e3779b97f4a7c15ULL + seed) >> 8) * (2.0f / 16777216.0f) - 1.0f;
}
extern "C" __global__ void fill16(unsigned short* x, long long n, unsigned seed, int bf16) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    const float f = uniform_pm1(i, seed) * 2.0f;
    unsigned short b;
    if (bf16) { unsigned u = __float_as_uint(f); b = (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16); }
    else { asm("cvt.rn.f16.f32 %0, %1;" : "=h"(b) : "f"(f)); }
    x[i] = b;
  }
}
extern "C" __global__ void fill32(float* x, long long n, unsigned seed) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    x[i] = uniform_pm1(i, seed) * 2.0f;
}
extern "C" __global__ void fill_u32(unsigned* x, long long n, unsigned seed) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    x[i] = hash32(i * 0x9e3779b97f4a7c15ULL + seed);
}
)";

unsigned g_seed = 1;

void fill(DeviceBuffer& b, const char* kind, bool bf16 = true) {
  const tc::Module& m = tc::load_module("bench_fill.cu", kFillSource, {});
  long long n = 0;
  unsigned seed = g_seed++ * 2654435761u;
  int is_bf16 = bf16 ? 1 : 0;
  void* p = reinterpret_cast<void*>(b.device_ptr());
  if (std::strcmp(kind, "16") == 0) {
    n = static_cast<long long>(b.bytes() / 2);
    void* args[] = {&p, &n, &seed, &is_bf16};
    m.kernel("fill16").launch({1024, 1, 1}, {256, 1, 1}, 0, nullptr, args);
  } else if (std::strcmp(kind, "f32") == 0) {
    n = static_cast<long long>(b.bytes() / 4);
    void* args[] = {&p, &n, &seed};
    m.kernel("fill32").launch({1024, 1, 1}, {256, 1, 1}, 0, nullptr, args);
  } else {
    n = static_cast<long long>(b.bytes() / 4);
    void* args[] = {&p, &n, &seed};
    m.kernel("fill_u32").launch({1024, 1, 1}, {256, 1, 1}, 0, nullptr, args);
  }
}

template <typename T>
DeviceBuffer upload(const std::vector<T>& v) {
  DeviceBuffer b = MemoryPool::global().allocate(v.size() * sizeof(T));
  b.copy_from_host(v.data(), v.size() * sizeof(T));
  return b;
}

// Median milliseconds of one call of fn: samples of kInner back-to-back calls between two events (so host
// launch overhead overlaps device work, as in a serving loop), after warm-ups.
double time_ms(const tc::Stream& stream, const std::function<void()>& fn, int reps = 0) {
  constexpr int kInner = 10;
  if (reps == 0) reps = g_reps;
  for (int i = 0; i < 3; ++i) fn();
  stream.synchronize();
  std::vector<double> ms;
  tc::Event a, b;
  for (int i = 0; i < reps; ++i) {
    // One untimed call queued ahead of the start event keeps the GPU busy while the host issues the timed
    // ones, so the host's latency to the first launch is not counted as kernel time.
    fn();
    a.record(stream);
    for (int j = 0; j < kInner; ++j) fn();
    b.record(stream);
    b.synchronize();
    ms.push_back(tc::Event::elapsed_ms(a, b) / kInner);
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

void emit(const std::string& kernel, const std::string& dtype, const std::string& shape, double value,
          const char* unit, double limit, double time_ms, const std::string& extra = "") {
  std::printf(
      "{\"kernel\": \"%s\", \"dtype\": \"%s\", \"shape\": \"%s\", \"value\": %.4g, \"unit\": \"%s\", \"limit\": %.4g, "
      "\"fraction\": %.4f, \"time_us\": %.2f%s}\n",
      kernel.c_str(), dtype.c_str(), shape.c_str(), value, unit, limit, value / limit, time_ms * 1e3, extra.c_str());
  std::fflush(stdout);
}

double measure_copy(const tc::Stream& s) {
  const std::size_t bytes = 2ull << 30;
  DeviceBuffer a = MemoryPool::global().allocate(bytes), b = MemoryPool::global().allocate(bytes);
  fill(a, "u32");
  const double ms = time_ms(s, [&] { b.copy_from_device(a, bytes, &s); }, 20);
  const double gbs = 2.0 * bytes / (ms * 1e-3) / 1e9;
  emit("limit_d2d_copy", "u8", "2 GiB", gbs, "GB/s", gbs, ms);
  return gbs;
}

double measure_gemm(const tc::Stream& s) {
  const int n = 8192;
  DeviceBuffer a = MemoryPool::global().allocate(2ull * n * n), b = MemoryPool::global().allocate(2ull * n * n),
               c = MemoryPool::global().allocate(2ull * n * n);
  fill(a, "16");
  fill(b, "16");
  tc::synchronize();
  cublasHandle_t h = nullptr;
  if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) throw std::runtime_error("[bench] cublasCreate failed");
  cublasSetStream(h, static_cast<cudaStream_t>(s.handle()));
  const float alpha = 1.0f, beta = 0.0f;
  cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
  const double ms = time_ms(s, [&] {
    st = cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, a.as<void>(), CUDA_R_16BF, n, b.as<void>(),
                      CUDA_R_16BF, n, &beta, c.as<void>(), CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  }, 20);
  if (st != CUBLAS_STATUS_SUCCESS) throw std::runtime_error("[bench] cublasGemmEx failed: " + std::to_string(st));
  cublasDestroy(h);
  const double tflops = 2.0 * n * n * static_cast<double>(n) / (ms * 1e-3) / 1e12;
  emit("limit_gemm_bf16", "bf16", "8192x8192x8192", tflops, "TFLOP/s", tflops, ms);
  return tflops;
}

// A paged cache with every sequence at `ctx` tokens, pages in a shuffled order.
struct BenchCache {
  DeviceBuffer k, v, indptr, indices, lens;
  pal::PagedKv kv;
  BenchCache(int n_seqs, int ctx, int n_kv_heads, int head_dim, tensor::DType dt) {
    const int pages_per_seq = (ctx + 15) / 16;
    const int n_pages = n_seqs * pages_per_seq;
    const std::size_t elems = static_cast<std::size_t>(n_pages) * 16 * n_kv_heads * head_dim;
    k = MemoryPool::global().allocate(elems * 2);
    v = MemoryPool::global().allocate(elems * 2);
    fill(k, "16", dt == tensor::DType::bf16);
    fill(v, "16", dt == tensor::DType::bf16);
    std::vector<std::int32_t> ind(static_cast<std::size_t>(n_pages)), ptr(n_seqs + 1), ls(n_seqs, ctx);
    std::iota(ind.begin(), ind.end(), 0);
    std::mt19937 rng(7);
    std::shuffle(ind.begin(), ind.end(), rng);
    for (int s = 0; s <= n_seqs; ++s) ptr[s] = s * pages_per_seq;
    indptr = upload(ptr);
    indices = upload(ind);
    lens = upload(ls);
    kv.k_pages = k.as<void>();
    kv.v_pages = v.as<void>();
    kv.dtype = dt;
    kv.n_pages = n_pages;
    kv.n_kv_heads = n_kv_heads;
    kv.head_dim = head_dim;
    kv.n_seqs = n_seqs;
    kv.page_indptr = indptr.as<std::int32_t>();
    kv.page_indices = indices.as<std::int32_t>();
    kv.seq_lens = lens.as<std::int32_t>();
  }
};

// Each variant is (chunk, unroll); (0, 0) is the launcher's default choice, reported without a variant tag.
void bench_decode(const tc::Stream& s, double copy_gbs, int batch, int ctx, int n_q, int n_kv, int d,
                  tensor::DType dt, std::vector<std::pair<int, int>> variants = {{0, 0}}) {
  // unroll > 0 asks for the SIMT kernel with that unroll; otherwise the default (tensor-core) kernel.
  // Consecutive calls rotate over copies of the cache totalling at least kRotateBytes, so that no call finds
  // the previous call's K/V lines in L2 (a single 134 MB cache at batch 1, 32k, is under 3x the L2, and the
  // kernel's evict-first loads let part of it stay there from call to call).
  constexpr double kRotateBytes = 512.0 * 1024 * 1024;
  const double kv_bytes = 2.0 * batch * ctx * n_kv * d * 2.0;
  const int n_caches = std::clamp(static_cast<int>(std::ceil(kRotateBytes / kv_bytes)), 1, 8);
  std::vector<std::unique_ptr<BenchCache>> caches;
  for (int i = 0; i < n_caches; ++i) caches.push_back(std::make_unique<BenchCache>(batch, ctx, n_kv, d, dt));
  const BenchCache& cache = *caches[0];
  int call = 0;
  const std::size_t nq = static_cast<std::size_t>(batch) * n_q * d;
  DeviceBuffer q = MemoryPool::global().allocate(nq * 4), out = MemoryPool::global().allocate(nq * 4);
  fill(q, "f32");
  pal::AttentionParams p;
  p.n_q_heads = n_q;
  p.scale = 1.0f / std::sqrt(static_cast<float>(d));
  const double bytes = 2.0 * batch * ctx * n_kv * d * 2.0 + 2.0 * nq * 4;
  const std::string dts = dt == tensor::DType::bf16 ? "bf16" : "f16";
  const std::string shape = "batch=" + std::to_string(batch) + " ctx=" + std::to_string(ctx) + " q_heads=" +
                            std::to_string(n_q) + " kv_heads=" + std::to_string(n_kv) + " head_dim=" + std::to_string(d);
  for (auto [chunk, unroll] : variants) {
    pal::cuda::DecodeTuning t;
    t.chunk = chunk;
    t.unroll = unroll;
    t.simt = unroll > 0;
    if (unroll < 0) {  // a negative "unroll" asks the tensor-core kernel for -unroll stages
      t.unroll = 0;
      t.stages = -unroll;
    }
    const double ms = time_ms(s, [&] {
      pal::cuda::decode_attention(caches[call++ % n_caches]->kv, p, {q.as<float>(), out.as<float>()}, ctx, &s, t);
    });
    const double gbs = bytes / (ms * 1e-3) / 1e9;
    emit("decode_attention", dts, shape, gbs, "GB/s", copy_gbs, ms,
         ", \"caches\": " + std::to_string(n_caches) +
         (chunk == 0 && unroll == 0
             ? ", \"default_chunk\": " + std::to_string(pal::cuda::decode_default_chunk(cache.kv, p, ctx))
             : ", \"variant\": \"chunk=" + std::to_string(chunk) +
                   (unroll > 0 ? " simt unroll=" + std::to_string(unroll)
                               : " mma" + (unroll < 0 ? " stages=" + std::to_string(-unroll) : std::string())) +
                   "\""));
  }
}

void bench_prefill(const tc::Stream& s, double gemm_tflops, int n_seqs, int len, int n_q, int n_kv, int d,
                   tensor::DType dt, std::vector<std::pair<int, int>> variants = {{0, 0}}) {
  BenchCache cache(n_seqs, len, n_kv, d, dt);
  std::vector<std::int32_t> qo(n_seqs + 1);
  for (int i = 0; i <= n_seqs; ++i) qo[i] = i * len;
  DeviceBuffer dqo = upload(qo);
  const std::size_t nq = static_cast<std::size_t>(n_seqs) * len * n_q * d;
  DeviceBuffer q = MemoryPool::global().allocate(nq * 4), out = MemoryPool::global().allocate(nq * 4);
  fill(q, "f32");
  pal::AttentionParams p;
  p.n_q_heads = n_q;
  p.scale = 1.0f / std::sqrt(static_cast<float>(d));
  for (const auto& [warps, rows] : variants) {  // (warps per block, query rows per warp); 0: the default
    pal::cuda::PrefillTuning t;
    t.warps = warps;
    t.rows_per_warp = rows;
    const double ms = time_ms(s, [&] {
      pal::cuda::prefill_attention(cache.kv, p, {dqo.as<std::int32_t>(), q.as<float>(), out.as<float>()}, len, &s, t);
    });
    const double pairs = static_cast<double>(len) * (len + 1) / 2.0;
    const double flops = 4.0 * d * pairs * n_q * n_seqs;
    const double tflops = flops / (ms * 1e-3) / 1e12;
    emit("prefill_attention", dt == tensor::DType::bf16 ? "bf16" : "f16",
         "seqs=" + std::to_string(n_seqs) + " len=" + std::to_string(len) + " causal q_heads=" + std::to_string(n_q) +
             " kv_heads=" + std::to_string(n_kv) + " head_dim=" + std::to_string(d),
         tflops, "TFLOP/s", gemm_tflops, ms,
         warps == 0 && rows == 0 ? ""
                                 : ", \"variant\": \"warps=" + std::to_string(warps == 0 ? 4 : warps) +
                                       " rows_per_warp=" + std::to_string(rows == 0 ? (d <= 128 ? 32 : 16) : rows) +
                                       "\"");
  }
}

void bench_rope(const tc::Stream& s, double copy_gbs, int n_tokens, int n_q, int n_kv, int d) {
  const int n_pages = (n_tokens + 15) / 16;
  const std::size_t nq = static_cast<std::size_t>(n_tokens) * n_q * d, nk = static_cast<std::size_t>(n_tokens) * n_kv * d;
  DeviceBuffer q = MemoryPool::global().allocate(nq * 4), k = MemoryPool::global().allocate(nk * 4),
               v = MemoryPool::global().allocate(nk * 4);
  DeviceBuffer kp = MemoryPool::global().allocate(static_cast<std::size_t>(n_pages) * 16 * n_kv * d * 2),
               vp = MemoryPool::global().allocate(static_cast<std::size_t>(n_pages) * 16 * n_kv * d * 2);
  fill(q, "f32");
  fill(k, "f32");
  fill(v, "f32");
  std::vector<std::int32_t> pos(n_tokens), slots(n_tokens);
  std::iota(pos.begin(), pos.end(), 0);
  std::iota(slots.begin(), slots.end(), 0);
  DeviceBuffer dpos = upload(pos), dslots = upload(slots);
  pal::RopeConfig c;
  c.head_dim = d;
  c.rotary_dim = d;
  c.theta = 500000.0;
  c.scaling = pal::RopeScaling::llama3;
  c.factor = 8.0;
  c.original_max_position = 8192;
  pal::cuda::KvWriteArgs kv{tensor::DType::bf16, n_kv, d, kp.as<void>(), vp.as<void>()};
  const double ms = time_ms(s, [&] {
    pal::cuda::rope_append(c, kv, q.as<float>(), k.as<float>(), v.as<float>(), dpos.as<std::int32_t>(),
                           dslots.as<std::int32_t>(), n_tokens, n_q, &s);
  });
  const double bytes = 2.0 * nq * 4 + 2.0 * nk * 4 + 2.0 * nk * 2 + n_tokens * 8.0;
  const double gbs = bytes / (ms * 1e-3) / 1e9;
  emit("rope_append", "f32->bf16",
       "tokens=" + std::to_string(n_tokens) + " q_heads=" + std::to_string(n_q) + " kv_heads=" + std::to_string(n_kv) +
           " head_dim=" + std::to_string(d) + " llama3",
       gbs, "GB/s", copy_gbs, ms);
}

void bench_bitmask(const tc::Stream& s, double copy_gbs, int rows, int vocab) {
  const int words = (vocab + 31) / 32;
  DeviceBuffer logits = MemoryPool::global().allocate(static_cast<std::size_t>(rows) * vocab * 4),
               mask = MemoryPool::global().allocate(static_cast<std::size_t>(rows) * words * 4);
  fill(logits, "f32");
  fill(mask, "u32");
  const double ms = time_ms(s, [&] {
    kernels::cuda::apply_bitmask(logits.as<float>(), mask.as<std::uint32_t>(), rows, vocab, words, vocab, &s);
  });
  const double bytes = 2.0 * rows * vocab * 4 + rows * words * 4.0;
  const double gbs = bytes / (ms * 1e-3) / 1e9;
  emit("bitmask", "f32", "batch=" + std::to_string(rows) + " vocab=" + std::to_string(vocab), gbs, "GB/s", copy_gbs,
       ms);
}

}  // namespace

int main(int argc, char** argv) {
  bool check = false, bench = true;
  std::uint64_t seed = std::random_device{}();
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--check") check = true;
    else if (a == "--no-bench") bench = false;
    else if (a == "--seed" && i + 1 < argc) seed = std::strtoull(argv[++i], nullptr, 10);
    else if (a == "--reps" && i + 1 < argc) g_reps = std::atoi(argv[++i]);
    else if (a == "--only" && i + 1 < argc) g_only = argv[++i];
    else {
      std::fprintf(stderr, "usage: %s [--check] [--no-bench] [--seed N] [--reps N] [--only KERNEL]\n", argv[0]);
      return 2;
    }
  }
  try {
    if (!tc::available()) {
      std::fprintf(stderr, "orchard_bench_cuda: no usable CUDA GPU: %s\n", tc::unavailable_reason().c_str());
      return 1;
    }
    const auto& info = tc::device_info();
    std::printf("{\"device\": \"%s\", \"sm\": %d, \"sms\": %d, \"memory_gib\": %.1f, \"driver\": %d, \"nvrtc\": \"%s\"}\n",
                info.name.c_str(), info.arch(), info.n_sms, info.total_memory / 1073741824.0, info.driver_version,
                tc::nvrtc_version().c_str());
    int failures = 0;
    if (check) {
      std::printf("{\"check_seed\": %llu}\n", static_cast<unsigned long long>(seed));
      for (const auto& r : orchard::cuda_lab::check_all(seed)) {
        std::printf("{\"check\": \"%s\", \"error\": %.3g, \"tolerance\": %.3g, \"ok\": %s%s%s%s}\n", r.name.c_str(),
                    r.error, r.tolerance, r.ok() ? "true" : "false", r.detail.empty() ? "" : ", \"detail\": \"",
                    r.detail.c_str(), r.detail.empty() ? "" : "\"");
        std::fflush(stdout);
        failures += r.ok() ? 0 : 1;
      }
      std::printf("{\"check_failures\": %d}\n", failures);
    }
    if (bench) {
      tc::Stream s;
      const double copy = measure_copy(s);
      const double gemm = measure_gemm(s);
      MemoryPool::global().trim();
      if (want("decode_attention")) {
        bench_decode(s, copy, 64, 4096, 32, 8, 128, tensor::DType::bf16,
                     {{0, 0}, {512, 0}, {1024, 0}, {2048, 0}, {4096, 0}, {1024, 2}, {4096, 2}, {4096, 4}});
        bench_decode(s, copy, 1, 32768, 32, 8, 128, tensor::DType::bf16,
                     {{0, 0}, {256, 0}, {512, 0}, {1024, 0}, {2048, -3}, {1024, -3}, {4096, -3}, {1024, 2}});
        bench_decode(s, copy, 64, 4096, 32, 8, 128, tensor::DType::f16);
        bench_decode(s, copy, 8, 8192, 32, 8, 128, tensor::DType::bf16);
        bench_decode(s, copy, 64, 4096, 32, 4, 64, tensor::DType::bf16);
        bench_decode(s, copy, 16, 4096, 16, 2, 256, tensor::DType::bf16);
        MemoryPool::global().trim();
      }
      if (want("prefill_attention")) {
        bench_prefill(s, gemm, 8, 2048, 32, 8, 128, tensor::DType::bf16, {{0, 0}, {4, 16}, {8, 0}, {8, 16}});
        bench_prefill(s, gemm, 8, 2048, 32, 8, 128, tensor::DType::f16);
        bench_prefill(s, gemm, 4, 4096, 32, 8, 128, tensor::DType::bf16);
        bench_prefill(s, gemm, 8, 2048, 32, 8, 64, tensor::DType::bf16, {{0, 0}, {4, 16}});
        MemoryPool::global().trim();
      }
      if (want("rope_append")) bench_rope(s, copy, 16384, 32, 8, 128);
      if (want("bitmask")) {
        bench_bitmask(s, copy, 256, 128256);
        bench_bitmask(s, copy, 64, 128256);
      }
      const auto st = tc::jit_stats();
      std::printf("{\"jit_compiles\": %llu, \"jit_disk_hits\": %llu}\n", static_cast<unsigned long long>(st.compiles),
                  static_cast<unsigned long long>(st.disk_hits));
    }
    return failures == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "orchard_bench_cuda: %s\n", e.what());
    return 2;
  }
}
