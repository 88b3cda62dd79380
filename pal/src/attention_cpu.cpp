// The fast CPU paged attention: validation, cutting the batch into units (sequence x KV head x run of
// query tokens), the ISA chosen once at run time, and the units spread over the thread pool.
#include <tensor/thread_pool.h>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "attention_checks.h"
#include "attention_merge.h"
#include "attention_unit.h"
#include "pal/attention.h"
#include "pal/error.h"

namespace pal {
namespace {

enum class Isa { kAvx512, kAvx2, kScalar };

#if defined(__x86_64__) || defined(__i386__)
// F16C from CPUID leaf 1 (clang 14's __builtin_cpu_supports does not know "f16c").
bool cpu_has_f16c() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(1, &a, &b, &c, &d) != 0 && (c & bit_F16C) != 0;
}
#endif

Isa detect_isa() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("fma") && cpu_has_f16c()) {
    return Isa::kAvx512;
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c()) {
    return Isa::kAvx2;
  }
#endif
  return Isa::kScalar;
}

std::atomic<Isa>& chosen_isa() {
  static std::atomic<Isa> isa{detect_isa()};
  return isa;
}

Isa cpu_isa() { return chosen_isa().load(std::memory_order_relaxed); }

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kAvx512: return "avx512";
    case Isa::kAvx2: return "avx2";
    default: return "scalar";
  }
}

// Query tokens per prefill unit: enough rows (tokens x group) to reuse each converted K/V page, few enough
// that the accumulators stay in L1/L2 and the units spread over the threads.
std::int32_t prefill_block(std::int32_t group) { return std::max<std::int32_t>(1, 64 / group); }

void run_units(const std::vector<detail::AttentionUnit>& units, std::int32_t max_tokens, std::int32_t max_heads,
               std::int32_t group, std::int32_t head_dim, tensor::ThreadPool* pool) {
  const Isa isa = cpu_isa();
  const std::int64_t scratch_floats = detail::unit_scratch_floats(max_tokens, max_heads, group, head_dim);
  auto body = [&](std::int64_t begin, std::int64_t end) {
    // Per-thread scratch kept between calls: no allocation per layer once it has grown.
    thread_local std::vector<float> storage;
    if (storage.size() < static_cast<std::size_t>(scratch_floats + 16)) {
      storage.resize(static_cast<std::size_t>(scratch_floats + 16));
    }
    auto addr = reinterpret_cast<std::uintptr_t>(storage.data());
    float* scratch = storage.data() + ((64 - addr % 64) % 64) / sizeof(float);
    for (std::int64_t i = begin; i < end; ++i) {
      detail::AttentionUnit u = units[static_cast<std::size_t>(i)];
      u.scratch = scratch;
      if (!is_supported_head_dim(head_dim)) {
        detail::run_unit_generic(u);
      } else if (isa == Isa::kAvx512) {
        detail::run_unit_avx512(u);
      } else {
        detail::run_unit_avx2(u);
      }
    }
  };
  if (pool != nullptr && units.size() > 1) {
    pool->parallel_for(static_cast<std::int64_t>(units.size()), body, 1);
  } else {
    body(0, static_cast<std::int64_t>(units.size()));
  }
}

}  // namespace

namespace detail {
void throw_unsupported_head_dim(std::int32_t head_dim) {
  throw Error(fmt::format("[pal::attention] head dim {} has no SIMD kernel (64, 80, 96, 128, 256)", head_dim));
}
}  // namespace detail

const char* attention_cpu_isa() { return isa_name(cpu_isa()); }

std::vector<std::string> attention_cpu_isas() {
  std::vector<std::string> out;
  const Isa best = detect_isa();
  if (best == Isa::kAvx512) out.emplace_back("avx512");
  if (best == Isa::kAvx512 || best == Isa::kAvx2) out.emplace_back("avx2");
  out.emplace_back("scalar");
  return out;
}

void set_attention_cpu_isa(const std::string& isa) {
  const std::vector<std::string> have = attention_cpu_isas();
  for (const Isa candidate : {Isa::kAvx512, Isa::kAvx2, Isa::kScalar}) {
    if (isa != isa_name(candidate)) continue;
    for (const std::string& h : have) {
      if (h == isa) {
        chosen_isa().store(candidate, std::memory_order_relaxed);
        return;
      }
    }
    throw Error(fmt::format("[pal::set_attention_cpu_isa] this CPU cannot run \"{}\"", isa));
  }
  throw Error(fmt::format("[pal::set_attention_cpu_isa] unknown ISA \"{}\" (avx512, avx2, scalar)", isa));
}

// Decode units: a sequence, a range of its KV heads (all of them unless there are too few sequences to
// keep the threads busy), and a range of its keys. All heads in one unit read each page's K and V as one
// block. With fewer sequences than twice the threads, long contexts are cut into ranges of whole key chunks
// (attention_merge.h; "flash decoding"), run as separate units that write each chunk's (o, m, l) state, and
// folded in chunk order afterwards: the same arithmetic as a unit that walks every chunk itself, so the
// output does not depend on the split (nor, then, on the batch). Short contexts split the KV heads instead.
void decode_attention(const PagedKv& kv, const AttentionParams& params, const DecodeArgs& args,
                      tensor::ThreadPool* pool) {
  detail::validate_decode(kv, params, args, "pal::decode_attention");
  if (cpu_isa() == Isa::kScalar) {  // no SIMD kernel for this CPU: the reference is the scalar path
    decode_attention_ref(kv, params, args);
    return;
  }
  const std::int32_t group = params.n_q_heads / kv.n_kv_heads;
  const std::int32_t d = kv.head_dim;
  const std::int64_t tok_stride = static_cast<std::int64_t>(params.n_q_heads) * d;
  const std::int64_t want = pool != nullptr && pool->n_threads() > 1 ? 2 * pool->n_threads() : 1;
  std::int64_t max_len = 0;
  for (std::int32_t s = 0; s < kv.n_seqs; ++s) max_len = std::max<std::int64_t>(max_len, kv.seq_lens[s]);
  const std::int64_t max_chunks = (max_len + detail::kKeyChunk - 1) / detail::kKeyChunk;
  std::int64_t n_splits = 1;
  if (kv.n_seqs < want) {
    n_splits = std::min<std::int64_t>((want + kv.n_seqs - 1) / kv.n_seqs, max_len / detail::kKeyChunk);
    n_splits = std::max<std::int64_t>(n_splits, 1);
  }
  std::int64_t n_head_ranges = 1;
  if (kv.n_seqs * n_splits < want) {
    n_head_ranges = std::min<std::int64_t>(kv.n_kv_heads, (want + kv.n_seqs * n_splits - 1) / (kv.n_seqs * n_splits));
  }
  const std::int64_t partial_row = d + 2;
  thread_local std::vector<float> partial;
  if (n_splits > 1) {  // zeroed: a chunk slot no unit writes has l == 0 and is skipped by the merge
    partial.assign(static_cast<std::size_t>(static_cast<std::int64_t>(kv.n_seqs) * params.n_q_heads * max_chunks *
                                            partial_row), 0.0f);
  }

  thread_local std::vector<detail::AttentionUnit> units;  // reused between calls (capacity kept)
  units.clear();
  units.reserve(static_cast<std::size_t>(kv.n_seqs * n_head_ranges * n_splits));
  std::int32_t max_heads = 1;
  for (std::int32_t s = 0; s < kv.n_seqs; ++s) {
    const std::int64_t len = kv.seq_lens[s];
    // Chunk-aligned split length; the last split may be shorter, and splits past the end are empty.
    const std::int64_t chunks = (len + detail::kKeyChunk - 1) / detail::kKeyChunk;
    const std::int64_t split = (chunks + n_splits - 1) / n_splits * detail::kKeyChunk;
    for (std::int64_t hr = 0; hr < n_head_ranges; ++hr) {
      const auto g0 = static_cast<std::int32_t>(hr * kv.n_kv_heads / n_head_ranges);
      const auto g1 = static_cast<std::int32_t>((hr + 1) * kv.n_kv_heads / n_head_ranges);
      max_heads = std::max(max_heads, g1 - g0);
      for (std::int64_t k = 0; k < n_splits; ++k) {
        detail::AttentionUnit u;
        u.kv = &kv;
        u.params = &params;
        u.seq = s;
        u.kv_head = g0;
        u.n_heads = g1 - g0;
        u.n_tokens = 1;
        u.first_pos = len - 1;
        const std::int64_t off = s * tok_stride + static_cast<std::int64_t>(g0) * group * d;
        u.q = args.q + off;
        u.out = args.out + off;
        u.tok_stride = tok_stride;
        if (n_splits > 1) {
          u.key_begin = k * split;
          u.key_end = (k + 1) * split;
          // partial[(s, q head, chunk)][d + 2]
          u.partial = partial.data() +
                      (static_cast<std::int64_t>(s) * params.n_q_heads + static_cast<std::int64_t>(g0) * group) *
                          max_chunks * partial_row;
          u.partial_stride = max_chunks * partial_row;
        }
        units.push_back(u);
      }
    }
  }
  run_units(units, 1, max_heads, group, d, pool);
  if (n_splits == 1) return;

  thread_local std::vector<float> acc;
  acc.resize(static_cast<std::size_t>(d));
  for (std::int32_t s = 0; s < kv.n_seqs; ++s) {
    const std::int64_t chunks = (kv.seq_lens[s] + detail::kKeyChunk - 1) / detail::kKeyChunk;
    for (std::int32_t qh = 0; qh < params.n_q_heads; ++qh) {
      const float* states = partial.data() + (static_cast<std::int64_t>(s) * params.n_q_heads + qh) * max_chunks * partial_row;
      std::fill(acc.begin(), acc.end(), 0.0f);
      float acc_m = -INFINITY;
      float acc_l = 0.0f;
      for (std::int64_t c = 0; c < chunks; ++c) {
        const float* st = states + c * partial_row;
        detail::merge_chunk(d, st, st[d], st[d + 1], acc.data(), &acc_m, &acc_l);
      }
      detail::finish_row(d, acc.data(), acc_l, args.out + s * tok_stride + static_cast<std::int64_t>(qh) * d);
    }
  }
}

void prefill_attention(const PagedKv& kv, const AttentionParams& params, const PrefillArgs& args,
                       tensor::ThreadPool* pool) {
  detail::validate_prefill(kv, params, args, "pal::prefill_attention");
  if (cpu_isa() == Isa::kScalar) {
    prefill_attention_ref(kv, params, args);
    return;
  }
  const std::int32_t group = params.n_q_heads / kv.n_kv_heads;
  std::int32_t block = prefill_block(group);
  // A few query rows of few sequences (a verify step's drafted tokens) make fewer units than two per thread
  // (one per KV head: three units on two threads leave one thread a third of the time idle): their runs of
  // tokens are then cut shorter until there are. A row's arithmetic does not depend on the run it is in.
  const std::int64_t want = pool != nullptr && pool->n_threads() > 1 ? 2 * pool->n_threads() : 1;
  std::int64_t n_units = 0;
  std::int32_t max_n = 0;
  for (std::int32_t s = 0; s < kv.n_seqs; ++s) {
    const std::int32_t n = args.qo_indptr[s + 1] - args.qo_indptr[s];
    n_units += static_cast<std::int64_t>((n + block - 1) / block) * kv.n_kv_heads;
    max_n = std::max(max_n, n);
  }
  if (n_units < want && max_n > 1) {
    const std::int64_t per_seq = static_cast<std::int64_t>(kv.n_seqs) * kv.n_kv_heads;
    const auto pieces = static_cast<std::int32_t>((want + per_seq - 1) / per_seq);
    block = std::max<std::int32_t>(1, (max_n + pieces - 1) / pieces);
  }
  const std::int64_t tok_stride = static_cast<std::int64_t>(params.n_q_heads) * kv.head_dim;
  thread_local std::vector<detail::AttentionUnit> units;  // reused between calls (capacity kept)
  units.clear();
  for (std::int32_t s = 0; s < kv.n_seqs; ++s) {
    const std::int32_t n = args.qo_indptr[s + 1] - args.qo_indptr[s];
    for (std::int32_t t0 = 0; t0 < n; t0 += block) {
      for (std::int32_t g = 0; g < kv.n_kv_heads; ++g) {
        detail::AttentionUnit u;
        u.kv = &kv;
        u.params = &params;
        u.seq = s;
        u.kv_head = g;
        u.n_tokens = std::min(block, n - t0);
        u.first_pos = kv.seq_lens[s] - n + t0;
        const std::int64_t off = (static_cast<std::int64_t>(args.qo_indptr[s]) + t0) * tok_stride +
                                 static_cast<std::int64_t>(g) * group * kv.head_dim;
        u.q = args.q + off;
        u.out = args.out + off;
        u.tok_stride = tok_stride;
        units.push_back(u);
      }
    }
  }
  run_units(units, block, 1, group, kv.head_dim, pool);
}

}  // namespace pal
