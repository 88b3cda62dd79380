// The CPU forward pass of the Llama family (Llama, Mistral, Qwen2, Qwen3; any architecture whose loader
// fills the same separate q/k/v and gate/up weights) over the paged KV cache. Gemma 2 is refused.
//
// Batch invariance: every product runs through kernels::matmul over all of the step's tokens (a row's dot
// products do not depend on the other rows), row-wise kernels are called per row (their SIMD / tail split
// depends on the row length only), and pal's attention visits each query row's keys in fixed 512-key
// chunks merged in order whatever the batch, so decode and prefill rows give the same bits.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "pal/attention.h"
#include "pal/error.h"
#include "pal/rope.h"
#include "pie/error.h"
#include "pie/runner.h"
#include "runner/batch_check.h"
#include "tensor/error.h"
#include "tensor/half.h"
#include "tensor/thread_pool.h"

namespace pie {
namespace {

// Grows v to at least n elements, never shrinking: scratch is reused across steps.
template <class T>
T* scratch(std::vector<T>& v, std::size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

std::string shape_of(const Weight& w) { return fmt::format("[{}, {}] {}", w.n_out, w.n_in, tensor::dtype_name(w.type)); }

void require_matrix(const Weight& w, const char* name, std::int32_t layer, std::int64_t n_out, std::int64_t n_in) {
  const std::string where = layer >= 0 ? fmt::format("layer {}: {}", layer, name) : std::string(name);
  if (!w) throw ModelError(fmt::format("[runner] {} is missing", where));
  if (w.n_out != n_out || w.n_in != n_in) {
    throw ModelError(fmt::format("[runner] {} is {}, expected [{}, {}]", where, shape_of(w), n_out, n_in));
  }
  if (w.type == tensor::DType::q8_K) {
    throw ModelError(fmt::format("[runner] {}: q8_K is an activation type, not a weight type", where));
  }
  if (w.n_in % tensor::block_size(w.type) != 0) {
    throw ModelError(fmt::format("[runner] {}: rows of {} cannot hold {} blocks of {}", where, w.n_in,
                                 tensor::dtype_name(w.type), tensor::block_size(w.type)));
  }
}

void require_vector(const Weight& w, const char* name, std::int32_t layer, std::int64_t n) {
  const std::string where = layer >= 0 ? fmt::format("layer {}: {}", layer, name) : std::string(name);
  if (!w) throw ModelError(fmt::format("[runner] {} is missing", where));
  if (w.type != tensor::DType::f32 || w.n_out * w.n_in != n) {
    throw ModelError(fmt::format("[runner] {} is {}, expected f32 of {} elements", where, shape_of(w), n));
  }
}

kernels::MatmulParams params_of(const Weight& w) {
  kernels::MatmulParams p;
  p.w_type = w.type;
  p.w = w.data;
  p.w_row_bytes = w.row_bytes();
  p.n_out = w.n_out;
  p.n_in = w.n_in;
  return p;
}

const float* floats(const Weight& w) { return static_cast<const float*>(w.data); }

// One subset of the batch's sequences as pal sees it (the decode rows, or the prefill chunks).
struct AttentionGroup {
  std::vector<std::int32_t> seqs;          // batch sequence indices
  std::vector<std::int32_t> page_indptr;   // [n + 1]
  std::vector<std::int32_t> page_indices;
  std::vector<std::int32_t> seq_lens;      // [n]
  std::vector<std::int32_t> qo_indptr;     // [n + 1] (rows of the gathered q)
  std::vector<std::int32_t> rows;          // batch token index of each gathered row
  std::vector<float> q, out;               // [rows][n_head * head_dim]

  void clear() {
    seqs.clear();
    page_indptr.assign(1, 0);
    page_indices.clear();
    seq_lens.clear();
    qo_indptr.assign(1, 0);
    rows.clear();
  }
  void add(const ForwardBatch& b, std::int32_t s) {
    seqs.push_back(s);
    for (std::int32_t i = b.page_indptr[s]; i < b.page_indptr[s + 1]; ++i) page_indices.push_back(b.page_indices[i]);
    page_indptr.push_back(static_cast<std::int32_t>(page_indices.size()));
    seq_lens.push_back(b.seq_lens[s]);
    for (std::int32_t t = b.qo_indptr[s]; t < b.qo_indptr[s + 1]; ++t) rows.push_back(t);
    qo_indptr.push_back(static_cast<std::int32_t>(rows.size()));
  }
};

}  // namespace

struct ModelRunner::Impl {
  std::shared_ptr<const Model> model;
  tensor::ThreadPool* pool = nullptr;
  float attn_scale = 0;

  // Per-step scratch, grown to the largest step seen.
  std::vector<float> x;      // [T][n_embd] residual stream
  std::vector<float> xn;     // [T][n_embd] normed
  std::vector<float> q;      // [T][n_head * head_dim]
  std::vector<float> k, v;   // [T][n_kv_head * head_dim]
  std::vector<float> attn;   // [T][n_head * head_dim]
  std::vector<float> proj;   // [T][n_embd]
  std::vector<float> gate;   // [T][n_ff]
  std::vector<float> up;     // [T][n_ff]
  std::vector<float> last;   // [R][n_embd] rows whose logits are wanted
  std::vector<std::int32_t> positions;  // [T]
  std::vector<std::int32_t> token_page; // [T] page of each token's K/V
  std::vector<std::int32_t> token_slot; // [T]
  AttentionGroup decode, prefill;
  std::shared_ptr<const pal::RopeTable> rope;  // cos/sin for the positions seen so far

  // fn(begin, end) over rows, on the pool when there are enough of them.
  void for_rows(std::int64_t n, std::int64_t grain, tensor::FunctionRef<void(std::int64_t, std::int64_t)> fn) {
    if (pool != nullptr && pool->n_threads() > 1 && n > grain) {
      pool->parallel_for(n, fn, grain);
    } else if (n > 0) {
      fn(0, n);
    }
  }

  void matmul(const Weight& w, const float* in, std::int64_t n_tokens, float* out) {
    kernels::matmul(params_of(w), in, n_tokens, out, pool);
  }

  // Products of one input in one call: the activations converted once, one parallel region.
  template <std::size_t N>
  void matmul(const Weight* const (&ws)[N], const float* in, std::int64_t n_tokens, float* const (&outs)[N]) {
    kernels::MatmulParams ps[N];
    for (std::size_t i = 0; i < N; ++i) ps[i] = params_of(*ws[i]);
    kernels::matmul_multi(ps, in, n_tokens, outs, pool);
  }

  void rms_norm_rows(const float* in, const Weight& weight, std::int64_t n_rows, std::int64_t n, float* out) {
    const float eps = model->config.norm_eps;
    for_rows(n_rows, std::max<std::int64_t>(1, 4096 / n), [&](std::int64_t r0, std::int64_t r1) {
      kernels::NormParams p;
      p.n_rows = r1 - r0;
      p.n = n;
      p.eps = eps;
      kernels::rms_norm(p, in + r0 * n, floats(weight), out + r0 * n);
    });
  }

  void add_bias(float* rows, const Weight& bias, std::int64_t n_rows) {
    if (!bias) return;
    const std::int64_t n = bias.n_in * bias.n_out;
    for (std::int64_t r = 0; r < n_rows; ++r) {
      kernels::add({n}, rows + r * n, floats(bias), rows + r * n);
    }
  }

  void write_kv(KvCache& kv, std::int32_t layer, std::int64_t n_tokens) {
    const ModelConfig& c = model->config;
    const std::int64_t row = static_cast<std::int64_t>(c.n_kv_head) * c.head_dim;
    const bool f16 = kv.config().dtype == tensor::DType::f16;
    void* kp = kv.storage().k_pool(layer);
    void* vp = kv.storage().v_pool(layer);
    for_rows(n_tokens, 16, [&](std::int64_t t0, std::int64_t t1) {
      for (std::int64_t t = t0; t < t1; ++t) {
        const std::int64_t off = (static_cast<std::int64_t>(token_page[t]) * kKvPageSize + token_slot[t]) * row;
        const float* ks = k.data() + t * row;
        const float* vs = v.data() + t * row;
        if (f16) {
          auto* kd = static_cast<std::uint16_t*>(kp) + off;
          auto* vd = static_cast<std::uint16_t*>(vp) + off;
          for (std::int64_t i = 0; i < row; ++i) {
            kd[i] = tensor::f32_to_f16(ks[i]);
            vd[i] = tensor::f32_to_f16(vs[i]);
          }
        } else {
          std::memcpy(static_cast<float*>(kp) + off, ks, sizeof(float) * row);
          std::memcpy(static_cast<float*>(vp) + off, vs, sizeof(float) * row);
        }
      }
    });
  }

  pal::PagedKv paged(const AttentionGroup& g, KvCache& kv, std::int32_t layer) const {
    pal::PagedKv p;
    p.k_pages = kv.storage().k_pool(layer);
    p.v_pages = kv.storage().v_pool(layer);
    p.dtype = kv.config().dtype;
    p.n_pages = kv.config().n_pages;
    p.n_kv_heads = model->config.n_kv_head;
    p.head_dim = model->config.head_dim;
    p.n_seqs = static_cast<std::int32_t>(g.seqs.size());
    p.page_indptr = g.page_indptr.data();
    p.page_indices = g.page_indices.data();
    p.seq_lens = g.seq_lens.data();
    return p;
  }

  // Attention of every query row: decode rows (sequences with one query token) through decode_attention,
  // the others through prefill_attention, gathered into contiguous q and scattered back into `attn`.
  void attention(KvCache& kv, std::int32_t layer) {
    const ModelConfig& c = model->config;
    const std::int64_t row = static_cast<std::int64_t>(c.n_head) * c.head_dim;
    pal::AttentionParams p;
    p.n_q_heads = c.n_head;
    p.scale = attn_scale;
    p.logit_soft_cap = c.attn_logit_softcap;
    p.sliding_window = c.sliding_window;
    for (AttentionGroup* g : {&decode, &prefill}) {
      if (g->seqs.empty()) continue;
      const std::int64_t n_rows = static_cast<std::int64_t>(g->rows.size());
      float* gq = scratch(g->q, static_cast<std::size_t>(n_rows * row));
      float* go = scratch(g->out, static_cast<std::size_t>(n_rows * row));
      for (std::int64_t i = 0; i < n_rows; ++i) {
        std::memcpy(gq + i * row, q.data() + static_cast<std::int64_t>(g->rows[i]) * row, sizeof(float) * row);
      }
      const pal::PagedKv pk = paged(*g, kv, layer);
      if (g == &decode) {
        pal::decode_attention(pk, p, {gq, go}, pool);
      } else {
        pal::prefill_attention(pk, p, {g->qo_indptr.data(), gq, go}, pool);
      }
      for (std::int64_t i = 0; i < n_rows; ++i) {
        std::memcpy(attn.data() + static_cast<std::int64_t>(g->rows[i]) * row, go + i * row, sizeof(float) * row);
      }
    }
  }

  void forward(const ForwardBatch& b, KvCache& kv, std::span<float> logits);
};

ModelRunner::ModelRunner(std::shared_ptr<const Model> model, tensor::ThreadPool* pool)
    : impl_(std::make_unique<Impl>()) {
  if (!model) throw ModelError("[runner] no model");
  const ModelConfig& c = model->config;
  c.validate();
  if (c.arch == Architecture::gemma2) {
    throw ModelError("[runner] gemma2 is not supported by the CPU runner (GeGLU, scaled embeddings, "
                     "(1 + w) norms)");
  }
  if (c.rope.head_dim != c.head_dim || c.head_dim % 2 != 0) {
    throw ModelError(fmt::format("[runner] RoPE head dim {} / model head dim {}: must be equal and even",
                                 c.rope.head_dim, c.head_dim));
  }
  try {
    pal::validate_rope(c.rope);
  } catch (const pal::Error& e) {
    throw ModelError(fmt::format("[runner] {}", e.what()));
  }
  if (static_cast<std::int32_t>(model->layers.size()) != c.n_layer) {
    throw ModelError(fmt::format("[runner] the model has {} layers of weights, its config says {}",
                                 model->layers.size(), c.n_layer));
  }
  const std::int64_t q_dim = static_cast<std::int64_t>(c.n_head) * c.head_dim;
  const std::int64_t kv_dim = static_cast<std::int64_t>(c.n_kv_head) * c.head_dim;
  require_matrix(model->token_embd, "token_embd", -1, c.n_vocab, c.n_embd);
  require_matrix(model->output, "output", -1, c.n_vocab, c.n_embd);
  require_vector(model->output_norm, "output_norm", -1, c.n_embd);
  for (std::int32_t i = 0; i < c.n_layer; ++i) {
    const LayerWeights& l = model->layers[static_cast<std::size_t>(i)];
    require_vector(l.attn_norm, "attn_norm", i, c.n_embd);
    require_matrix(l.wq, "wq", i, q_dim, c.n_embd);
    require_matrix(l.wk, "wk", i, kv_dim, c.n_embd);
    require_matrix(l.wv, "wv", i, kv_dim, c.n_embd);
    require_matrix(l.wo, "wo", i, c.n_embd, q_dim);
    if (c.attention_bias) {
      require_vector(l.bq, "bq", i, q_dim);
      require_vector(l.bk, "bk", i, kv_dim);
      require_vector(l.bv, "bv", i, kv_dim);
    }
    if (c.qk_norm) {
      require_vector(l.q_norm, "q_norm", i, c.head_dim);
      require_vector(l.k_norm, "k_norm", i, c.head_dim);
    }
    if (l.post_attn_norm) require_vector(l.post_attn_norm, "post_attn_norm", i, c.n_embd);
    if (l.post_ffn_norm) require_vector(l.post_ffn_norm, "post_ffn_norm", i, c.n_embd);
    require_vector(l.ffn_norm, "ffn_norm", i, c.n_embd);
    require_matrix(l.w_gate, "w_gate", i, c.n_ff, c.n_embd);
    require_matrix(l.w_up, "w_up", i, c.n_ff, c.n_embd);
    require_matrix(l.w_down, "w_down", i, c.n_embd, c.n_ff);
  }
  impl_->model = std::move(model);
  impl_->pool = pool;
  impl_->attn_scale = c.attention_scale > 0 ? c.attention_scale : 1.0f / std::sqrt(static_cast<float>(c.head_dim));
}

ModelRunner::~ModelRunner() = default;

const Model& ModelRunner::model() const { return *impl_->model; }

KvCacheConfig ModelRunner::kv_config(std::int32_t n_pages, tensor::DType dtype) const {
  KvCacheConfig k;
  k.n_layer = impl_->model->config.n_layer;
  k.n_kv_head = impl_->model->config.n_kv_head;
  k.head_dim = impl_->model->config.head_dim;
  k.dtype = dtype;
  k.n_pages = n_pages;
  return k;
}

void ModelRunner::forward(const ForwardBatch& batch, KvCache& kv, std::span<float> logits) {
  detail::check_batch(batch, impl_->model->config, kv.config(), logits.size());
  try {
    impl_->forward(batch, kv, logits);
  } catch (const tensor::Error& e) {  // kernels and pal: the checks above should make this unreachable
    throw Error(fmt::format("[runner] forward pass failed: {}", e.what()));
  }
}

void ModelRunner::Impl::forward(const ForwardBatch& b, KvCache& kv, std::span<float> logits) {
  const Model& m = *model;
  const ModelConfig& c = m.config;
  const std::int64_t n_tokens = static_cast<std::int64_t>(b.tokens.size());
  const std::int32_t n_seqs = static_cast<std::int32_t>(b.qo_indptr.size()) - 1;
  const std::int64_t E = c.n_embd;
  const std::int64_t q_dim = static_cast<std::int64_t>(c.n_head) * c.head_dim;
  const std::int64_t kv_dim = static_cast<std::int64_t>(c.n_kv_head) * c.head_dim;
  const auto T = static_cast<std::size_t>(n_tokens);
  if (n_tokens == 0) return;

  scratch(x, T * E);
  scratch(xn, T * E);
  scratch(q, T * q_dim);
  scratch(k, T * kv_dim);
  scratch(v, T * kv_dim);
  scratch(attn, T * q_dim);
  scratch(proj, T * E);
  scratch(gate, T * c.n_ff);
  scratch(up, T * c.n_ff);
  scratch(positions, T);
  scratch(token_page, T);
  scratch(token_slot, T);

  // Positions and K/V slots of the query tokens; the split into decode rows and prefill chunks.
  decode.clear();
  prefill.clear();
  for (std::int32_t s = 0; s < n_seqs; ++s) {
    const std::int32_t n_q = b.qo_indptr[s + 1] - b.qo_indptr[s];
    if (n_q == 0) continue;
    const std::int32_t first = b.seq_lens[s] - n_q;
    for (std::int32_t i = 0; i < n_q; ++i) {
      const std::int32_t t = b.qo_indptr[s] + i;
      const std::int32_t pos = first + i;
      positions[t] = pos;
      token_page[t] = b.page_indices[b.page_indptr[s] + pos / kKvPageSize];
      token_slot[t] = pos % kKvPageSize;
    }
    (n_q == 1 ? decode : prefill).add(b, s);
  }
  std::int32_t max_pos = 0;
  for (std::int64_t t = 0; t < n_tokens; ++t) max_pos = std::max(max_pos, positions[t]);
  if (!rope || rope->n_positions() <= max_pos) rope = pal::rope_table(c.rope, max_pos + 1);

  {
    kernels::EmbeddingParams p;
    p.table_type = m.token_embd.type;
    p.table = m.token_embd.data;
    p.n_vocab = c.n_vocab;
    p.n_embd = E;
    for_rows(n_tokens, 8, [&](std::int64_t t0, std::int64_t t1) {
      kernels::embedding(p, b.tokens.data() + t0, t1 - t0, x.data() + t0 * E);
    });
  }

  for (std::int32_t layer = 0; layer < c.n_layer; ++layer) {
    const LayerWeights& l = m.layers[static_cast<std::size_t>(layer)];
    rms_norm_rows(x.data(), l.attn_norm, n_tokens, E, xn.data());
    matmul({&l.wq, &l.wk, &l.wv}, xn.data(), n_tokens, {q.data(), k.data(), v.data()});
    add_bias(q.data(), l.bq, n_tokens);
    add_bias(k.data(), l.bk, n_tokens);
    add_bias(v.data(), l.bv, n_tokens);
    if (c.qk_norm) {
      rms_norm_rows(q.data(), l.q_norm, n_tokens * c.n_head, c.head_dim, q.data());
      rms_norm_rows(k.data(), l.k_norm, n_tokens * c.n_kv_head, c.head_dim, k.data());
    }
    pal::rope(*rope, positions.data(), q.data(), n_tokens, c.n_head, pool);
    pal::rope(*rope, positions.data(), k.data(), n_tokens, c.n_kv_head, pool);
    write_kv(kv, layer, n_tokens);
    attention(kv, layer);
    matmul(l.wo, attn.data(), n_tokens, proj.data());
    if (l.post_attn_norm) rms_norm_rows(proj.data(), l.post_attn_norm, n_tokens, E, proj.data());
    for_rows(n_tokens, 16, [&](std::int64_t t0, std::int64_t t1) {
      for (std::int64_t t = t0; t < t1; ++t) kernels::add({E}, x.data() + t * E, proj.data() + t * E, x.data() + t * E);
    });

    rms_norm_rows(x.data(), l.ffn_norm, n_tokens, E, xn.data());
    matmul({&l.w_gate, &l.w_up}, xn.data(), n_tokens, {gate.data(), up.data()});
    const std::int64_t F = c.n_ff;
    for_rows(n_tokens, 4, [&](std::int64_t t0, std::int64_t t1) {
      for (std::int64_t t = t0; t < t1; ++t) kernels::swiglu({F}, gate.data() + t * F, up.data() + t * F, gate.data() + t * F);
    });
    matmul(l.w_down, gate.data(), n_tokens, proj.data());
    if (l.post_ffn_norm) rms_norm_rows(proj.data(), l.post_ffn_norm, n_tokens, E, proj.data());
    for_rows(n_tokens, 16, [&](std::int64_t t0, std::int64_t t1) {
      for (std::int64_t t = t0; t < t1; ++t) kernels::add({E}, x.data() + t * E, proj.data() + t * E, x.data() + t * E);
    });
  }

  const std::int64_t n_rows = static_cast<std::int64_t>(b.logit_rows.size());
  if (n_rows == 0) return;
  float* lr = scratch(last, static_cast<std::size_t>(n_rows * E));
  for (std::int64_t r = 0; r < n_rows; ++r) {
    std::memcpy(lr + r * E, x.data() + static_cast<std::int64_t>(b.logit_rows[r]) * E, sizeof(float) * E);
  }
  rms_norm_rows(lr, m.output_norm, n_rows, E, lr);
  matmul(m.output, lr, n_rows, logits.data());
  if (c.final_logit_softcap > 0) {
    const float cap = c.final_logit_softcap;
    for (std::int64_t i = 0; i < n_rows * c.n_vocab; ++i) logits[i] = cap * std::tanh(logits[i] / cap);
  }
}

}  // namespace pie
