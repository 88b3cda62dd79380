// `orchard bench kernels` entries of kernels/: matvec per weight type at Llama-3-8B shapes (the decode
// hot path: bandwidth-bound, so GB/s of weights against the measured read bandwidth), the same kernels
// on a matrix that fits in L2 (the arithmetic ceiling: above 100% there means the kernel has compute to
// spare and DRAM binds), and the element-wise kernels at model sizes.
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench_kernels.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "tensor/dtype.h"
#include "tensor/half.h"
#include "tensor/tensor.h"

namespace {

using orchard::cli::bench::Context;
using orchard::cli::bench::Result;
using tensor::DType;

struct Rng {
  std::uint64_t s = 0x9E3779B97F4A7C15ull;
  std::uint64_t next() {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s;
  }
  float uniform() { return static_cast<float>(next() >> 40) / static_cast<float>(1 << 24) * 2.0f - 1.0f; }
};

// Offsets of the f16 scale fields in each block (tensor/blocks.h).
std::vector<int> scale_offsets(DType t) {
  switch (t) {
    case DType::q4_0: case DType::q5_0: case DType::q8_0: return {0};
    case DType::q4_1: case DType::q5_1: case DType::q4_K: case DType::q5_K: return {0, 2};
    case DType::q2_K: return {80, 82};
    case DType::q3_K: return {108};
    case DType::q6_K: return {208};
    default: return {};
  }
}

// Weights of type t, [n_out, n_in]: random levels with small finite scales (as a real model has), in an
// aligned buffer. Random bytes are much faster to make than quantizing 58M floats.
tensor::Buffer make_weights(DType t, std::int64_t n_out, std::int64_t n_in) {
  const std::size_t bytes = tensor::row_bytes(t, n_in) * static_cast<std::size_t>(n_out);
  tensor::Buffer buf = tensor::Buffer::allocate(bytes);
  Rng rng;
  std::byte* p = buf.data();
  if (t == DType::f32) {
    for (std::size_t i = 0; i < bytes / 4; ++i) reinterpret_cast<float*>(p)[i] = rng.uniform() * 0.05f;
  } else if (t == DType::f16 || t == DType::bf16) {
    auto* h = reinterpret_cast<std::uint16_t*>(p);
    for (std::size_t i = 0; i < bytes / 2; ++i) {
      const float v = rng.uniform() * 0.05f;
      h[i] = t == DType::f16 ? tensor::f32_to_f16(v) : tensor::f32_to_bf16(v);
    }
  } else {
    for (std::size_t i = 0; i + 8 <= bytes; i += 8) {
      const std::uint64_t r = rng.next();
      std::memcpy(p + i, &r, 8);
    }
    const std::size_t bb = tensor::block_bytes(t);
    const std::vector<int> offs = scale_offsets(t);
    for (std::size_t b = 0; b < bytes / bb; ++b) {
      for (int off : offs) {
        const std::uint16_t h = tensor::f32_to_f16(rng.uniform() * 0.01f);
        std::memcpy(p + b * bb + static_cast<std::size_t>(off), &h, 2);
      }
    }
  }
  return buf;
}

// The fast matvec on the first rows must agree with the scalar reference before anything is timed.
void check_against_reference(const kernels::MatmulParams& p, const std::vector<float>& x, const std::vector<float>& y) {
  kernels::MatmulParams head = p;
  head.n_out = std::min<std::int64_t>(p.n_out, 48);
  std::vector<float> want(static_cast<std::size_t>(head.n_out));
  kernels::matvec_ref(head, x.data(), want.data());
  double scale = 1e-30, err = 0;
  for (std::int64_t i = 0; i < head.n_out; ++i) {
    scale = std::max(scale, std::fabs(static_cast<double>(want[i])));
    err = std::max(err, std::fabs(static_cast<double>(want[i]) - y[i]));
  }
  if (!(err / scale < 1e-4)) {
    throw std::runtime_error("[bench matvec] " + std::string(tensor::dtype_name(p.w_type)) +
                             ": fast result differs from the reference by " + std::to_string(err / scale));
  }
}

// Times y = W x. A decode step streams every layer's weights once, so unless `cached` the timed calls
// cycle through copies of W that together span at least 256 MiB and 4x the L3 (streaming_bytes): each
// call then reads its matrix from DRAM, as in a real forward pass, not from the last-level cache.
Result time_matvec(const Context& ctx, const char* kernel, DType t, std::int64_t n_out, std::int64_t n_in,
                   bool cached) {
  const tensor::Buffer first = make_weights(t, n_out, n_in);
  const std::size_t bytes = first.size();
  const std::size_t kWorkingSet = orchard::cli::bench::streaming_bytes(std::size_t{256} << 20);
  const std::size_t n_copies = cached ? 1 : std::max<std::size_t>(2, (kWorkingSet + bytes - 1) / bytes);
  std::vector<tensor::Buffer> copies{first};
  for (std::size_t c = 1; c < n_copies; ++c) {
    copies.push_back(tensor::Buffer::allocate(bytes));
    std::memcpy(copies.back().data(), first.data(), bytes);
  }
  std::vector<float> x(static_cast<std::size_t>(n_in)), y(static_cast<std::size_t>(n_out));
  Rng rng;
  for (float& v : x) v = rng.uniform();
  kernels::MatmulParams p{t, first.data(), 0, n_out, n_in};
  kernels::matvec(p, x.data(), y.data(), &ctx.pool);
  check_against_reference(p, x, y);
  std::size_t next = 0;
  const double s = ctx.time([&] {
    p.w = copies[next].data();
    next = next + 1 == n_copies ? 0 : next + 1;
    kernels::matvec(p, x.data(), y.data(), &ctx.pool);
  });
  return {kernel, std::string(tensor::dtype_name(t)), {n_out, n_in}, ctx.threads, static_cast<double>(bytes) / s / 1e9,
          "GB/s", ctx.limits.read_gbps};
}

// Each type is also selected alone by `--filter matvec/<type>` (e.g. matvec/q8_0).
bool wanted_type(const Context& ctx, DType t) { return ctx.wanted("matvec/" + std::string(tensor::dtype_name(t))); }

void bench_matvec(const Context& ctx, std::vector<Result>& out) {
  // The decode shapes of Llama-3-8B: attention projections, and the feed-forward up/gate and down.
  const std::int64_t shapes[][2] = {{4096, 4096}, {14336, 4096}, {4096, 14336}};
  const DType main_types[] = {DType::f16, DType::bf16, DType::q8_0, DType::q4_0, DType::q4_K, DType::q6_K};
  const DType other_types[] = {DType::f32, DType::q4_1, DType::q5_0, DType::q5_1, DType::q2_K, DType::q3_K, DType::q5_K};
  for (DType t : main_types) {
    if (!wanted_type(ctx, t)) continue;
    for (const auto& s : shapes) out.push_back(time_matvec(ctx, "matvec", t, s[0], s[1], false));
  }
  for (DType t : other_types) {
    if (wanted_type(ctx, t)) out.push_back(time_matvec(ctx, "matvec", t, 4096, 4096, false));
  }
}

void bench_matvec_cached(const Context& ctx, std::vector<Result>& out) {
  if (!ctx.wanted("matvec_cached")) return;
  // About 512 KiB of weights per thread: resident in L2, so the rate is what the arithmetic allows.
  const DType types[] = {DType::f16,  DType::bf16, DType::q8_0, DType::q4_0, DType::q4_1,
                         DType::q5_0, DType::q5_1, DType::q4_K, DType::q5_K, DType::q6_K};
  for (DType t : types) {
    const std::int64_t n_in = 4096;
    const std::int64_t rows = std::max<std::int64_t>(
        32, static_cast<std::int64_t>((std::size_t{512} << 10) * static_cast<std::size_t>(ctx.threads) /
                                      tensor::row_bytes(t, n_in)) / 16 * 16);
    out.push_back(time_matvec(ctx, "matvec_cached", t, rows, n_in, true));
  }
}

void bench_elementwise(const Context& ctx, std::vector<Result>& out) {
  Rng rng;
  auto filled = [&](std::size_t n) {
    std::vector<float> v(n);
    for (float& f : v) f = rng.uniform() * 3.0f;
    return v;
  };
  // Single-threaded kernels (per-row work of a decode step); bytes = inputs read + output written.
  if (ctx.wanted("rms_norm") && ctx.threads == 1) {
    const std::int64_t n = 4096;
    const std::vector<float> x = filled(n), w = filled(n);
    std::vector<float> y(n);
    const kernels::NormParams p{1, n, 1e-5f};
    const double s = ctx.time([&] { kernels::rms_norm(p, x.data(), w.data(), y.data()); });
    out.push_back({"rms_norm", "f32", {1, n}, 1, 3.0 * n * 4 / s / 1e9, "GB/s", ctx.limits.read_gbps});
  }
  if (ctx.wanted("swiglu") && ctx.threads == 1) {
    const std::int64_t n = 14336;
    const std::vector<float> g = filled(n), u = filled(n);
    std::vector<float> y(n);
    const double s = ctx.time([&] { kernels::swiglu({n}, g.data(), u.data(), y.data()); });
    out.push_back({"swiglu", "f32", {n}, 1, 3.0 * n * 4 / s / 1e9, "GB/s", ctx.limits.read_gbps});
  }
  if (ctx.wanted("softmax") && ctx.threads == 1) {
    const std::int64_t n = 128256;  // a Llama 3 vocabulary of logits
    const std::vector<float> x = filled(n);
    std::vector<float> y(n);
    const double s = ctx.time([&] { kernels::softmax({1, n, 1.0f}, x.data(), y.data()); });
    out.push_back({"softmax", "f32", {1, n}, 1, 2.0 * n * 4 / s / 1e9, "GB/s", ctx.limits.read_gbps});
  }
}

const orchard::cli::bench::Registrar kMatvec("matvec", bench_matvec);
const orchard::cli::bench::Registrar kMatvecCached("matvec_cached", bench_matvec_cached);
const orchard::cli::bench::Registrar kElementwise("elementwise", bench_elementwise);

}  // namespace
