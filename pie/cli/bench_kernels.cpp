// The limits of `orchard bench kernels` (read bandwidth, FMA peak), the timer and the entry registry.
#include "bench_kernels.h"

#include <immintrin.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>

namespace orchard::cli::bench {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Streams [p, p + n) with 256-bit loads into independent accumulators (integer adds: never the bottleneck),
// prefetching ahead.
__attribute__((target("avx2"))) std::uint64_t read_stream_avx2(const std::byte* p, std::size_t n) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  for (std::size_t i = 0; i + 128 <= n; i += 128) {
    // The same software prefetch distance as the kernels (kernels/src/dot_x86.inl): the limit must be
    // at least as good at streaming as the code it rates.
    _mm_prefetch(reinterpret_cast<const char*>(p + i + 4096), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(p + i + 4096 + 64), _MM_HINT_T0);
    a0 = _mm256_add_epi64(a0, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
    a1 = _mm256_add_epi64(a1, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
    a2 = _mm256_add_epi64(a2, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
    a3 = _mm256_add_epi64(a3, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
  }
  const __m256i s = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
  return static_cast<std::uint64_t>(_mm256_extract_epi64(s, 0) + _mm256_extract_epi64(s, 3));
}

std::uint64_t read_stream_scalar(const std::byte* p, std::size_t n) {
  std::uint64_t a = 0, b = 0;
  for (std::size_t i = 0; i + 16 <= n; i += 16) {
    std::uint64_t x, y;
    std::memcpy(&x, p + i, 8);
    std::memcpy(&y, p + i + 8, 8);
    a += x;
    b += y;
  }
  return a + b;
}

// 12 independent FMA chains per iteration: enough to cover FMA latency x throughput on current cores.
__attribute__((target("avx512f"))) double fma_avx512(std::int64_t iters) {
  __m512 acc[12];
  for (int k = 0; k < 12; ++k) acc[k] = _mm512_set1_ps(static_cast<float>(k));
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  for (std::int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 12
    for (int k = 0; k < 12; ++k) acc[k] = _mm512_fmadd_ps(acc[k], a, b);
  }
  __m512 s = acc[0];
  for (int k = 1; k < 12; ++k) s = _mm512_add_ps(s, acc[k]);
  float out[16];
  _mm512_storeu_ps(out, s);
  return static_cast<double>(out[0] + out[15]);
}

__attribute__((target("avx2,fma"))) double fma_avx2(std::int64_t iters) {
  __m256 acc[12];
  for (int k = 0; k < 12; ++k) acc[k] = _mm256_set1_ps(static_cast<float>(k));
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  for (std::int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 12
    for (int k = 0; k < 12; ++k) acc[k] = _mm256_fmadd_ps(acc[k], a, b);
  }
  __m256 s = acc[0];
  for (int k = 1; k < 12; ++k) s = _mm256_add_ps(s, acc[k]);
  float out[8];
  _mm256_storeu_ps(out, s);
  return static_cast<double>(out[0] + out[7]);
}

}  // namespace

std::vector<Entry>& registry() {
  static std::vector<Entry> entries;
  return entries;
}

double Context::time(tensor::FunctionRef<void()> fn) const {
  fn();  // warm-up (page faults, caches, lazy tables)
  double best = 1e30;
  constexpr int kRepetitions = 5;
  for (int r = 0; r < kRepetitions; ++r) {
    const auto t0 = Clock::now();
    std::int64_t calls = 0;
    double elapsed = 0;
    do {
      fn();
      ++calls;
      elapsed = seconds_since(t0);
    } while (elapsed < min_seconds / kRepetitions);
    best = std::min(best, elapsed / static_cast<double>(calls));
  }
  return best;
}

bool Context::wanted(const std::string& kernel) const {
  if (filter.empty()) return true;
  for (const std::string& f : filter) {
    if (kernel.find(f) != std::string::npos) return true;
  }
  return false;
}

std::size_t streaming_bytes(std::size_t at_least) {
  long l3 = ::sysconf(_SC_LEVEL3_CACHE_SIZE);
  if (l3 <= 0) l3 = 32l << 20;  // unknown: the development machine's 32 MiB
  return std::max(at_least, 4 * static_cast<std::size_t>(l3));
}

Limits measure_limits(tensor::ThreadPool& pool) {
  Limits lim;
  const int n_threads = pool.n_threads();
  // Read bandwidth: 512 MiB (16x the development machine's L3) or 4x the L3, whichever is larger, in whole
  // 2 MiB pages; each thread streams its own slice.
  const std::size_t bytes = (streaming_bytes(std::size_t{512} << 20) + (std::size_t{2} << 20) - 1) &
                            ~((std::size_t{2} << 20) - 1);
  // Same allocation policy as tensor::Buffer::allocate (2 MiB aligned, transparent huge pages), so the
  // kernels and their limit read memory the same way.
  std::unique_ptr<std::byte, decltype(&std::free)> buf(
      static_cast<std::byte*>(std::aligned_alloc(std::size_t{2} << 20, bytes)), &std::free);
  if (!buf) return lim;
  ::madvise(buf.get(), bytes, MADV_HUGEPAGE);
  pool.run([&](int t, int n) {
    const std::size_t begin = bytes / static_cast<std::size_t>(n) * static_cast<std::size_t>(t);
    std::memset(buf.get() + begin, t + 1, bytes / static_cast<std::size_t>(n));  // first touch per thread
  });
  const bool avx2 = __builtin_cpu_supports("avx2");
  std::uint64_t sink[64] = {};
  double best = 1e30;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = Clock::now();
    pool.run([&](int t, int n) {
      const std::size_t slice = bytes / static_cast<std::size_t>(n) / 128 * 128;
      const std::byte* p = buf.get() + slice * static_cast<std::size_t>(t);
      sink[t % 64] += avx2 ? read_stream_avx2(p, slice) : read_stream_scalar(p, slice);
    });
    best = std::min(best, seconds_since(t0));
  }
  lim.read_gbps = static_cast<double>(bytes) / best / 1e9;
  lim.read_bytes = static_cast<std::int64_t>(bytes);

  // FMA peak: 12 chains x vector width x 2 flops per FMA.
  const bool avx512 = __builtin_cpu_supports("avx512f");
  const bool fma = __builtin_cpu_supports("fma") && avx2;
  constexpr std::int64_t kIters = 2'000'000;
  double sink_f[64] = {};
  best = 1e30;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = Clock::now();
    pool.run([&](int t, int) {
      sink_f[t % 64] += avx512 ? fma_avx512(kIters) : fma ? fma_avx2(kIters) : 0.0;
    });
    best = std::min(best, seconds_since(t0));
  }
  const double lanes = avx512 ? 16 : fma ? 8 : 0;
  lim.fma_gflops = 12.0 * lanes * 2.0 * static_cast<double>(kIters) * n_threads / best / 1e9;
  // Keep the sinks observable so the loops are not removed.
  volatile double keep = static_cast<double>(sink[0] + sink[1]) + sink_f[0] + sink_f[1];
  (void)keep;
  return lim;
}

}  // namespace orchard::cli::bench
