// The CUDA kernel lab (see cuda_lab.h): random paged caches, the CPU references of pal, exact checks for
// the data-movement kernels.
#include "cuda_lab.h"

#include <kernels/cuda/bitmask_cuda.h>
#include <pal/attention.h>
#include <pal/cuda/attention_cuda.h>
#include <pal/cuda/kv_write_cuda.h>
#include <pal/rope.h>
#include <tensor/cuda/device.h>
#include <tensor/cuda/memory_pool.h>
#include <tensor/half.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <sstream>

namespace orchard::cuda_lab {
namespace {

using tensor::DType;
using tensor::cuda::DeviceBuffer;
using tensor::cuda::MemoryPool;

template <typename T>
DeviceBuffer upload(const std::vector<T>& v) {
  DeviceBuffer b = MemoryPool::global().allocate(std::max<std::size_t>(1, v.size() * sizeof(T)));
  b.copy_from_host(v.data(), v.size() * sizeof(T));
  return b;
}

template <typename T>
std::vector<T> download(const DeviceBuffer& b, std::size_t n) {
  std::vector<T> v(n);
  b.copy_to_host(v.data(), n * sizeof(T));
  return v;
}

DeviceBuffer poisoned(std::size_t bytes) {
  DeviceBuffer b = MemoryPool::global().allocate(bytes);
  b.fill_bytes(0xff);  // NaN in f32, f16 and bf16
  return b;
}

const char* dname(DType t) { return t == DType::bf16 ? "bf16" : t == DType::f16 ? "f16" : "f32"; }
std::size_t element_bytes(DType t) { return t == DType::f32 ? 4 : 2; }

// KV elements as the device holds them (f32, f16 or bf16), as raw bytes.
struct KvElements {
  DType dtype = DType::f16;
  std::vector<std::uint8_t> bytes;

  KvElements(DType t, std::size_t n) : dtype(t), bytes(n * element_bytes(t)) {}
  // Stores x rounded to the type.
  void set(std::size_t i, float x) {
    if (dtype == DType::f32) {
      std::memcpy(bytes.data() + 4 * i, &x, 4);
      return;
    }
    const std::uint16_t b = dtype == DType::bf16 ? tensor::f32_to_bf16(x) : tensor::f32_to_f16(x);
    std::memcpy(bytes.data() + 2 * i, &b, 2);
  }
  float at(std::size_t i) const {
    if (dtype == DType::f32) {
      float x;
      std::memcpy(&x, bytes.data() + 4 * i, 4);
      return x;
    }
    std::uint16_t b;
    std::memcpy(&b, bytes.data() + 2 * i, 2);
    return dtype == DType::bf16 ? tensor::bf16_to_f32(b) : tensor::f16_to_f32(b);
  }
  // Whether element i holds exactly x rounded to the type (bit for bit).
  bool holds(std::size_t i, float x) const {
    KvElements one(dtype, 1);
    one.set(0, x);
    return std::memcmp(bytes.data() + i * element_bytes(dtype), one.bytes.data(), element_bytes(dtype)) == 0;
  }
  // Whether element i still holds the poison (all bytes 0xff).
  bool poisoned(std::size_t i) const {
    const std::size_t w = element_bytes(dtype);
    return std::all_of(bytes.begin() + static_cast<std::ptrdiff_t>(i * w),
                       bytes.begin() + static_cast<std::ptrdiff_t>((i + 1) * w), [](std::uint8_t b) { return b == 0xff; });
  }
};

KvElements download_kv(const DeviceBuffer& b, DType t, std::size_t n) {
  KvElements e(t, n);
  b.copy_to_host(e.bytes.data(), e.bytes.size());
  return e;
}

// ||out - ref|| / ||ref||; flags the first non-finite output.
void compare(const float* out, const float* ref, std::size_t n, CaseResult& r) {
  double num = 0.0, den = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    if (!std::isfinite(out[i])) {
      if (!r.unwritten) {
        std::ostringstream ss;
        ss << "element " << i << " is " << out[i] << " (reference " << ref[i] << ")";
        r.detail = ss.str();
      }
      r.unwritten = true;
      continue;
    }
    const double d = static_cast<double>(out[i]) - ref[i];
    num += d * d;
    den += static_cast<double>(ref[i]) * ref[i];
  }
  r.error = std::max(r.error, den > 0.0 ? std::sqrt(num / den) : std::sqrt(num));
}

std::vector<float> randn(std::mt19937_64& rng, std::size_t n, float sigma = 1.0f) {
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// A paged cache on the host: pages as the GPU holds them (f32, f16 or bf16) and their exact f32 copy for the
// reference.
struct Paged {
  DType dtype = DType::bf16;
  int n_kv_heads = 0, head_dim = 0, n_pages = 0;
  KvElements kdev{DType::bf16, 0}, vdev{DType::bf16, 0};
  std::vector<float> k32, v32;
  std::vector<std::int32_t> indptr, indices, lens;

  pal::PagedKv host_view() const {
    pal::PagedKv kv;
    kv.k_pages = k32.data();
    kv.v_pages = v32.data();
    kv.dtype = DType::f32;
    kv.n_pages = n_pages;
    kv.n_kv_heads = n_kv_heads;
    kv.head_dim = head_dim;
    kv.n_seqs = static_cast<std::int32_t>(lens.size());
    kv.page_indptr = indptr.data();
    kv.page_indices = indices.data();
    kv.seq_lens = lens.data();
    return kv;
  }
};

Paged make_paged(std::mt19937_64& rng, const std::vector<std::int32_t>& lens, int n_kv_heads, int head_dim,
                 DType dtype, int spare_pages) {
  Paged p;
  p.dtype = dtype;
  p.n_kv_heads = n_kv_heads;
  p.head_dim = head_dim;
  p.lens = lens;
  int used = 0;
  p.indptr.push_back(0);
  for (auto len : lens) {
    used += (len + 15) / 16;
    p.indptr.push_back(used);
  }
  p.n_pages = used + spare_pages;
  std::vector<std::int32_t> perm(static_cast<std::size_t>(p.n_pages));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  p.indices.assign(perm.begin(), perm.begin() + used);
  const std::size_t n = static_cast<std::size_t>(p.n_pages) * 16 * n_kv_heads * head_dim;
  const auto k = randn(rng, n), v = randn(rng, n);
  p.kdev = KvElements(dtype, n);
  p.vdev = KvElements(dtype, n);
  p.k32.resize(n);
  p.v32.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    p.kdev.set(i, k[i]);
    p.vdev.set(i, v[i]);
    p.k32[i] = p.kdev.at(i);
    p.v32[i] = p.vdev.at(i);
  }
  return p;
}

struct DevPaged {
  DeviceBuffer k, v, indptr, indices, lens;
  pal::PagedKv kv;
  explicit DevPaged(const Paged& p)
      : k(upload(p.kdev.bytes)), v(upload(p.vdev.bytes)), indptr(upload(p.indptr)), indices(upload(p.indices)), lens(upload(p.lens)) {
    kv.k_pages = k.as<void>();
    kv.v_pages = v.as<void>();
    kv.dtype = p.dtype;
    kv.n_pages = p.n_pages;
    kv.n_kv_heads = p.n_kv_heads;
    kv.head_dim = p.head_dim;
    kv.n_seqs = static_cast<std::int32_t>(p.lens.size());
    kv.page_indptr = indptr.as<std::int32_t>();
    kv.page_indices = indices.as<std::int32_t>();
    kv.seq_lens = lens.as<std::int32_t>();
  }
};

struct AttnCase {
  DType dtype;
  int head_dim, n_q_heads, n_kv_heads;
  std::vector<std::int32_t> lens;
  std::vector<std::int32_t> q_lens;  // prefill only
  float soft_cap = 0.0f;
  int window = 0;
  int chunk = 0;      // decode tuning; prefill: warps per block
  bool simt = false;  // decode: the SIMT kernel where the tensor-core one would run
  int rows = 0;       // prefill: query rows per warp (16 or 32; 0: the default)
};

std::string describe(const char* op, const AttnCase& c) {
  std::ostringstream ss;
  ss << op << ' ' << dname(c.dtype) << " d" << c.head_dim << " q_heads=" << c.n_q_heads << " kv_heads=" << c.n_kv_heads
     << " lens=[";
  for (std::size_t i = 0; i < c.lens.size(); ++i) {
    ss << (i ? "," : "") << c.lens[i];
    if (!c.q_lens.empty()) ss << "/q" << c.q_lens[i];
  }
  ss << "]";
  if (c.soft_cap > 0) ss << " soft_cap=" << c.soft_cap;
  if (c.window > 0) ss << " window=" << c.window;
  if (c.chunk > 0) ss << (c.q_lens.empty() ? " chunk=" : " warps=") << c.chunk;
  if (c.simt) ss << " simt";
  if (c.rows > 0) ss << " rows_per_warp=" << c.rows;
  return ss.str();
}

CaseResult run_decode(std::mt19937_64& rng, const AttnCase& c) {
  CaseResult r;
  r.name = describe("decode", c);
  // The SIMT kernel (head_dim 256, f32 KV, or asked for) does f32 arithmetic on the same KV values as the
  // reference; the tensor-core kernel also rounds q and the softmax weights to the KV type.
  const bool simt = c.simt || c.head_dim > 128 || c.dtype == DType::f32;
  r.tolerance = simt ? 1e-3 : 1e-2;
  const Paged host = make_paged(rng, c.lens, c.n_kv_heads, c.head_dim, c.dtype, 3);
  DevPaged dev(host);
  pal::AttentionParams params;
  params.n_q_heads = c.n_q_heads;
  params.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  params.logit_soft_cap = c.soft_cap;
  params.sliding_window = c.window;
  const std::size_t n = c.lens.size() * c.n_q_heads * c.head_dim;
  const auto q = randn(rng, n);
  std::vector<float> ref(n);
  pal::decode_attention_ref(host.host_view(), params, {q.data(), ref.data()});
  DeviceBuffer dq = upload(q);
  DeviceBuffer dout = poisoned(n * sizeof(float));
  pal::cuda::DecodeTuning tuning;
  tuning.chunk = c.chunk;
  tuning.simt = c.simt;
  pal::cuda::decode_attention(dev.kv, params, {dq.as<float>(), dout.as<float>()},
                              *std::max_element(c.lens.begin(), c.lens.end()), nullptr, tuning);
  tensor::cuda::synchronize();
  const auto out = download<float>(dout, n);
  compare(out.data(), ref.data(), n, r);
  return r;
}

CaseResult run_prefill(std::mt19937_64& rng, const AttnCase& c) {
  CaseResult r;
  r.name = describe("prefill", c);
  // 16-bit KV: Q and P rounded to the KV type for the tensor cores; f32 KV: the SIMT kernel's f32 arithmetic.
  r.tolerance = c.dtype == DType::f32 ? 1e-4 : 1e-2;
  const Paged host = make_paged(rng, c.lens, c.n_kv_heads, c.head_dim, c.dtype, 2);
  DevPaged dev(host);
  pal::AttentionParams params;
  params.n_q_heads = c.n_q_heads;
  params.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  params.logit_soft_cap = c.soft_cap;
  params.sliding_window = c.window;
  std::vector<std::int32_t> qo{0};
  for (auto ql : c.q_lens) qo.push_back(qo.back() + ql);
  const std::size_t n = static_cast<std::size_t>(qo.back()) * c.n_q_heads * c.head_dim;
  const auto q = randn(rng, n);
  std::vector<float> ref(n);
  pal::prefill_attention_ref(host.host_view(), params, {qo.data(), q.data(), ref.data()});
  DeviceBuffer dq = upload(q), dqo = upload(qo);
  DeviceBuffer dout = poisoned(n * sizeof(float));
  pal::cuda::PrefillTuning tuning;
  tuning.warps = c.chunk;
  tuning.rows_per_warp = c.rows;
  pal::cuda::prefill_attention(dev.kv, params, {dqo.as<std::int32_t>(), dq.as<float>(), dout.as<float>()},
                               *std::max_element(c.q_lens.begin(), c.q_lens.end()), nullptr, tuning,
                               *std::max_element(c.lens.begin(), c.lens.end()));
  tensor::cuda::synchronize();
  const auto out = download<float>(dout, n);
  compare(out.data(), ref.data(), n, r);
  return r;
}

}  // namespace

std::vector<CaseResult> check_decode(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> len4k(1, 4000), len700(1, 700);
  std::vector<AttnCase> cases = {
      {DType::bf16, 128, 32, 8, {len4k(rng), len4k(rng), len4k(rng)}, {}},
      {DType::f16, 64, 8, 8, {1, len700(rng), len700(rng), 16, 17}, {}},
      {DType::bf16, 256, 16, 2, {len700(rng) + 300, 33}, {}},
      {DType::f16, 128, 8, 2, {3000, len4k(rng)}, {}, 30.0f, 500},
      {DType::bf16, 128, 32, 8, {20000}, {}},
      {DType::bf16, 64, 4, 1, {len700(rng), len700(rng)}, {}, 0.0f, 0, 64},
      {DType::f16, 256, 8, 8, {len700(rng)}, {}, 0.0f, 100},
      {DType::bf16, 128, 32, 8, {len4k(rng), len4k(rng)}, {}, 0.0f, 0, 0, true},
      {DType::f16, 64, 8, 2, {len700(rng), 3000}, {}, 25.0f, 300, 0, true},
      {DType::bf16, 128, 32, 2, {len4k(rng), 5}, {}},   // 16 query heads per KV head: a full MMA tile
      {DType::f16, 128, 8, 8, {len4k(rng), 1, 31}, {}, 0.0f, 0, 128},
      // An odd count of KV heads (7), two query heads each.
      {DType::f16, 128, 14, 7, {len4k(rng) + 2000}, {}},
      // Many splits (up to 110 per sequence, several rounds of the last block's merge), a window that empties
      // the first splits, and short sequences whose later splits are empty.
      {DType::bf16, 128, 32, 8, {len4k(rng) + 3000, 5, 700}, {}, 0.0f, 1000, 64},
      {DType::bf16, 256, 16, 2, {len4k(rng) + 1000, 40}, {}, 0.0f, 0, 64},
      // f32 KV (the SIMT kernel) at every head dim: one split and many, a window and a soft cap, GQA.
      {DType::f32, 64, 9, 3, {1, len700(rng), len4k(rng), 17}, {}},
      {DType::f32, 128, 32, 8, {len4k(rng) + 3000, 5, 700}, {}, 0.0f, 1000, 64},
      {DType::f32, 256, 16, 2, {len700(rng) + 300, 33}, {}, 30.0f, 0},
      {DType::f32, 64, 8, 1, {len4k(rng), 40}, {}, 0.0f, 0, 64},
  };
  std::vector<CaseResult> out;
  for (const auto& c : cases) out.push_back(run_decode(rng, c));
  return out;
}

std::vector<CaseResult> check_prefill(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<AttnCase> cases = {
      {DType::bf16, 128, 8, 2, {100, 300}, {100, 37}},
      {DType::f16, 64, 4, 4, {64, 1000, 5}, {64, 130, 5}},
      {DType::bf16, 256, 4, 1, {200}, {70}},
      {DType::bf16, 128, 4, 2, {160}, {90}, 20.0f, 50},
      {DType::f16, 128, 8, 8, {129}, {129}},
      {DType::bf16, 128, 8, 2, {300, 700}, {300, 200}, 0.0f, 0, 8},  // 8 warps per block
      {DType::f16, 64, 4, 1, {100}, {100}, 10.0f, 40, 8},
      {DType::bf16, 128, 8, 2, {300, 700}, {300, 200}, 0.0f, 0, 0, false, 16},  // one m16 tile per warp
      {DType::f16, 128, 4, 2, {500}, {333}, 0.0f, 70, 8, false, 16},
      // f32 KV (the split kernel over query rows) at every head dim: whole prompts and chunks over cached
      // tokens, a one-row sequence, a window and a soft cap.
      {DType::f32, 64, 9, 3, {64, 1000, 5}, {64, 130, 1}},
      {DType::f32, 128, 8, 2, {300, 700}, {300, 200}, 20.0f, 50},
      {DType::f32, 256, 4, 1, {200, 17}, {70, 17}},
  };
  std::vector<CaseResult> out;
  for (const auto& c : cases) out.push_back(run_prefill(rng, c));
  return out;
}

std::vector<CaseResult> check_rope_append(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  struct RopeCase {
    DType dtype;
    pal::RopeConfig config;
    bool with_q;
    bool plain_append = false;  // kv_append: no rotation at all
  };
  auto cfg = [](int head_dim, int rotary_dim, pal::RopeLayout layout, pal::RopeScaling scaling, double factor,
                int orig) {
    pal::RopeConfig c;
    c.head_dim = head_dim;
    c.rotary_dim = rotary_dim;
    c.layout = layout;
    c.scaling = scaling;
    c.factor = factor;
    c.original_max_position = orig;
    c.seq_len = 20000;
    c.theta = head_dim == 256 ? 1000000.0 : 10000.0;
    return c;
  };
  using L = pal::RopeLayout;
  using S = pal::RopeScaling;
  std::vector<RopeCase> cases = {
      {DType::bf16, cfg(128, 128, L::neox, S::none, 1.0, 0), true},
      {DType::f16, cfg(64, 32, L::gptj, S::linear, 2.0, 0), true},
      {DType::bf16, cfg(128, 64, L::neox, S::ntk, 4.0, 0), true},
      {DType::bf16, cfg(128, 128, L::neox, S::yarn, 4.0, 4096), true},
      {DType::f16, cfg(128, 128, L::gptj, S::llama3, 8.0, 8192), true},
      {DType::bf16, cfg(256, 256, L::neox, S::dynamic_ntk, 2.0, 4096), false},
      {DType::bf16, cfg(64, 20, L::neox, S::none, 1.0, 0), true},   // rotary_dim % 8 != 0: the scalar kernel
      {DType::f16, cfg(128, 36, L::gptj, S::linear, 4.0, 0), true},  // likewise
      {DType::bf16, cfg(128, 128, L::neox, S::none, 1.0, 0), false, true},
      {DType::f32, cfg(64, 64, L::neox, S::none, 1.0, 0), true},
      {DType::f32, cfg(128, 128, L::gptj, S::yarn, 4.0, 4096), true},
      {DType::f32, cfg(256, 256, L::neox, S::dynamic_ntk, 2.0, 4096), false},
      {DType::f32, cfg(64, 20, L::neox, S::none, 1.0, 0), true},  // the scalar kernel
      {DType::f32, cfg(128, 128, L::neox, S::none, 1.0, 0), false, true},
  };
  std::vector<CaseResult> out;
  for (const auto& rc : cases) {
    const auto& c = rc.config;
    const int n_tokens = 37, n_q = 8, n_kv = 2, n_pages = 11;
    std::ostringstream name;
    name << "rope_append " << dname(rc.dtype) << " d" << c.head_dim << " rot" << c.rotary_dim
         << (c.layout == L::gptj ? " gptj" : " neox") << " scaling=" << static_cast<int>(c.scaling)
         << (rc.with_q ? "" : " k-only") << (rc.plain_append ? " kv_append (no rotation)" : "");
    std::uniform_int_distribution<int> pos_dist(0, 40000);
    std::vector<std::int32_t> pos(n_tokens), slots(n_pages * 16);
    for (auto& p : pos) p = pos_dist(rng);
    std::iota(slots.begin(), slots.end(), 0);
    std::shuffle(slots.begin(), slots.end(), rng);
    slots.resize(n_tokens);
    const std::size_t nq = static_cast<std::size_t>(n_tokens) * n_q * c.head_dim;
    const std::size_t nk = static_cast<std::size_t>(n_tokens) * n_kv * c.head_dim;
    const std::size_t pool = static_cast<std::size_t>(n_pages) * 16 * n_kv * c.head_dim;
    auto q = randn(rng, nq), k = randn(rng, nk), v = randn(rng, nk);
    DeviceBuffer dq = upload(q), dk = upload(k), dv = upload(v), dpos = upload(pos), dslots = upload(slots);
    DeviceBuffer kp = poisoned(pool * element_bytes(rc.dtype)), vp = poisoned(pool * element_bytes(rc.dtype));
    pal::cuda::KvWriteArgs kv{rc.dtype, n_kv, c.head_dim, kp.as<void>(), vp.as<void>()};
    if (rc.plain_append) {
      pal::cuda::kv_append(kv, dk.as<float>(), dv.as<float>(), dslots.as<std::int32_t>(), n_tokens);
    } else {
      pal::cuda::rope_append(c, kv, rc.with_q ? dq.as<float>() : nullptr, dk.as<float>(), dv.as<float>(),
                             dpos.as<std::int32_t>(), dslots.as<std::int32_t>(), n_tokens, rc.with_q ? n_q : 0);
    }
    tensor::cuda::synchronize();

    CaseResult r;
    r.name = name.str();
    r.tolerance = 1e-5;  // the f32 queries; K pages are checked to one rounding to the KV type below
    if (rc.with_q) {
      std::vector<float> qref = q;
      pal::rope_ref(c, pos.data(), qref.data(), n_tokens, n_q);
      const auto qout = download<float>(dq, nq);
      compare(qout.data(), qref.data(), nq, r);
    }
    std::vector<float> kref = k;
    if (!rc.plain_append) pal::rope_ref(c, pos.data(), kref.data(), n_tokens, n_kv);
    const KvElements kpages = download_kv(kp, rc.dtype, pool), vpages = download_kv(vp, rc.dtype, pool);
    std::vector<bool> written(pool, false);
    double knum = 0, kden = 0;
    for (int t = 0; t < n_tokens; ++t) {
      for (std::size_t i = 0; i < static_cast<std::size_t>(n_kv) * c.head_dim; ++i) {
        const std::size_t dst = static_cast<std::size_t>(slots[t]) * n_kv * c.head_dim + i;
        written[dst] = true;
        const float kg = kpages.at(dst);
        if (rc.plain_append && !kpages.holds(dst, k[t * n_kv * c.head_dim + i]) && !r.unwritten) {
          r.unwritten = true;
          r.detail = "K element " + std::to_string(i) + " of token " + std::to_string(t) + " differs";
        }
        const float kr = kref[t * n_kv * c.head_dim + i];
        knum += (kg - kr) * static_cast<double>(kg - kr);
        kden += static_cast<double>(kr) * kr;
        if (!vpages.holds(dst, v[t * n_kv * c.head_dim + i]) && !r.unwritten) {
          r.unwritten = true;
          r.detail = "V element " + std::to_string(i) + " of token " + std::to_string(t) + " differs";
        }
      }
    }
    const double kerr = std::sqrt(knum / kden);
    // One rounding to 16 bits, or (f32) the rotation's own f32 arithmetic.
    if (!(kerr <= (rc.dtype == DType::f32 ? 1e-5 : 1e-2))) {
      r.unwritten = true;
      r.detail += " K pages off by " + std::to_string(kerr);
    }
    for (std::size_t i = 0; i < pool; ++i) {
      if (!written[i] && (!kpages.poisoned(i) || !vpages.poisoned(i)) && !r.unwritten) {
        r.unwritten = true;
        r.detail = "slot element " + std::to_string(i) + " outside the appended tokens was written";
      }
    }
    out.push_back(r);
  }
  return out;
}

std::vector<CaseResult> check_copy_pages(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<CaseResult> out;
  for (DType dt : {DType::bf16, DType::f16, DType::f32}) {
    for (int d : {64, 128, 256}) {
      const int n_kv = 4, n_pages = 20;
      const Paged host = make_paged(rng, {n_pages * 16}, n_kv, d, dt, 0);
      DevPaged dev(host);
      std::vector<std::int32_t> ids(n_pages);
      std::iota(ids.begin(), ids.end(), 0);
      std::shuffle(ids.begin(), ids.end(), rng);
      const std::vector<std::int32_t> src(ids.begin(), ids.begin() + 5), dst(ids.begin() + 5, ids.begin() + 10);
      DeviceBuffer dsrc = upload(src), ddst = upload(dst);
      pal::cuda::KvWriteArgs kv{dt, n_kv, d, dev.k.as<void>(), dev.v.as<void>()};
      pal::cuda::copy_pages(kv, dsrc.as<std::int32_t>(), ddst.as<std::int32_t>(), 5);
      tensor::cuda::synchronize();
      auto kexp = host.kdev.bytes, vexp = host.vdev.bytes;
      const std::size_t page = 16 * static_cast<std::size_t>(n_kv) * d * element_bytes(dt);
      for (int i = 0; i < 5; ++i) {
        std::copy_n(host.kdev.bytes.begin() + src[i] * page, page, kexp.begin() + dst[i] * page);
        std::copy_n(host.vdev.bytes.begin() + src[i] * page, page, vexp.begin() + dst[i] * page);
      }
      CaseResult r;
      r.name = std::string("copy_pages ") + dname(dt) + " d" + std::to_string(d);
      if (download<std::uint8_t>(dev.k, kexp.size()) != kexp || download<std::uint8_t>(dev.v, vexp.size()) != vexp) {
        r.unwritten = true;
        r.detail = "pages differ from the expected copy";
      }
      out.push_back(r);
    }
  }
  return out;
}

std::vector<CaseResult> check_bitmask(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  struct BmCase {
    int rows, vocab, mask_tokens;
  };
  const std::vector<BmCase> cases = {{4, 128256, 128256}, {3, 128320, 128256}, {5, 32000, 32000},
                                     {2, 1001, 1001},     {3, 1003, 990},      {2, 256, 300}};
  std::vector<CaseResult> out;
  for (const auto& c : cases) {
    const int words = (c.mask_tokens + 31) / 32;
    std::vector<std::uint32_t> mask(static_cast<std::size_t>(c.rows) * words);
    for (auto& w : mask) w = static_cast<std::uint32_t>(rng()) | (rng() % 4 == 0 ? 0xffffffffu : 0u);
    const auto logits = randn(rng, static_cast<std::size_t>(c.rows) * c.vocab);
    DeviceBuffer dl = upload(logits), dm = upload(mask);
    kernels::cuda::apply_bitmask(dl.as<float>(), dm.as<std::uint32_t>(), c.rows, c.vocab, words, c.mask_tokens);
    tensor::cuda::synchronize();
    const auto got = download<float>(dl, logits.size());
    CaseResult r;
    r.name = "bitmask rows=" + std::to_string(c.rows) + " vocab=" + std::to_string(c.vocab) +
             " mask_tokens=" + std::to_string(c.mask_tokens);
    for (int row = 0; row < c.rows && !r.unwritten; ++row) {
      for (int t = 0; t < c.vocab; ++t) {
        const std::size_t i = static_cast<std::size_t>(row) * c.vocab + t;
        const bool allowed = t < c.mask_tokens && ((mask[row * words + t / 32] >> (t % 32)) & 1u);
        const float want = allowed ? logits[i] : -INFINITY;
        if (std::memcmp(&want, &got[i], sizeof(float)) != 0) {
          r.unwritten = true;
          r.detail = "row " + std::to_string(row) + " token " + std::to_string(t) + ": got " +
                     std::to_string(got[i]) + ", want " + std::to_string(want);
          break;
        }
      }
    }
    out.push_back(r);
  }
  return out;
}

std::vector<CaseResult> check_all(std::uint64_t seed) {
  std::vector<CaseResult> all;
  for (auto* f : {check_decode, check_prefill, check_rope_append, check_copy_pages, check_bitmask}) {
    auto part = f(seed++);
    all.insert(all.end(), part.begin(), part.end());
  }
  return all;
}

}  // namespace orchard::cuda_lab
