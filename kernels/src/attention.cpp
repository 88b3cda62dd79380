// kernels/attention.h: validation, the reference (two-pass softmax in double) and the dispatch over
// (sequence, head).
#include "kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "attention_internal.h"
#include "kernels/error.h"

namespace kernels {
namespace {

void check(const char* op, const BidirectionalAttentionParams& p, const float* q, const float* k, const float* v,
           std::span<const std::int32_t> seq_indptr, const float* out) {
  auto fail = [&](const std::string& what) { throw ShapeError(std::string("[kernels::") + op + "] " + what); };
  if (p.n_heads <= 0 || p.head_dim <= 0) {
    fail("n_heads " + std::to_string(p.n_heads) + " and head_dim " + std::to_string(p.head_dim) + " must be positive");
  }
  const std::int64_t width = p.n_heads * p.head_dim;
  const std::pair<const char*, std::int64_t> strides[] = {
      {"q_stride", p.q_stride}, {"k_stride", p.k_stride}, {"v_stride", p.v_stride}, {"out_stride", p.out_stride}};
  for (const auto& [name, stride] : strides) {
    if (stride < width) {
      fail(std::string(name) + " " + std::to_string(stride) + " is less than n_heads * head_dim = " + std::to_string(width));
    }
  }
  if (seq_indptr.empty() || seq_indptr[0] != 0) fail("seq_indptr must start at 0");
  for (std::size_t s = 1; s < seq_indptr.size(); ++s) {
    if (seq_indptr[s] < seq_indptr[s - 1]) {
      fail("seq_indptr decreases at " + std::to_string(s) + " (" + std::to_string(seq_indptr[s - 1]) + " then " +
           std::to_string(seq_indptr[s]) + ")");
    }
  }
  if (seq_indptr.back() > 0 && (q == nullptr || k == nullptr || v == nullptr || out == nullptr)) {
    fail("null pointer with " + std::to_string(seq_indptr.back()) + " rows to do");
  }
}

}  // namespace

void bidirectional_attention_ref(const BidirectionalAttentionParams& p, const float* q, const float* k,
                                 const float* v, std::span<const std::int32_t> seq_indptr, float* out) {
  check("bidirectional_attention_ref", p, q, k, v, seq_indptr, out);
  std::vector<double> w;
  for (std::size_t s = 0; s + 1 < seq_indptr.size(); ++s) {
    const std::int64_t first = seq_indptr[s], len = seq_indptr[s + 1] - first;
    w.resize(static_cast<std::size_t>(len));
    for (std::int64_t h = 0; h < p.n_heads; ++h) {
      const std::int64_t off = h * p.head_dim;
      for (std::int64_t i = 0; i < len; ++i) {
        const float* qi = q + (first + i) * p.q_stride + off;
        double max = -INFINITY, sum = 0;
        for (std::int64_t j = 0; j < len; ++j) {
          const float* kj = k + (first + j) * p.k_stride + off;
          double dot = 0;
          for (std::int64_t e = 0; e < p.head_dim; ++e) dot += static_cast<double>(qi[e]) * kj[e];
          w[static_cast<std::size_t>(j)] = dot * p.scale;
          max = std::max(max, dot * p.scale);
        }
        for (double& x : w) sum += (x = std::exp(x - max));
        float* o = out + (first + i) * p.out_stride + off;
        for (std::int64_t e = 0; e < p.head_dim; ++e) {
          double acc = 0;
          for (std::int64_t j = 0; j < len; ++j) acc += w[static_cast<std::size_t>(j)] * v[(first + j) * p.v_stride + off + e];
          o[e] = static_cast<float>(acc / sum);
        }
      }
    }
  }
}

void bidirectional_attention(const BidirectionalAttentionParams& p, const float* q, const float* k, const float* v,
                             std::span<const std::int32_t> seq_indptr, float* out, tensor::ThreadPool* pool, Isa isa) {
  if (isa == Isa::scalar || !isa_supported(Isa::avx2) || p.head_dim % 8 != 0) {
    return bidirectional_attention_ref(p, q, k, v, seq_indptr, out);
  }
  check("bidirectional_attention", p, q, k, v, seq_indptr, out);
  const std::int64_t n_seqs = static_cast<std::int64_t>(seq_indptr.size()) - 1;
  auto jobs = [&](std::int64_t begin, std::int64_t end) {
    thread_local std::vector<float> scratch;
    for (std::int64_t job = begin; job < end; ++job) {
      const std::int64_t s = job / p.n_heads, off = (job % p.n_heads) * p.head_dim;
      const std::int64_t first = seq_indptr[static_cast<std::size_t>(s)];
      const std::int64_t len = seq_indptr[static_cast<std::size_t>(s) + 1] - first;
      if (len == 0) continue;
      scratch.resize(static_cast<std::size_t>(detail::avx2::attention_scratch_floats(len, p.head_dim)));
      detail::avx2::attention_head(p, q + first * p.q_stride + off, k + first * p.k_stride + off,
                                   v + first * p.v_stride + off, len, out + first * p.out_stride + off, scratch.data());
    }
  };
  if (pool != nullptr && pool->n_threads() > 1) {
    pool->parallel_for(n_seqs * p.n_heads, jobs, 1);
  } else {
    jobs(0, n_seqs * p.n_heads);
  }
}

}  // namespace kernels
