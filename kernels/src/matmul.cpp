#include "kernels/matmul.h"

#include <string>
#include <vector>

#include "dot.h"
#include "kernels/error.h"
#include "matmul_check.h"
#include "q4_1_x16.h"
#include "kernels/quant.h"
#include "quant_common.h"

namespace kernels {
namespace {

using tensor::DType;

detail::DotFn pick_dot(DType w, Isa isa, const char* op) {
  detail::DotFn fn = nullptr;
  if (isa == Isa::avx512 && isa_supported(Isa::avx512)) fn = detail::dot_avx512_fn(w);
  if (fn == nullptr && isa != Isa::scalar && isa_supported(Isa::avx2)) fn = detail::dot_avx2_fn(w);
  if (fn == nullptr) fn = detail::dot_ref_fn(w);
  if (fn == nullptr) {
    throw UnsupportedError(std::string("[kernels::") + op + "] weights of type " + std::string(tensor::dtype_name(w)) +
                           " are not supported (q8_K is an activation-only type)");
  }
  return fn;
}

// The repacking the ISA's kernel of w wants of its activations (none: they are taken as vec_dot_type rows).
detail::TileKernels pick_tile(DType w, Isa isa) {
  if (isa == Isa::avx512 && isa_supported(Isa::avx512)) return detail::tile_avx512(w);
  if (isa != Isa::scalar && isa_supported(Isa::avx2)) return detail::tile_avx2(w);
  return {};
}

// Per-thread scratch for the converted activations (reused between calls: no allocation per layer), from
// a 64-byte boundary: the kernels' 64-byte loads of it then never straddle two cache lines.
unsigned char* act_scratch(std::size_t bytes) {
  thread_local std::vector<unsigned char> buf;
  if (buf.size() < bytes + 64) buf.resize(bytes + 64);
  const auto address = reinterpret_cast<std::uintptr_t>(buf.data());
  return buf.data() + ((64 - address % 64) % 64);
}

void run_rows(std::int64_t n_out, tensor::ThreadPool* pool, tensor::FunctionRef<void(std::int64_t, std::int64_t)> fn) {
  // Rows in contiguous chunks (a few per thread) claimed dynamically: each chunk streams its part of W
  // front to back, and a thread the OS is slow to schedule does not hold up the step.
  constexpr std::int64_t kGrain = 16;
  if (pool == nullptr || pool->n_threads() == 1 || n_out < 2 * kGrain) {
    fn(0, n_out);
  } else {
    pool->parallel_for(n_out, fn, kGrain);
  }
}

}  // namespace

DType vec_dot_type(DType w) {
  switch (w) {
    case DType::f32:
    case DType::f16:
    case DType::bf16:
    case DType::nf4: return DType::f32;
    case DType::q4_0:
    case DType::q4_1:
    case DType::q5_0:
    case DType::q5_1:
    case DType::q8_0: return DType::q8_0;
    case DType::q2_K:
    case DType::q3_K:
    case DType::q4_K:
    case DType::q5_K:
    case DType::q6_K:
    case DType::q8_K: return DType::q8_K;
  }
  throw UnsupportedError("[kernels::vec_dot_type] unknown dtype " + std::to_string(static_cast<int>(w)));
}

float vec_dot_ref(DType w, std::int64_t n, const void* w_row, const void* x) {
  detail::check_row("vec_dot_ref", w, n);
  return pick_dot(w, Isa::scalar, "vec_dot_ref")(n, w_row, x);
}

float vec_dot(DType w, std::int64_t n, const void* w_row, const void* x, Isa isa) {
  detail::check_row("vec_dot", w, n);
  const detail::DotFn dot = pick_dot(w, isa, "vec_dot");
  const detail::TileKernels tile = pick_tile(w, isa);
  if (tile.pack == nullptr) return dot(n, w_row, x);
  thread_local std::vector<unsigned char> packed;
  packed.resize(tile.packed_bytes(n));
  tile.pack(x, packed.data(), n);
  return dot(n, w_row, packed.data());
}

void matvec_ref(const MatmulParams& p, const float* x, float* y) { matmul_ref(p, x, 1, y); }

void matvec(const MatmulParams& p, const float* x, float* y, tensor::ThreadPool* pool, Isa isa) {
  matmul(p, x, 1, y, pool, isa);
}

void matmul_ref(const MatmulParams& p, const float* x, std::int64_t n_tokens, float* y) {
  const std::size_t stride = detail::checked_row_stride(p, "matmul_ref");
  const detail::DotFn dot = pick_dot(p.w_type, Isa::scalar, "matmul_ref");
  const DType act = vec_dot_type(p.w_type);
  // Weights in another layout: each row back to plain blocks first.
  std::vector<unsigned char> plain(p.w_layout == WeightLayout::plain ? 0 : tensor::row_bytes(p.w_type, p.n_in));
  const std::size_t act_bytes = tensor::row_bytes(act, p.n_in);
  std::vector<unsigned char> xq(act_bytes * static_cast<std::size_t>(std::max<std::int64_t>(n_tokens, 0)));
  for (std::int64_t t = 0; t < n_tokens; ++t) {
    quantize_row_ref(act, x + t * p.n_in, xq.data() + static_cast<std::size_t>(t) * act_bytes, p.n_in);
  }
  const auto* w = static_cast<const unsigned char*>(p.w);
  for (std::int64_t t = 0; t < n_tokens; ++t) {
    for (std::int64_t r = 0; r < p.n_out; ++r) {
      const unsigned char* row = w + static_cast<std::size_t>(r) * stride;
      if (!plain.empty()) {
        unpack_weight_row(p.w_layout, p.w_type, row, p.n_in, plain.data());
        row = plain.data();
      }
      y[t * p.n_out + r] = dot(p.n_in, row, xq.data() + static_cast<std::size_t>(t) * act_bytes);
    }
  }
}

namespace {

// One weight matrix of a product, with its kernels resolved for the ISA and its converted activations.
struct Product {
  const unsigned char* w = nullptr;  // [n_out, n_in], rows stride apart
  std::size_t stride = 0;
  std::int64_t n_out = 0, n_in = 0;
  detail::DotFn dot = nullptr;
  detail::Dot4Fn dot4 = nullptr;      // one token, four rows per pass (f16 / bf16)
  detail::Dot4x3Fn dot4x3 = nullptr;  // three tokens, four rows (f16 / bf16)
  detail::Dot4xTFn dot4xt = nullptr;  // 1..4 tokens, four rows (quantized types)
  DType act = DType::f32;
  detail::PackFn pack = nullptr;      // the kernels' own layout of act rows, if any
  const unsigned char* xq = nullptr;  // [n_tokens] activation rows act_bytes apart
  std::size_t act_bytes = 0;
  float* y = nullptr;                 // [n_tokens, n_out]
};

Product prepare(const MatmulParams& p, std::int64_t n_tokens, float* y, Isa isa) {
  Product q;
  q.stride = detail::checked_row_stride(p, "matmul");
  q.w = static_cast<const unsigned char*>(p.w);
  q.n_out = p.n_out;
  q.n_in = p.n_in;
  const bool avx512 = isa == Isa::avx512 && isa_supported(Isa::avx512);
  if (p.w_layout == WeightLayout::q4_1_x16) {
    if (p.w_type != DType::q4_1) {
      throw ShapeError("[kernels::matmul] the q4_1_x16 layout holds q4_1 weights, not " +
                       std::string(tensor::dtype_name(p.w_type)));
    }
    // The layout's own kernels: one row at one token, four rows at more (same bits per (row, token)).
    const detail::TileKernels tile = avx512 ? detail::tile_q4_1_x16_avx512() : detail::TileKernels{};
    if (tile.dot == nullptr) {
      throw UnsupportedError(std::string("[kernels::matmul] weights in the q4_1_x16 layout need AVX-512/VNNI (isa ") +
                             std::string(isa_name(isa)) + ")");
    }
    q.dot = tile.dot;
    if (n_tokens >= 2) q.dot4xt = tile.dot4xt;
    q.act = vec_dot_type(p.w_type);
    q.pack = tile.pack;
    q.act_bytes = tile.packed_bytes(p.n_in);
    q.y = y;
    return q;
  }
  q.dot = pick_dot(p.w_type, isa, "matmul");
  q.dot4 = avx512 ? detail::dot4_avx512_fn(p.w_type) : nullptr;
  q.dot4x3 = q.dot4 != nullptr && n_tokens >= 3 ? detail::dot4x3_avx512_fn(p.w_type) : nullptr;
  // Quantized types: four rows x up to kDot4xTMaxTokens tokens per weight load (same bits per product as
  // dot). Not for one token: there the one-row kernel streams the weights faster (docs/cpu-kernels.md).
  const detail::TileKernels tile = pick_tile(p.w_type, isa);
  if (n_tokens >= 2) q.dot4xt = avx512 ? detail::dot4xt_avx512_fn(p.w_type) : tile.dot4xt;
  q.act = vec_dot_type(p.w_type);
  q.act_bytes = q.act == DType::f32 ? static_cast<std::size_t>(p.n_in) * sizeof(float)
                                    : tensor::row_bytes(q.act, p.n_in);
  if (tile.pack != nullptr) {
    q.pack = tile.pack;
    q.act_bytes = tile.packed_bytes(p.n_in);
  }
  q.y = y;
  return q;
}

// Rows [begin, end) of one product for every token.
void product_rows(const Product& p, std::int64_t n_tokens, std::int64_t begin, std::int64_t end) {
  const unsigned char* w = p.w;
  const unsigned char* xq = p.xq;
  const std::size_t stride = p.stride, act_bytes = p.act_bytes;
  const std::int64_t n_in = p.n_in, n_out = p.n_out;
  float* y = p.y;
  // Tokens in tiles so a block of weight rows stays in cache while every token of the tile uses it.
  constexpr std::int64_t kRowTile = 16, kTokenTile = 32;
  for (std::int64_t r0 = begin; r0 < end; r0 += kRowTile) {
    const std::int64_t r1 = std::min(end, r0 + kRowTile);
    for (std::int64_t t0 = 0; t0 < n_tokens; t0 += kTokenTile) {
      const std::int64_t t1 = std::min(n_tokens, t0 + kTokenTile);
      std::int64_t r = r0;
      if (p.dot4xt != nullptr) {
        for (; r + 4 <= r1; r += 4) {
          const unsigned char* wr = w + static_cast<std::size_t>(r) * stride;
          std::int64_t t = t0;
          for (; t + 1 < t1; t += detail::kDot4xTMaxTokens) {
            p.dot4xt(n_in, wr, stride, xq + static_cast<std::size_t>(t) * act_bytes, act_bytes,
                     static_cast<int>(std::min<std::int64_t>(detail::kDot4xTMaxTokens, t1 - t)), y + t * n_out + r,
                     static_cast<std::size_t>(n_out));
          }
          for (; t < t1; ++t) {  // a last lone token
            for (int k = 0; k < 4; ++k) {
              y[t * n_out + r + k] = p.dot(n_in, wr + static_cast<std::size_t>(k) * stride,
                                           xq + static_cast<std::size_t>(t) * act_bytes);
            }
          }
        }
      }
      if (p.dot4 != nullptr) {
        float out[4];
        for (; r + 4 <= r1; r += 4) {
          const unsigned char* wr = w + static_cast<std::size_t>(r) * stride;
          std::int64_t t = t0;
          if (p.dot4x3 != nullptr) {  // same bits per (row, token) as dot4: the token grouping is free
            for (; t + 3 <= t1; t += 3) {
              p.dot4x3(n_in, wr, stride, xq + static_cast<std::size_t>(t) * act_bytes, act_bytes, y + t * n_out + r,
                       static_cast<std::size_t>(n_out));
            }
          }
          for (; t < t1; ++t) {
            p.dot4(n_in, wr, stride, xq + static_cast<std::size_t>(t) * act_bytes, out);
            for (int k = 0; k < 4; ++k) y[t * n_out + r + k] = out[k];
          }
        }
      }
      for (; r < r1; ++r) {
        const unsigned char* wr = w + static_cast<std::size_t>(r) * stride;
        for (std::int64_t t = t0; t < t1; ++t) {
          y[t * n_out + r] = p.dot(n_in, wr, xq + static_cast<std::size_t>(t) * act_bytes);
        }
      }
    }
  }
}

}  // namespace

void matmul(const MatmulParams& p, const float* x, std::int64_t n_tokens, float* y, tensor::ThreadPool* pool, Isa isa) {
  matmul_multi({&p, 1}, x, n_tokens, {&y, 1}, pool, isa);
}

void matmul_multi(std::span<const MatmulParams> ps, const float* x, std::int64_t n_tokens, std::span<float* const> ys,
                  tensor::ThreadPool* pool, Isa isa) {
  if (ps.size() != ys.size()) {
    throw ShapeError("[kernels::matmul] " + std::to_string(ps.size()) + " weight matrices but " +
                     std::to_string(ys.size()) + " outputs");
  }
  if (n_tokens < 0) throw ShapeError("[kernels::matmul] negative n_tokens " + std::to_string(n_tokens));
  constexpr std::size_t kMaxProducts = 8;
  if (ps.size() > kMaxProducts) {
    throw ShapeError("[kernels::matmul] " + std::to_string(ps.size()) + " weight matrices in one call (at most " +
                     std::to_string(kMaxProducts) + ")");
  }
  Product prod[kMaxProducts];
  for (std::size_t i = 0; i < ps.size(); ++i) {
    if (i > 0 && ps[i].n_in != ps[0].n_in) {
      throw ShapeError("[kernels::matmul] weight matrix " + std::to_string(i) + " has rows of " +
                       std::to_string(ps[i].n_in) + ", the first " + std::to_string(ps[0].n_in));
    }
    prod[i] = prepare(ps[i], n_tokens, ys[i], isa);
  }
  if (n_tokens == 0 || ps.empty()) return;
  // The activations in each layout the products need (vec_dot_type, repacked or not), converted once.
  const std::int64_t n_in = ps[0].n_in;
  struct Layout {
    DType act;
    detail::PackFn pack;
    std::size_t row_bytes, offset;
  };
  Layout layouts[kMaxProducts];
  std::size_t n_layouts = 0, total = 0;
  auto find = [&](const Product& q) {
    std::size_t k = 0;
    while (k < n_layouts && !(layouts[k].act == q.act && layouts[k].pack == q.pack)) ++k;
    return k;
  };
  for (std::size_t i = 0; i < ps.size(); ++i) {
    if (prod[i].act == DType::f32 || find(prod[i]) < n_layouts) continue;
    layouts[n_layouts++] = {prod[i].act, prod[i].pack, prod[i].act_bytes, total};
    total += prod[i].act_bytes * static_cast<std::size_t>(n_tokens);
  }
  unsigned char* const scratch = act_scratch(total);
  for (std::size_t k = 0; k < n_layouts; ++k) {
    const Layout& l = layouts[k];
    unsigned char* dst = scratch + l.offset;
    auto convert = [&](std::int64_t t0, std::int64_t t1) {
      thread_local std::vector<unsigned char> tmp;
      tmp.resize(tensor::row_bytes(l.act, n_in));
      for (std::int64_t t = t0; t < t1; ++t) {
        unsigned char* row = dst + static_cast<std::size_t>(t) * l.row_bytes;
        if (l.pack == nullptr) {
          quantize_row(l.act, x + t * n_in, row, n_in, isa);
        } else {
          quantize_row(l.act, x + t * n_in, tmp.data(), n_in, isa);
          l.pack(tmp.data(), row, n_in);
        }
      }
    };
    // A prompt's rows in parallel (the products wait for them anyway); a few decode rows inline.
    constexpr std::int64_t kParallelRows = 16;
    if (pool != nullptr && n_tokens >= kParallelRows) {
      pool->parallel_for(n_tokens, convert, 4);
    } else {
      convert(0, n_tokens);
    }
  }
  for (std::size_t i = 0; i < ps.size(); ++i) {
    prod[i].xq = prod[i].act == DType::f32 ? reinterpret_cast<const unsigned char*>(x)
                                           : scratch + layouts[find(prod[i])].offset;
  }
  // Every product's rows as one range: one parallel region for the lot.
  std::int64_t first[kMaxProducts + 1] = {0};
  for (std::size_t i = 0; i < ps.size(); ++i) first[i + 1] = first[i] + prod[i].n_out;
  const std::size_t n_prod = ps.size();
  run_rows(first[n_prod], pool, [&](std::int64_t begin, std::int64_t end) {
    for (std::size_t i = 0; i < n_prod; ++i) {
      const std::int64_t b = std::max(begin, first[i]), e = std::min(end, first[i + 1]);
      if (b < e) product_rows(prod[i], n_tokens, b - first[i], e - first[i]);
    }
  });
}

namespace detail {

std::size_t checked_row_stride(const MatmulParams& p, const char* op) {
  if (p.n_out < 0 || p.n_in < 0) {
    throw ShapeError(std::string("[kernels::") + op + "] negative size [" + std::to_string(p.n_out) + ", " +
                     std::to_string(p.n_in) + "]");
  }
  check_row(op, p.w_type, p.n_in);
  const std::size_t dense = tensor::row_bytes(p.w_type, p.n_in);
  if (p.w_row_bytes != 0 && p.w_row_bytes < dense) {
    throw ShapeError(std::string("[kernels::") + op + "] w_row_bytes " + std::to_string(p.w_row_bytes) +
                     " is smaller than a row of " + std::to_string(p.n_in) + " " +
                     std::string(tensor::dtype_name(p.w_type)) + " (" + std::to_string(dense) + " bytes)");
  }
  if (p.w == nullptr && p.n_out > 0 && p.n_in > 0) {
    throw ShapeError(std::string("[kernels::") + op + "] null weight pointer");
  }
  return p.w_row_bytes != 0 ? p.w_row_bytes : dense;
}

}  // namespace detail
}  // namespace kernels
