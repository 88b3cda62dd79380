// Google Benchmark of the attention lab: paged decode attention (context 512..32k, 32/8 heads, head dim
// 128, f16 and f32 KV), chunked prefill, and RoPE, each beside a streaming-read peer measured in the same
// binary (BM_ReadBandwidth) so the bytes/s figures can be read as a fraction of the machine's bandwidth.
// Each benchmark checks its kernel against the reference before timing.
//
//   build-<dir>/tests/bench/attention_bench --benchmark_filter=Decode
#include <benchmark/benchmark.h>
#include <pal/attention.h>
#include <pal/rope.h>
#include <tensor/half.h>
#include <tensor/thread_pool.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <stdexcept>
#include <vector>

namespace {

struct Cache {
  std::vector<std::uint16_t> k16, v16;
  std::vector<float> k32, v32;
  std::vector<std::int32_t> indptr, indices, lens;
  pal::PagedKv kv;
};

Cache make_cache(int n_seqs, int ctx, int n_kv_heads, int head_dim, tensor::DType dtype) {
  std::mt19937 rng(1);
  Cache c;
  const int pages_per_seq = (ctx + pal::kPageSize - 1) / pal::kPageSize;
  const int n_pages = n_seqs * pages_per_seq;
  const std::size_t n = static_cast<std::size_t>(n_pages) * pal::kPageSize * n_kv_heads * head_dim;
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  if (dtype == tensor::DType::f16) {
    c.k16.resize(n);
    c.v16.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
      c.k16[i] = tensor::f32_to_f16(dist(rng));
      c.v16[i] = tensor::f32_to_f16(dist(rng));
    }
    c.kv.k_pages = c.k16.data();
    c.kv.v_pages = c.v16.data();
  } else {
    c.k32.resize(n);
    c.v32.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
      c.k32[i] = dist(rng);
      c.v32[i] = dist(rng);
    }
    c.kv.k_pages = c.k32.data();
    c.kv.v_pages = c.v32.data();
  }
  c.indices.resize(static_cast<std::size_t>(n_pages));
  std::iota(c.indices.begin(), c.indices.end(), 0);
  std::shuffle(c.indices.begin(), c.indices.end(), rng);
  for (int s = 0; s <= n_seqs; ++s) c.indptr.push_back(s * pages_per_seq);
  c.lens.assign(static_cast<std::size_t>(n_seqs), ctx);
  c.kv.dtype = dtype;
  c.kv.n_pages = n_pages;
  c.kv.n_kv_heads = n_kv_heads;
  c.kv.head_dim = head_dim;
  c.kv.n_seqs = n_seqs;
  c.kv.page_indptr = c.indptr.data();
  c.kv.page_indices = c.indices.data();
  c.kv.seq_lens = c.lens.data();
  return c;
}

void check_close(const std::vector<float>& want, const std::vector<float>& got) {
  double worst = 0, scale = 1e-30;
  for (float w : want) scale = std::max(scale, static_cast<double>(std::fabs(w)));
  for (std::size_t i = 0; i < want.size(); ++i) worst = std::max(worst, double(std::fabs(got[i] - want[i])));
  if (!(worst / scale <= 1e-4)) throw std::runtime_error("fast kernel differs from the reference");
}

// The peer: streaming reads of 512 MiB (far beyond the last-level cache) on `threads` threads.
void BM_ReadBandwidth(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  tensor::ThreadPool pool(threads);
  constexpr std::size_t kBytes = std::size_t{512} << 20;
  std::vector<std::uint64_t> buf(kBytes / 8, 1);
  std::vector<std::uint64_t> sink(static_cast<std::size_t>(threads) * 8);
  for (auto _ : state) {
    pool.run([&](int t, int n) {
      const std::size_t slice = buf.size() / static_cast<std::size_t>(n);
      const std::uint64_t* p = buf.data() + slice * static_cast<std::size_t>(t);
      std::uint64_t a = 0, b = 0, c = 0, d = 0;
      for (std::size_t i = 0; i + 4 <= slice; i += 4) {
        a += p[i];
        b += p[i + 1];
        c += p[i + 2];
        d += p[i + 3];
      }
      sink[static_cast<std::size_t>(t) * 8] += a + b + c + d;
    });
  }
  benchmark::DoNotOptimize(sink.data());
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(kBytes));
}
BENCHMARK(BM_ReadBandwidth)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);

// args: context, threads, dtype (0 f32, 1 f16), sequences. 32 query heads, 8 KV heads, head dim 128.
// 8 sequences of 4096 tokens are 128 MiB of f16 KV: streamed from memory; 1 of 512 (2 MiB) sits in cache.
void BM_DecodeAttention(benchmark::State& state) {
  const int ctx = static_cast<int>(state.range(0));
  const int threads = static_cast<int>(state.range(1));
  const tensor::DType dtype = state.range(2) ? tensor::DType::f16 : tensor::DType::f32;
  const int kSeqs = static_cast<int>(state.range(3));
  constexpr int kQHeads = 32, kKvHeads = 8, kHeadDim = 128;
  tensor::ThreadPool pool(threads);
  Cache cache = make_cache(kSeqs, ctx, kKvHeads, kHeadDim, dtype);
  pal::AttentionParams p;
  p.n_q_heads = kQHeads;
  p.scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim));
  const std::size_t n = static_cast<std::size_t>(kSeqs) * kQHeads * kHeadDim;
  std::vector<float> q(n, 0.25f), out(n), want(kQHeads * kHeadDim);
  for (std::size_t i = 0; i < n; ++i) q[i] = std::sin(static_cast<float>(i) * 0.1f);
  pal::PagedKv one = cache.kv;
  one.n_seqs = 1;
  pal::decode_attention_ref(one, p, {q.data(), want.data()});
  pal::decode_attention(cache.kv, p, {q.data(), out.data()}, &pool);
  check_close(want, std::vector<float>(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(want.size())));
  for (auto _ : state) {
    pal::decode_attention(cache.kv, p, {q.data(), out.data()}, &pool);
    benchmark::DoNotOptimize(out.data());
  }
  const double kv_bytes = 2.0 * kSeqs * ctx * kKvHeads * kHeadDim * (dtype == tensor::DType::f16 ? 2 : 4);
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * kv_bytes));
}
BENCHMARK(BM_DecodeAttention)
    ->ArgsProduct({{512, 4096, 32768}, {1, 2}, {1}, {8}})
    ->Args({4096, 1, 0, 8})
    ->Args({4096, 2, 0, 8})
    ->Args({512, 1, 1, 1})
    ->Args({512, 1, 0, 1})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// args: new tokens, context, threads. One sequence, 32/8 heads, head dim 128, f16 KV.
void BM_PrefillAttention(benchmark::State& state) {
  const int n_new = static_cast<int>(state.range(0));
  const int ctx = static_cast<int>(state.range(1));
  const int threads = static_cast<int>(state.range(2));
  constexpr int kQHeads = 32, kKvHeads = 8, kHeadDim = 128;
  tensor::ThreadPool pool(threads);
  Cache cache = make_cache(1, ctx, kKvHeads, kHeadDim, tensor::DType::f16);
  pal::AttentionParams p;
  p.n_q_heads = kQHeads;
  p.scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim));
  const std::vector<std::int32_t> qo{0, n_new};
  const std::size_t n = static_cast<std::size_t>(n_new) * kQHeads * kHeadDim;
  std::vector<float> q(n), out(n), want(n);
  for (std::size_t i = 0; i < n; ++i) q[i] = std::sin(static_cast<float>(i) * 0.1f);
  if (n_new <= 64) {
    pal::prefill_attention_ref(cache.kv, p, {qo.data(), q.data(), want.data()});
    pal::prefill_attention(cache.kv, p, {qo.data(), q.data(), out.data()}, &pool);
    check_close(want, out);
  }
  for (auto _ : state) {
    pal::prefill_attention(cache.kv, p, {qo.data(), q.data(), out.data()}, &pool);
    benchmark::DoNotOptimize(out.data());
  }
  double pairs = 0;
  for (int i = 0; i < n_new; ++i) pairs += ctx - n_new + i + 1;
  state.counters["GFLOP/s"] = benchmark::Counter(4.0 * pairs * kQHeads * kHeadDim * 1e-9 *
                                                     static_cast<double>(state.iterations()),
                                                 benchmark::Counter::kIsRate);
}
BENCHMARK(BM_PrefillAttention)
    ->Args({64, 4096, 1})
    ->Args({512, 2048, 1})
    ->Args({512, 2048, 2})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// args: tokens, threads. Llama 3.1 scaling, NeoX, 40 heads (q and k) x 128; the table is cached.
void BM_Rope(benchmark::State& state) {
  const int n_tokens = static_cast<int>(state.range(0));
  tensor::ThreadPool pool(static_cast<int>(state.range(1)));
  constexpr int kHeads = 40, kHeadDim = 128;
  pal::RopeConfig c;
  c.head_dim = kHeadDim;
  c.rotary_dim = kHeadDim;
  c.theta = 500000.0;
  c.scaling = pal::RopeScaling::llama3;
  c.factor = 8.0;
  c.original_max_position = 8192;
  std::vector<std::int32_t> pos(static_cast<std::size_t>(n_tokens));
  std::iota(pos.begin(), pos.end(), 100);
  std::vector<float> x(static_cast<std::size_t>(n_tokens) * kHeads * kHeadDim, 0.5f);
  const auto table = pal::rope_table(c, 100 + n_tokens);
  for (auto _ : state) {
    pal::rope(*table, pos.data(), x.data(), n_tokens, kHeads, &pool);
    benchmark::DoNotOptimize(x.data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * 2 * static_cast<std::int64_t>(x.size()) * 4);
}
BENCHMARK(BM_Rope)->Args({1, 1})->Args({512, 1})->Args({512, 2})->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
