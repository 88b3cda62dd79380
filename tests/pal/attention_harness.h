// The consistency harness for paged attention (in the spirit of ggml's test-backend-ops): a case declares
// its shapes; the harness builds a fresh random paged KV cache (pages scattered through a larger pool,
// unused slots and pages poisoned with NaN so a read past a sequence shows), poisons the outputs with NaN
// before each run, runs the reference and the kernel under test, and reports the worst error.
#pragma once

#include <pal/attention.h>
#include <tensor/half.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

namespace pal::testing {

struct AttentionCase {
  std::vector<std::int32_t> seq_lens;  // tokens cached per sequence
  std::vector<std::int32_t> n_query;   // prefill: query tokens per sequence (empty: decode)
  std::int32_t n_q_heads = 8;
  std::int32_t n_kv_heads = 2;
  std::int32_t head_dim = 64;
  tensor::DType dtype = tensor::DType::f32;
  std::int32_t window = 0;
  float soft_cap = 0.0f;
  float scale = 0.0f;  // 0: 1 / sqrt(head_dim)

  std::string name() const {
    std::string s = n_query.empty() ? "decode" : "prefill";
    s += " lens=[";
    for (std::size_t i = 0; i < seq_lens.size(); ++i) {
      s += (i ? "," : "") + std::to_string(seq_lens[i]);
      if (!n_query.empty()) s += "/" + std::to_string(n_query[i]);
    }
    s += "] heads=" + std::to_string(n_q_heads) + "/" + std::to_string(n_kv_heads) +
         " d=" + std::to_string(head_dim) + " " + (dtype == tensor::DType::f16 ? "f16" : "f32") +
         " window=" + std::to_string(window) + " cap=" + std::to_string(soft_cap);
    return s;
  }
};

// A built cache with its backing storage.
struct BuiltCache {
  std::vector<float> k32, v32;
  std::vector<std::uint16_t> k16, v16;
  std::vector<std::int32_t> indptr, indices, lens;
  PagedKv kv;
};

inline BuiltCache build_cache(const AttentionCase& c, std::mt19937& rng) {
  BuiltCache b;
  const std::int32_t n_seqs = static_cast<std::int32_t>(c.seq_lens.size());
  std::int32_t n_used = 0;
  b.indptr.push_back(0);
  for (std::int32_t len : c.seq_lens) {
    n_used += (len + kPageSize - 1) / kPageSize;
    b.indptr.push_back(n_used);
  }
  const std::int32_t n_pages = n_used + 3;  // spare pages stay NaN
  std::vector<std::int32_t> perm(static_cast<std::size_t>(n_pages));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  b.indices.assign(perm.begin(), perm.begin() + n_used);
  b.lens = c.seq_lens;

  const std::size_t n_elems = static_cast<std::size_t>(n_pages) * kPageSize * c.n_kv_heads * c.head_dim;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> k(n_elems, nan), v(n_elems, nan);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (std::int32_t s = 0; s < n_seqs; ++s) {
    for (std::int32_t t = 0; t < c.seq_lens[s]; ++t) {
      const std::int32_t page = b.indices[b.indptr[s] + t / kPageSize];
      for (std::int32_t g = 0; g < c.n_kv_heads; ++g) {
        const std::size_t base =
            static_cast<std::size_t>(((page * kPageSize + t % kPageSize) * c.n_kv_heads + g) * c.head_dim);
        for (std::int32_t d = 0; d < c.head_dim; ++d) {
          k[base + d] = dist(rng);
          v[base + d] = dist(rng);
        }
      }
    }
  }
  b.kv.dtype = c.dtype;
  if (c.dtype == tensor::DType::f16) {
    b.k16.resize(n_elems);
    b.v16.resize(n_elems);
    for (std::size_t i = 0; i < n_elems; ++i) {
      b.k16[i] = tensor::f32_to_f16(k[i]);
      b.v16[i] = tensor::f32_to_f16(v[i]);
    }
    b.kv.k_pages = b.k16.data();
    b.kv.v_pages = b.v16.data();
  } else {
    b.k32 = std::move(k);
    b.v32 = std::move(v);
    b.kv.k_pages = b.k32.data();
    b.kv.v_pages = b.v32.data();
  }
  b.kv.n_pages = n_pages;
  b.kv.n_kv_heads = c.n_kv_heads;
  b.kv.head_dim = c.head_dim;
  b.kv.n_seqs = n_seqs;
  b.kv.page_indptr = b.indptr.data();
  b.kv.page_indices = b.indices.data();
  b.kv.seq_lens = b.lens.data();
  return b;
}

inline AttentionParams params_of(const AttentionCase& c) {
  AttentionParams p;
  p.n_q_heads = c.n_q_heads;
  p.scale = c.scale != 0.0f ? c.scale : 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  p.logit_soft_cap = c.soft_cap;
  p.sliding_window = c.window;
  return p;
}

// Worst error of `got` against `want`, each element's error divided by the largest magnitude in its
// output row (head_dim values: an attention output is a convex combination of V rows, so its row scale is
// the natural unit). NaN anywhere in got (an unwritten element) gives +inf.
inline double worst_row_error(const std::vector<float>& want, const std::vector<float>& got, int head_dim) {
  double worst = 0.0;
  for (std::size_t r = 0; r + head_dim <= want.size(); r += head_dim) {
    double scale = 1e-30;
    for (int d = 0; d < head_dim; ++d) scale = std::max(scale, std::fabs(static_cast<double>(want[r + d])));
    for (int d = 0; d < head_dim; ++d) {
      if (std::isnan(got[r + d])) return INFINITY;
      worst = std::max(worst, std::fabs(static_cast<double>(got[r + d]) - want[r + d]) / scale);
    }
  }
  return worst;
}

}  // namespace pal::testing
