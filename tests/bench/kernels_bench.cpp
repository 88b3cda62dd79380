// Google Benchmark of kernels/: matvec per weight type at Llama-3-8B decode shapes on 1 and 2 threads,
// reported as bytes of weights per second, beside a streaming-read baseline run in the same program so
// the ratio to the machine's bandwidth can be read off (BM_read_bandwidth). `orchard bench kernels`
// prints that ratio directly; this program is for perf/VTune sessions and regression tracking.
//
//   build/tests/bench/kernels_bench --benchmark_filter='matvec/q8_0' --benchmark_min_time=0.5
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/gemm.h"
#include "kernels/matmul.h"
#include "kernels/quant.h"
#include "tensor/dtype.h"
#include "tensor/tensor.h"
#include "tensor/thread_pool.h"

namespace {

using tensor::DType;

constexpr DType kTypes[] = {DType::f16,  DType::bf16, DType::q8_0, DType::q4_0, DType::q4_1,
                            DType::q5_0, DType::q5_1, DType::q4_K, DType::q5_K, DType::q6_K};

tensor::ThreadPool& pool_of(int threads) {
  static tensor::ThreadPool one(1), two(2);
  return threads == 1 ? one : two;
}

// Weights quantized from a repeating pattern of random rows (quantizing 58M distinct floats with the
// K-type search would take longer than the benchmark).
std::vector<unsigned char> make_weights(DType t, std::int64_t n_out, std::int64_t n_in) {
  const std::size_t row = tensor::row_bytes(t, n_in);
  std::vector<unsigned char> w(row * static_cast<std::size_t>(n_out));
  constexpr int kPattern = 16;
  std::vector<float> f(static_cast<std::size_t>(n_in));
  std::uint32_t s = 12345;
  for (int p = 0; p < kPattern; ++p) {
    for (float& v : f) {
      s = s * 1664525u + 1013904223u;
      v = static_cast<float>(static_cast<std::int32_t>(s >> 8) % 2001 - 1000) * 1e-4f;
    }
    kernels::quantize_row_ref(t, f.data(), w.data() + static_cast<std::size_t>(p) * row, n_in);
  }
  for (std::int64_t r = kPattern; r < n_out; ++r) {
    std::memcpy(w.data() + static_cast<std::size_t>(r) * row, w.data() + static_cast<std::size_t>(r % kPattern) * row, row);
  }
  return w;
}

void BM_matvec(benchmark::State& state) {
  const DType t = kTypes[state.range(0)];
  const std::int64_t n_out = state.range(1), n_in = state.range(2);
  const int threads = static_cast<int>(state.range(3));
  const std::vector<unsigned char> w = make_weights(t, n_out, n_in);
  const kernels::MatmulParams p{t, w.data(), 0, n_out, n_in};
  std::vector<float> x(static_cast<std::size_t>(n_in), 0.25f), y(static_cast<std::size_t>(n_out));
  // Check before timing: the fast result on the first rows against the reference.
  kernels::MatmulParams head = p;
  head.n_out = 16;
  std::vector<float> want(16);
  kernels::matvec_ref(head, x.data(), want.data());
  kernels::matvec(p, x.data(), y.data(), &pool_of(threads));
  for (int i = 0; i < 16; ++i) {
    if (std::fabs(want[i] - y[i]) > 1e-3f * (1.0f + std::fabs(want[i]))) {
      state.SkipWithError("fast matvec disagrees with the reference");
      return;
    }
  }
  // A decode step streams every layer once: cycle through copies spanning >= 256 MiB (8x the L3 of the
  // test machine) so each call reads its weights from DRAM, not from the last-level cache.
  const std::size_t n_copies = std::max<std::size_t>(2, ((std::size_t{256} << 20) + w.size() - 1) / w.size());
  std::vector<std::vector<unsigned char>> copies(n_copies, w);
  std::size_t next = 0;
  kernels::MatmulParams q = p;
  for (auto _ : state) {
    q.w = copies[next].data();
    next = next + 1 == n_copies ? 0 : next + 1;
    kernels::matvec(q, x.data(), y.data(), &pool_of(threads));
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(w.size()));
  state.SetLabel(std::string(tensor::dtype_name(t)) + " threads " + std::to_string(threads));
}

void matvec_args(benchmark::internal::Benchmark* b) {
  for (int ti = 0; ti < static_cast<int>(std::size(kTypes)); ++ti) {
    for (auto shape : {std::pair{4096, 4096}, std::pair{14336, 4096}, std::pair{4096, 14336}}) {
      for (int threads : {1, 2}) b->Args({ti, shape.first, shape.second, threads});
    }
  }
}
BENCHMARK(BM_matvec)->Apply(matvec_args)->UseRealTime()->Unit(benchmark::kMicrosecond);

// Prefill / batched decode: y [tokens, n_out] = x W^T at TinyLlama-1.1B shapes (ff 5632 x 2048 and back)
// and SmolLM2-135M's (ff 1536 x 576 and back), reported as tokens per second through the one matrix and as
// multiply-adds per second. Compute-bound for the quantized types from a handful of tokens on.
//
//   build/tests/bench/kernels_bench --benchmark_filter='matmul/'
void BM_matmul(benchmark::State& state) {
  const DType t = kTypes[state.range(0)];
  const std::int64_t n_out = state.range(1), n_in = state.range(2), n_tokens = state.range(3);
  const int threads = static_cast<int>(state.range(4));
  const std::vector<unsigned char> w = make_weights(t, n_out, n_in);
  const kernels::MatmulParams p{t, w.data(), 0, n_out, n_in};
  std::vector<float> x(static_cast<std::size_t>(n_in * n_tokens)), y(static_cast<std::size_t>(n_out * n_tokens));
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(static_cast<int>(i * 7919 % 2001) - 1000) * 1e-3f;
  // Check before timing: every token's first rows against the reference.
  kernels::matmul(p, x.data(), n_tokens, y.data(), &pool_of(threads));
  kernels::MatmulParams head = p;
  head.n_out = 16;
  std::vector<float> want(16);
  for (std::int64_t tok = 0; tok < n_tokens; ++tok) {
    kernels::matvec_ref(head, x.data() + tok * n_in, want.data());
    for (int i = 0; i < 16; ++i) {
      if (std::fabs(want[i] - y[tok * n_out + i]) > 1e-3f * (1.0f + std::fabs(want[i]))) {
        state.SkipWithError("fast matmul disagrees with the reference");
        return;
      }
    }
  }
  for (auto _ : state) {
    kernels::matmul(p, x.data(), n_tokens, y.data(), &pool_of(threads));
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.counters["tok/s"] =
      benchmark::Counter(static_cast<double>(state.iterations() * n_tokens), benchmark::Counter::kIsRate);
  state.counters["MAC/s"] = benchmark::Counter(static_cast<double>(state.iterations() * n_tokens * n_out * n_in),
                                               benchmark::Counter::kIsRate);
  state.SetLabel(std::string(tensor::dtype_name(t)) + " tokens " + std::to_string(n_tokens) + " threads " +
                 std::to_string(threads));
}

void matmul_args(benchmark::internal::Benchmark* b) {
  for (int ti = 0; ti < static_cast<int>(std::size(kTypes)); ++ti) {
    for (auto shape : {std::pair{5632, 2048}, std::pair{2048, 5632}, std::pair{1536, 576}, std::pair{576, 1536}}) {
      if (shape.second % tensor::block_size(kTypes[ti]) != 0) continue;  // 576 holds no 256-element K block
      for (int tokens : {1, 4, 16, 64}) {
        for (int threads : {1, 2}) b->Args({ti, shape.first, shape.second, tokens, threads});
      }
    }
  }
}
BENCHMARK(BM_matmul)->Apply(matmul_args)->UseRealTime()->Unit(benchmark::kMicrosecond);

// An encoder's batch: all-MiniLM-L6-v2's products (q/k/v as one [1152, 384], the output [384, 384], up
// [1536, 384] and down [384, 1536]) for 480 tokens, on one thread, as multiply-adds per second: the packed
// f32 gemm (kernels/gemm.h, mode 0) beside matmul over the same weights in f16 (mode 1, the encoder's
// products before gemm), in the same program.
//
//   build/tests/bench/kernels_bench --benchmark_filter='gemm/'
void BM_gemm(benchmark::State& state) {
  const std::int64_t n_out = state.range(0), n_in = state.range(1), n_tokens = 480;
  const bool packed = state.range(2) == 0;
  std::vector<float> wf(static_cast<std::size_t>(n_out * n_in));
  for (std::size_t i = 0; i < wf.size(); ++i) wf[i] = static_cast<float>(static_cast<int>(i * 104729 % 2001) - 1000) * 1e-4f;
  const std::vector<unsigned char> w16 = [&] {
    std::vector<unsigned char> w(tensor::row_bytes(DType::f16, n_in) * static_cast<std::size_t>(n_out));
    kernels::quantize_row_ref(DType::f16, wf.data(), w.data(), n_out * n_in);
    return w;
  }();
  const kernels::PackedMatrix pm = kernels::PackedMatrix::pack({DType::f32, wf.data(), 0, n_out, n_in});
  const kernels::MatmulParams p16{DType::f16, w16.data(), 0, n_out, n_in};
  std::vector<float> x(static_cast<std::size_t>(n_in * n_tokens)), y(static_cast<std::size_t>(n_out * n_tokens));
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(static_cast<int>(i * 7919 % 2001) - 1000) * 1e-3f;
  for (auto _ : state) {
    if (packed) {
      kernels::gemm(pm, x.data(), n_tokens, y.data(), {}, nullptr);
    } else {
      kernels::matmul(p16, x.data(), n_tokens, y.data(), nullptr);
    }
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.counters["MAC/s"] = benchmark::Counter(static_cast<double>(state.iterations() * n_tokens * n_out * n_in),
                                               benchmark::Counter::kIsRate);
  state.SetLabel(packed ? "gemm f32 packed" : "matmul f16");
}
BENCHMARK(BM_gemm)
    ->ArgsProduct({{1152}, {384}, {0, 1}})
    ->ArgsProduct({{384}, {384}, {0, 1}})
    ->ArgsProduct({{1536}, {384}, {0, 1}})
    ->ArgsProduct({{384}, {1536}, {0, 1}})
    ->Unit(benchmark::kMillisecond);

// The limit: streaming reads of 512 MiB (16x the L3) split over the threads.
void BM_read_bandwidth(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  constexpr std::size_t kFloats = std::size_t{128} << 20;
  static std::vector<float> buf(kFloats, 1.0f);
  std::vector<float> partial(static_cast<std::size_t>(threads));
  for (auto _ : state) {
    pool_of(threads).run([&](int t, int n) {
      const std::size_t begin = kFloats / static_cast<std::size_t>(n) * static_cast<std::size_t>(t);
      const std::size_t end = begin + kFloats / static_cast<std::size_t>(n);
      float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
      for (std::size_t i = begin; i < end; i += 4) {
        s0 += buf[i];
        s1 += buf[i + 1];
        s2 += buf[i + 2];
        s3 += buf[i + 3];
      }
      partial[static_cast<std::size_t>(t)] = s0 + s1 + s2 + s3;
    });
    benchmark::DoNotOptimize(partial.data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(kFloats * sizeof(float)));
}
BENCHMARK(BM_read_bandwidth)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
