// `orchard bench kernels` entries of the attention lab (pal/): paged decode attention as a fraction of the
// read bandwidth measured in the same run, prefill attention as a fraction of the FMA peak, and RoPE as a
// fraction of the read bandwidth. Every entry checks its kernel against the reference before timing.
#include <fmt/format.h>
#include <pal/attention.h>
#include <pal/rope.h>
#include <tensor/half.h>
#include <tensor/tensor.h>

#include <algorithm>
#include <cstring>
#include <cmath>
#include <numeric>
#include <random>
#include <stdexcept>
#include <vector>

#include "bench_kernels.h"

namespace {

using orchard::cli::bench::Context;
using orchard::cli::bench::Result;

// A paged f16 KV cache of n_seqs sequences of ctx tokens, pages shuffled through the pool as a serving
// cache leaves them. K and V come from tensor::Buffer::allocate, the engine's allocator for large
// buffers, laid out like the read bandwidth limit's buffer (2 MiB aligned, transparent huge pages): the
// kernel reads one head's rows 2 KiB apart, so on 4 KiB pages every page-head of K or V costs TLB misses.
struct Cache {
  tensor::Buffer k, v;  // [n_pages, 16, n_kv_heads, head_dim] f16 each
  std::vector<std::int32_t> indptr, indices, lens;
  pal::PagedKv kv;
};

Cache make_cache(int n_seqs, int ctx, int n_kv_heads, int head_dim, std::mt19937& rng) {
  Cache c;
  const int pages_per_seq = (ctx + pal::kPageSize - 1) / pal::kPageSize;
  const int n_pages = n_seqs * pages_per_seq;
  const std::size_t n = static_cast<std::size_t>(n_pages) * pal::kPageSize * n_kv_heads * head_dim;
  c.k = tensor::Buffer::allocate(n * sizeof(std::uint16_t));
  c.v = tensor::Buffer::allocate(n * sizeof(std::uint16_t));
  auto* k = reinterpret_cast<std::uint16_t*>(c.k.data());
  auto* v = reinterpret_cast<std::uint16_t*>(c.v.data());
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (std::size_t i = 0; i < n; ++i) {
    k[i] = tensor::f32_to_f16(dist(rng));
    v[i] = tensor::f32_to_f16(dist(rng));
  }
  c.indices.resize(static_cast<std::size_t>(n_pages));
  std::iota(c.indices.begin(), c.indices.end(), 0);
  std::shuffle(c.indices.begin(), c.indices.end(), rng);
  for (int s = 0; s <= n_seqs; ++s) c.indptr.push_back(s * pages_per_seq);
  c.lens.assign(static_cast<std::size_t>(n_seqs), ctx);
  c.kv.k_pages = k;
  c.kv.v_pages = v;
  c.kv.dtype = tensor::DType::f16;
  c.kv.n_pages = n_pages;
  c.kv.n_kv_heads = n_kv_heads;
  c.kv.head_dim = head_dim;
  c.kv.n_seqs = n_seqs;
  c.kv.page_indptr = c.indptr.data();
  c.kv.page_indices = c.indices.data();
  c.kv.seq_lens = c.lens.data();
  return c;
}

void expect_close(const std::vector<float>& want, const std::vector<float>& got, const char* what) {
  double worst = 0, scale = 1e-30;
  for (float w : want) scale = std::max(scale, static_cast<double>(std::fabs(w)));
  for (std::size_t i = 0; i < want.size(); ++i) {
    worst = std::max(worst, static_cast<double>(std::fabs(got[i] - want[i])));
  }
  if (!(worst / scale <= 1e-4)) {
    throw std::runtime_error(fmt::format("[bench {}] fast kernel differs from the reference: {:.3g}", what,
                                         worst / scale));
  }
}

// Decode, 32 query heads, 8 KV heads, head dim 128, f16 KV, 8 sequences of `context` tokens. `attention_decode`
// (context 4096: 128 MiB of KV, and copies of it on a machine whose L3 holds that) streams the cache from
// memory, as in serving, rather than from the last-level cache; `attention_decode_cached` (context 32: 1 MiB,
// a share of it per thread) keeps it in L2, so its rate is the kernel's arithmetic ceiling.
void bench_decode_at(const Context& ctx, std::vector<Result>& out, const char* name, int context, bool stream) {
  if (!ctx.wanted(name)) return;
  constexpr int kSeqs = 8, kQHeads = 32, kKvHeads = 8, kHeadDim = 128;
  std::mt19937 rng(42);
  Cache cache = make_cache(kSeqs, context, kKvHeads, kHeadDim, rng);
  pal::AttentionParams p;
  p.n_q_heads = kQHeads;
  p.scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim));
  const std::size_t n = static_cast<std::size_t>(kSeqs) * kQHeads * kHeadDim;
  std::vector<float> q(n), got(n), want(n);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  for (float& x : q) x = dist(rng);
  // Copies of K and V (same page table) cycled through so the timed calls together span 4x the L3 when it
  // holds more than one copy (streaming_bytes): every call then reads its KV from DRAM.
  const std::size_t kv_bytes = cache.k.size() + cache.v.size();
  const std::size_t n_copies =
      stream ? (orchard::cli::bench::streaming_bytes(kv_bytes) + kv_bytes - 1) / kv_bytes : 1;
  std::vector<tensor::Buffer> ks{cache.k}, vs{cache.v};
  for (std::size_t c = 1; c < n_copies; ++c) {
    ks.push_back(tensor::Buffer::allocate(cache.k.size()));
    vs.push_back(tensor::Buffer::allocate(cache.v.size()));
    std::memcpy(ks.back().data(), cache.k.data(), cache.k.size());
    std::memcpy(vs.back().data(), cache.v.data(), cache.v.size());
  }
  {  // check one sequence against the reference (the double reference over all 8 takes seconds)
    pal::PagedKv one = cache.kv;
    one.n_seqs = 1;
    std::vector<float> w1(static_cast<std::size_t>(kQHeads) * kHeadDim), g1(w1.size());
    pal::decode_attention_ref(one, p, {q.data(), w1.data()});
    pal::decode_attention(one, p, {q.data(), g1.data()}, &ctx.pool);
    expect_close(w1, g1, name);
  }
  pal::PagedKv kv = cache.kv;
  std::size_t next = 0;
  const double s = ctx.time([&] {
    kv.k_pages = ks[next].data();
    kv.v_pages = vs[next].data();
    next = next + 1 == n_copies ? 0 : next + 1;
    pal::decode_attention(kv, p, {q.data(), got.data()}, &ctx.pool);
  });
  const double bytes = 2.0 * kSeqs * context * kKvHeads * kHeadDim * sizeof(std::uint16_t) + 2.0 * n * sizeof(float);
  out.push_back({name, "f16", {kSeqs, context, kQHeads, kKvHeads, kHeadDim}, ctx.threads, bytes / s / 1e9, "GB/s",
                 ctx.limits.read_gbps});
}

void bench_decode(const Context& ctx, std::vector<Result>& out) {
  bench_decode_at(ctx, out, "attention_decode", 4096, true);
}
void bench_decode_cached(const Context& ctx, std::vector<Result>& out) {
  bench_decode_at(ctx, out, "attention_decode_cached", 32, false);
}

// Chunked prefill: 512 new tokens after 1536 cached (context 2048), 32/8 heads, head dim 128, f16 KV.
void bench_prefill(const Context& ctx, std::vector<Result>& out) {
  if (!ctx.wanted("attention_prefill")) return;
  constexpr int kCtx = 2048, kNew = 512, kQHeads = 32, kKvHeads = 8, kHeadDim = 128;
  std::mt19937 rng(43);
  Cache cache = make_cache(1, kCtx, kKvHeads, kHeadDim, rng);
  pal::AttentionParams p;
  p.n_q_heads = kQHeads;
  p.scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim));
  const std::vector<std::int32_t> qo{0, kNew};
  const std::size_t n = static_cast<std::size_t>(kNew) * kQHeads * kHeadDim;
  std::vector<float> q(n), got(n);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  for (float& x : q) x = dist(rng);
  {  // check the last 8 query tokens (a prefill of 8 at the same positions) against the reference
    const std::vector<std::int32_t> qo8{0, 8};
    const float* q8 = q.data() + static_cast<std::size_t>(kNew - 8) * kQHeads * kHeadDim;
    std::vector<float> w8(static_cast<std::size_t>(8) * kQHeads * kHeadDim), g8(w8.size());
    pal::prefill_attention_ref(cache.kv, p, {qo8.data(), q8, w8.data()});
    pal::prefill_attention(cache.kv, p, {qo8.data(), q8, g8.data()}, &ctx.pool);
    expect_close(w8, g8, "attention_prefill");
  }
  const double s = ctx.time([&] { pal::prefill_attention(cache.kv, p, {qo.data(), q.data(), got.data()}, &ctx.pool); });
  // Each (query row, visible key) pair: 2 flops per dim for q.k and 2 for p.v.
  double pairs = 0;
  for (int i = 0; i < kNew; ++i) pairs += kCtx - kNew + i + 1;
  const double flops = 4.0 * pairs * kQHeads * kHeadDim;
  out.push_back({"attention_prefill", "f16", {kNew, kCtx, kQHeads, kKvHeads, kHeadDim}, ctx.threads,
                 flops / s / 1e9, "GFLOP/s", ctx.limits.fma_gflops});
}

// RoPE (Llama 3.1 scaling, NeoX) on q and k of a 4096-token prefill, (32 + 8) heads x 128: bytes read + written.
void bench_rope(const Context& ctx, std::vector<Result>& out) {
  if (!ctx.wanted("rope")) return;
  constexpr int kTokens = 4096, kHeads = 40, kHeadDim = 128;  // 80 MiB: streams from memory
  pal::RopeConfig c;
  c.head_dim = kHeadDim;
  c.rotary_dim = kHeadDim;
  c.theta = 500000.0;
  c.scaling = pal::RopeScaling::llama3;
  c.factor = 8.0;
  c.original_max_position = 8192;
  std::vector<std::int32_t> pos(kTokens);
  std::iota(pos.begin(), pos.end(), 3000);
  std::mt19937 rng(44);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> x(static_cast<std::size_t>(kTokens) * kHeads * kHeadDim);
  for (float& v : x) v = dist(rng);
  std::vector<float> want = x, got = x;
  pal::rope_ref(c, pos.data(), want.data(), kTokens, kHeads);
  const auto table = pal::rope_table(c, 8192);
  pal::rope(*table, pos.data(), got.data(), kTokens, kHeads, &ctx.pool);
  expect_close(want, got, "rope");
  const double s = ctx.time([&] { pal::rope(*table, pos.data(), x.data(), kTokens, kHeads, &ctx.pool); });
  const double bytes = 2.0 * x.size() * sizeof(float);
  out.push_back({"rope", "f32", {kTokens, kHeads, kHeadDim}, ctx.threads, bytes / s / 1e9, "GB/s",
                 ctx.limits.read_gbps});
}

const orchard::cli::bench::Registrar kDecode("attention_decode", bench_decode);
const orchard::cli::bench::Registrar kDecodeCached("attention_decode_cached", bench_decode_cached);
const orchard::cli::bench::Registrar kPrefill("attention_prefill", bench_prefill);
const orchard::cli::bench::Registrar kRope("rope", bench_rope);

}  // namespace
