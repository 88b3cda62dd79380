// The fast CPU paged-attention kernel, written once over a small SIMD interface `Isa` and compiled per ISA
// (attention_avx512.cpp, attention_avx2.cpp, each with its own -m flags). Everything here has internal
// linkage, so the copies built with different instruction sets never meet at link time.
//
// Per unit (sequence, KV head, a run of query tokens), page by page over the pages the rows can see:
//   1. stage the page's K rows of this KV head as f32 in L1 scratch (F16C conversion for f16 KV);
//   2. per query row: 16 logits (one accumulator per key, reduced W at a time by a transpose-add tree),
//      scale, soft cap, mask (window / causal / sequence end), online-softmax update of the running max m
//      and sum l;
//   3. P.V for up to four rows at once, V read straight from the page (converted from f16 once for the four),
//      four chunks of the head dim per pass so each probability is broadcast once for the four.
// Meanwhile the next page is prefetched into L2 (pages are scattered, so the hardware prefetcher cannot
// guess them) one cache line of K and one of V at a time from inside steps 2 and 3 (Prefetcher), so the
// misses overlap the arithmetic. Issued in bursts (32 lines at the start of each query row, as before), the
// ones beyond the core's ~16 outstanding L1 misses stalled the pipeline behind them, and memory time and
// arithmetic added up instead of overlapping (docs/cpu-attention.md).
//
// Isa provides V, kWidth (16 or 8; a page is 16 / kWidth vectors), zero, set1, load, store, load_f16,
// fmadd, fnmadd, mul, div, add, sub, max, min, round, pow2i, reduce_add, reduce_max, reduce_lanes (kWidth
// accumulators -> one vector of their kWidth sums), mask_range (lanes outside [a, b) -> fill), prefetch,
// exp, tanh (simd_math.h).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "attention_merge.h"
#include "attention_unit.h"

namespace pal::detail {
namespace {

template <class Isa, int D>
struct Kernel {
  using V = typename Isa::V;
  static constexpr int W = Isa::kWidth;
  static constexpr int kChunks = D / W;
  static constexpr int kPageVecs = kPageSize / W;
  static_assert(D % W == 0, "head dim must be a multiple of the vector width");
  static_assert(kPageSize % W == 0, "page size must be a multiple of the vector width");

  // The next page's prefetches for the KV head in hand: n cache lines of K and the same lines of V, taken
  // `burst` at a time by next() (called from the inner loops of qk and pv) and the remainder by rest().
  // Address order (`linear`) when the unit walks every KV head of the page: head gl then takes the
  // gl-th 1/n_kv_heads of the next page's K and V blocks, so the page is fetched front to back (what the
  // L2 streamer follows). Otherwise (one KV head) the head's own 16 rows, `stride` bytes apart.
  struct Prefetcher {
    const char* k = nullptr;  // null: no next page
    const char* v = nullptr;
    std::int64_t stride = 0;
    int line_bytes_per_row = 64;  // lines per row x 64 (head order)
    bool linear = false;
    int i = 0;
    int n = 0;
    int burst = 1;

    void issue(int line) const {
      std::int64_t off;
      if (linear) {
        off = static_cast<std::int64_t>(line) * 64;
      } else {
        const int lpr = line_bytes_per_row / 64;
        off = (line / lpr) * stride + (line % lpr) * 64;
      }
      Isa::prefetch(k + off);
      Isa::prefetch(v + off);
    }
    void next() {
      for (int j = 0; j < burst && i < n; ++j) issue(i++);
    }
    void rest() {
      while (i < n) issue(i++);
    }
  };

  // Copies slots [a, b) of a page (rows src_stride elements apart) into dst[16][D] as f32.
  static void stage_f16(const std::uint16_t* src, std::int64_t src_stride, int a, int b, float* dst) {
    for (int t = a; t < b; ++t) {
      const std::uint16_t* s = src + t * src_stride;
      float* d = dst + t * D;
      for (int c = 0; c < kChunks; ++c) Isa::store(d + c * W, Isa::load_f16(s + c * W));
    }
  }
  static void stage_f32(const float* src, std::int64_t src_stride, int a, int b, float* dst) {
    for (int t = a; t < b; ++t) std::memcpy(dst + t * D, src + t * src_stride, sizeof(float) * D);
  }

  // logits[16] (as kPageVecs vectors) of query q against the staged keys kf[16][D].
  static void qk(const float* q, const float* kf, V* out, Prefetcher& pf) {
    for (int kb = 0; kb < kPageVecs; ++kb) {
      V acc[W];
      for (int j = 0; j < W; ++j) acc[j] = Isa::zero();
      const float* kbase = kf + kb * W * D;
      for (int c = 0; c < kChunks; ++c) {
        pf.next();
        const V qv = Isa::load(q + c * W);
        for (int j = 0; j < W; ++j) acc[j] = Isa::fmadd(qv, Isa::load(kbase + j * D + c * W), acc[j]);
      }
      out[kb] = Isa::reduce_lanes(acc);
    }
  }

  // o[r] = o[r] * alpha[r] + sum_{t in [a, b)} p[r][t] * v[t] for R rows at once, reading V straight from
  // the page (rows v_stride elements apart; converted from f16 once for the R rows). Four chunks of the head
  // dim per pass: one broadcast of p[r][t] serves four FMAs, and 4R independent accumulators hide the FMA
  // latency (the sums and their order per element are those of one chunk at a time).
  template <bool F16>
  static V load_v(const void* v, std::int64_t off) {
    if constexpr (F16) {
      return Isa::load_f16(static_cast<const std::uint16_t*>(v) + off);
    } else {
      return Isa::load(static_cast<const float*>(v) + off);
    }
  }

  template <int R, bool F16>
  static void pv(float* const* o, const float* const* p, const float* alpha, const void* v, std::int64_t v_stride,
                 int a, int b, Prefetcher& pf) {
    constexpr int kMain = kChunks / 4 * 4;
    for (int c0 = 0; c0 < kMain; c0 += 4) {
      V acc[R][4];
      for (int i = 0; i < R; ++i) {
        const V al = Isa::set1(alpha[i]);
        for (int k = 0; k < 4; ++k) acc[i][k] = Isa::mul(Isa::load(o[i] + (c0 + k) * W), al);
      }
      for (int t = a; t < b; ++t) {
        pf.next();
        V vv[4];
        for (int k = 0; k < 4; ++k) vv[k] = load_v<F16>(v, t * v_stride + (c0 + k) * W);
        for (int i = 0; i < R; ++i) {
          const V pb = Isa::set1(p[i][t]);
          for (int k = 0; k < 4; ++k) acc[i][k] = Isa::fmadd(pb, vv[k], acc[i][k]);
        }
      }
      for (int i = 0; i < R; ++i) {
        for (int k = 0; k < 4; ++k) Isa::store(o[i] + (c0 + k) * W, acc[i][k]);
      }
    }
    for (int c = kMain; c < kChunks; ++c) {  // head dims that are not a multiple of 4 vectors (80, 96 on AVX-512)
      V acc[R];
      for (int i = 0; i < R; ++i) acc[i] = Isa::mul(Isa::load(o[i] + c * W), Isa::set1(alpha[i]));
      for (int t = a; t < b; ++t) {
        pf.next();
        const V vv = load_v<F16>(v, t * v_stride + c * W);
        for (int i = 0; i < R; ++i) acc[i] = Isa::fmadd(Isa::set1(p[i][t]), vv, acc[i]);
      }
      for (int i = 0; i < R; ++i) Isa::store(o[i] + c * W, acc[i]);
    }
  }

  template <bool F16>
  static void pv_rows(int count, float* const* o, const float* const* p, const float* alpha, const void* v,
                      std::int64_t v_stride, int a, int b, Prefetcher& pf) {
    switch (count) {
      case 4: pv<4, F16>(o, p, alpha, v, v_stride, a, b, pf); break;
      case 3: pv<3, F16>(o, p, alpha, v, v_stride, a, b, pf); break;
      case 2: pv<2, F16>(o, p, alpha, v, v_stride, a, b, pf); break;
      case 1: pv<1, F16>(o, p, alpha, v, v_stride, a, b, pf); break;
      default: break;
    }
  }

  // Logits, online softmax and P.V of the rows of local KV head gl against one staged page.
  static void process_head(const AttentionUnit& u, int gl, int group, int hg, std::int64_t base,
                           std::int64_t first_key, std::int64_t last_pos, int ua, int ub, const float* kf,
                           const void* vpage, bool f16, std::int64_t row_stride, float* o, float* pbuf, float* m,
                           float* l, float* alpha, V vscale, V vcap, Prefetcher& pf) {
    const std::int64_t window = u.params->sliding_window;
    const float cap = u.params->logit_soft_cap;
    const int n_rr = u.n_tokens * group;
    if (pf.k != nullptr) {
      // Spread the n lines over the calls of next() this head makes (qk: kChunks per row and page vector;
      // pv: 16 per pass of four chunks, and per remaining chunk, for each group of four rows).
      const int calls = n_rr * kChunks * kPageVecs + (n_rr + 3) / 4 * (kChunks / 4 + kChunks % 4) * kPageSize;
      pf.burst = (pf.n + calls - 1) / calls;
    }
    // Rows of KV head gl that see part of this page; the P.V pass takes them four at a time.
    int pending = 0;
    float* orow[4];
    const float* prow[4];
    float arow[4];
    auto flush = [&](int count) {
      if (f16) {
        pv_rows<true>(count, orow, prow, arow, vpage, row_stride, ua, ub, pf);
      } else {
        pv_rows<false>(count, orow, prow, arow, vpage, row_stride, ua, ub, pf);
      }
    };
    for (int rr = 0; rr < n_rr; ++rr) {
      const int tok = rr / group;
      const int j = gl * group + rr % group;  // local q head
      const int r = tok * hg + j;
      const std::int64_t pos = u.first_pos + tok;
      std::int64_t lo = window > 0 ? pos - window + 1 : 0;
      std::int64_t hi = pos;  // last key of this row
      if (lo < first_key) lo = first_key;
      if (hi > last_pos) hi = last_pos;
      const int a = static_cast<int>(lo > base ? lo - base : 0);
      const int b = static_cast<int>(hi + 1 < base + kPageSize ? hi + 1 - base : kPageSize);
      if (a >= b) continue;
      const float* q = u.q + tok * u.tok_stride + static_cast<std::int64_t>(j) * D;

      V s[kPageVecs];
      qk(q, kf, s, pf);
      V vmax = Isa::set1(-INFINITY);
      for (int i = 0; i < kPageVecs; ++i) {
        V x = Isa::mul(s[i], vscale);
        if (cap > 0.0f) x = Isa::mul(vcap, Isa::tanh(Isa::div(x, vcap)));
        s[i] = Isa::mask_range(x, i * W, a, b, -INFINITY);
        vmax = Isa::max(vmax, s[i]);
      }
      const float page_max = Isa::reduce_max(vmax);
      const float m_new = m[r] > page_max ? m[r] : page_max;
      alpha[r] = std::exp(m[r] - m_new);  // exp(-inf) == 0 on the first page
      m[r] = m_new;
      const V vm = Isa::set1(m_new);
      V vsum = Isa::zero();
      float* p = pbuf + static_cast<std::int64_t>(r) * kPageSize;
      for (int i = 0; i < kPageVecs; ++i) {
        const V e = Isa::mask_range(Isa::exp(Isa::sub(s[i], vm)), i * W, a, b, 0.0f);
        vsum = Isa::add(vsum, e);
        Isa::store(p + i * W, e);
      }
      l[r] = l[r] * alpha[r] + Isa::reduce_add(vsum);
      orow[pending] = o + static_cast<std::int64_t>(r) * D;
      prow[pending] = p;
      arow[pending] = alpha[r];
      if (++pending == 4) {
        flush(4);
        pending = 0;
      }
    }
    flush(pending);
    pf.rest();
  }

  static void run(const AttentionUnit& u) {
    const PagedKv& kv = *u.kv;
    const AttentionParams& prm = *u.params;
    const int group = prm.n_q_heads / kv.n_kv_heads;
    const int hg = u.n_heads * group;  // q heads per token in this unit
    const int rows = u.n_tokens * hg;  // row r: token r / hg, local q head r % hg (KV head (r % hg) / group)
    const std::int64_t window = prm.sliding_window;
    const float cap = prm.logit_soft_cap;
    const bool f16 = kv.dtype == tensor::DType::f16;
    const std::int64_t row_stride = static_cast<std::int64_t>(kv.n_kv_heads) * D;  // elements between slots
    const std::int64_t elem_bytes = f16 ? 2 : 4;
    const int row_bytes = D * static_cast<int>(elem_bytes);  // one KV head's slot

    // Scratch: o[rows][D] | acc[rows][D] | p[rows][16] | m | l | alpha | acc_m | acc_l [rows] | pad | kf[16][D]
    // (o, m, l: the current key chunk's state; acc, acc_m, acc_l: the chunks folded so far, attention_merge.h)
    float* o = u.scratch;
    float* acc = o + static_cast<std::int64_t>(rows) * D;
    float* pbuf = acc + static_cast<std::int64_t>(rows) * D;
    float* m = pbuf + static_cast<std::int64_t>(rows) * kPageSize;
    float* l = m + rows;
    float* alpha = l + rows;
    float* acc_m = alpha + rows;
    float* acc_l = acc_m + rows;
    const std::int64_t used = static_cast<std::int64_t>(rows) * (2 * D + kPageSize + 5);
    float* kf = u.scratch + (used + 15) / 16 * 16;
    auto reset_chunk = [&] {
      for (int r = 0; r < rows; ++r) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
        for (int c = 0; c < kChunks; ++c) Isa::store(o + r * D + c * W, Isa::zero());
      }
    };
    reset_chunk();
    for (int r = 0; r < rows; ++r) {
      acc_m[r] = -INFINITY;
      acc_l[r] = 0.0f;
      for (int c = 0; c < kChunks; ++c) Isa::store(acc + r * D + c * W, Isa::zero());
    }
    // Ends key chunk `chunk`: split-KV decode stores each row's state in its slot, otherwise it is folded.
    auto close_chunk = [&](std::int64_t chunk) {
      for (int r = 0; r < rows; ++r) {
        if (u.partial != nullptr) {
          if (l[r] == 0.0f) continue;  // slots start zeroed (l == 0: nothing seen)
          float* dst = u.partial + static_cast<std::int64_t>(r) * u.partial_stride + chunk * (D + 2);  // r: q head
          for (int c = 0; c < kChunks; ++c) Isa::store(dst + c * W, Isa::load(o + r * D + c * W));
          dst[D] = m[r];
          dst[D + 1] = l[r];
        } else {
          merge_chunk(D, o + r * D, m[r], l[r], acc + r * D, acc_m + r, acc_l + r);
        }
      }
      reset_chunk();
    };

    std::int64_t last_pos = u.first_pos + u.n_tokens - 1;  // the last key any row sees
    std::int64_t first_key = window > 0 ? (u.first_pos - window + 1 > 0 ? u.first_pos - window + 1 : 0) : 0;
    if (first_key < u.key_begin) first_key = u.key_begin;
    if (last_pos > u.key_end - 1) last_pos = u.key_end - 1;
    const std::int32_t* pages = kv.page_indices + kv.page_indptr[u.seq];
    const char* kbytes = static_cast<const char*>(kv.k_pages);
    const char* vbytes = static_cast<const char*>(kv.v_pages);
    const V vscale = Isa::set1(prm.scale);
    const V vcap = Isa::set1(cap);

    const std::int64_t pg_first = first_key / kPageSize;
    const std::int64_t pg_last = last_pos / kPageSize;
    std::int64_t chunk = pg_first / kPagesPerChunk;
    for (std::int64_t pg = pg_first; pg <= pg_last; ++pg) {
      if (pg / kPagesPerChunk != chunk) {
        close_chunk(chunk);
        chunk = pg / kPagesPerChunk;
      }
      const std::int64_t base = pg * kPageSize;
      const int ua = static_cast<int>(first_key > base ? first_key - base : 0);
      const int ub = static_cast<int>(last_pos + 1 < base + kPageSize ? last_pos + 1 - base : kPageSize);
      // All of the unit's KV heads of one page before the next page: with every head in the unit (decode),
      // the page's K and V blocks are read whole while their TLB entries and DRAM rows are hot. Each head
      // prefetches its share of the next page while it works (Prefetcher).
      for (int gl = 0; gl < u.n_heads; ++gl) {
        Prefetcher pf;
        if (pg + 1 <= pg_last) {
          pf.linear = u.n_heads == kv.n_kv_heads;
          const std::int64_t share = static_cast<std::int64_t>(kPageSize) * row_bytes;  // one head's 16 rows
          const std::int64_t next = pf.linear
                                        ? kv_offset(kv, pages[pg + 1], 0, 0) * elem_bytes + gl * share
                                        : kv_offset(kv, pages[pg + 1], 0, u.kv_head + gl) * elem_bytes;
          pf.k = kbytes + next;
          pf.v = vbytes + next;
          pf.stride = row_stride * elem_bytes;
          const int lines_per_row = (row_bytes + 63) / 64;
          pf.line_bytes_per_row = lines_per_row * 64;
          pf.n = pf.linear ? static_cast<int>((share + 63) / 64) : kPageSize * lines_per_row;
        }
        const std::int64_t elem = kv_offset(kv, pages[pg], 0, u.kv_head + gl);
        const void* vpage;
        if (f16) {
          stage_f16(static_cast<const std::uint16_t*>(kv.k_pages) + elem, row_stride, ua, ub, kf);
          vpage = static_cast<const std::uint16_t*>(kv.v_pages) + elem;
        } else {
          stage_f32(static_cast<const float*>(kv.k_pages) + elem, row_stride, ua, ub, kf);
          vpage = static_cast<const float*>(kv.v_pages) + elem;
        }
        process_head(u, gl, group, hg, base, first_key, last_pos, ua, ub, kf, vpage, f16, row_stride, o, pbuf,
                     m, l, alpha, vscale, vcap, pf);
      }
    }

    if (pg_first <= pg_last) close_chunk(chunk);
    if (u.partial != nullptr) return;
    for (int r = 0; r < rows; ++r) {
      const int tok = r / hg;
      const int j = r % hg;
      finish_row(D, acc + r * D, acc_l[r], u.out + tok * u.tok_stride + static_cast<std::int64_t>(j) * D);
    }
  }
};

// Runtime head dim -> compile-time kernel (validation has already rejected any other head dim).
template <class Isa>
void run_unit(const AttentionUnit& u) {
  switch (u.kv->head_dim) {
    case 64: Kernel<Isa, 64>::run(u); break;
    case 80: Kernel<Isa, 80>::run(u); break;
    case 96: Kernel<Isa, 96>::run(u); break;
    case 128: Kernel<Isa, 128>::run(u); break;
    case 256: Kernel<Isa, 256>::run(u); break;
    default: throw_unsupported_head_dim(u.kv->head_dim);  // validate_paged_kv throws first
  }
}

}  // namespace
}  // namespace pal::detail
