// The CUDA backend (pie/src/backend/cuda): its kernels against their CPU references on fresh random inputs
// with poisoned outputs (every weight type's product and embedding, RMSNorm, the element-wise ops), whole
// models against the CPU backend (the llama / mistral / qwen2 / qwen3 test models, stories260K, the
// random-weight model in every weight type: logits within 1e-2 absolute (0.5 for q8_0, q4_0, q4_1, whose products
// round the activations to 8 bits), greedy continuations equal
// wherever the CPU's top-two margin exceeds 1e-2; the same with every product on tensor cores (cuBLAS,
// activations rounded to 16 bits: 2e-2 for f16, 3e-2 for the block types, 0.12 for bf16); the real default
// model when the store holds it, within 5e-2), steps captured as CUDA graphs equal to plain launches bit
// for bit (with and without cuBLAS), a sequence's logits the same bits alone or among other sequences'
// prefill chunks and decode rows (the test models), the engine on CUDA (a
// constrained generation that validates, continuous batching equal to each request alone), and the errors:
// no GPU when cuda is asked for, a model larger than the GPU's free memory. The GPU tests skip with the
// reason where CUDA cannot be used; the error tests of a machine without a GPU run everywhere.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <nlohmann/json.hpp>
#include <random>

#include "device_buffers.h"
#include "require_gpu.h"
#include "../engine/engine_test_util.h"
#include "default_model.h"
#include "shared_data.h"
#include "kernels/quant.h"
#include "pie/backend.h"
#include "pie/engine.h"
#include "pie/model.h"
#include "pie/runner.h"
#include "pie/speculation.h"
#include "pse/json_schema.h"
#include "pse/regex.h"
#include "runner_test_util.h"
#include "tensor/cuda/blas.h"
#include "tensor/cuda/device.h"
#include "tensor/cuda/memory_pool.h"

namespace pie::testing {
namespace {

using orchard::testing::to_host;

using tensor::DType;
namespace tc = tensor::cuda;

// The committed test models; ORCHARD_RUNNER_TEST_MODELS in the environment overrides the build's path
// (a copy of the tree elsewhere, e.g. on a GPU machine).
std::filesystem::path model_dir(const std::string& name) {
  const char* env = std::getenv("ORCHARD_RUNNER_TEST_MODELS");
  return env != nullptr ? std::filesystem::path(env) / name : test_model_dir(name);
}

std::vector<float> random_floats(std::size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// A device buffer holding `host`, or n floats of NaN (poison) when host is empty.
tc::DeviceBuffer device_floats(const std::vector<float>& host, std::size_t n = 0) {
  const std::size_t count = host.empty() ? n : host.size();
  tc::DeviceBuffer b = tc::MemoryPool::global().allocate(count * sizeof(float));
  if (host.empty()) {
    b.fill_bytes(0xFF);
  } else {
    b.copy_from_host(host.data(), count * sizeof(float));
  }
  return b;
}

Rows rows_of(const tc::DeviceBuffer& b, std::int64_t n_rows, std::int64_t n_cols) {
  return {b.as<float>(), n_rows, n_cols};
}

// A [n_out, n_in] matrix of `type` from random values, and its dequantized values (the reference's).
struct TestMatrix {
  std::vector<std::uint8_t> bytes;
  std::vector<float> values;
};

TestMatrix random_matrix(DType type, std::int64_t n_out, std::int64_t n_in, std::mt19937& rng) {
  TestMatrix m;
  const std::size_t row = tensor::row_bytes(type, n_in);
  m.bytes.resize(row * static_cast<std::size_t>(n_out));
  m.values.resize(static_cast<std::size_t>(n_out * n_in));
  const std::vector<float> src = random_floats(static_cast<std::size_t>(n_out * n_in), rng);
  for (std::int64_t r = 0; r < n_out; ++r) {
    kernels::quantize_row_ref(type, src.data() + r * n_in, m.bytes.data() + static_cast<std::size_t>(r) * row, n_in);
    kernels::dequantize_row_ref(type, m.bytes.data() + static_cast<std::size_t>(r) * row,
                                m.values.data() + r * n_in, n_in);
  }
  return m;
}

// The matrix uploaded through the backend (as a model's embedding table), so the kernels see it as they
// see model weights.
struct UploadedMatrix {
  std::shared_ptr<Model> host;
  std::shared_ptr<const ModelWeights> device;
  const Weight& weight() const { return device->token_embd; }
};

UploadedMatrix upload_matrix(Backend& b, TestMatrix& m, DType type, std::int64_t n_out, std::int64_t n_in) {
  UploadedMatrix u;
  u.host = std::make_shared<Model>();
  u.host->weights.token_embd = weight_view(m.bytes.data(), m.bytes.size(), type, n_out, n_in);
  u.device = b.upload(u.host);
  return u;
}

// x as the products of the 32-element block types read it: each block of 32 rounded to 8 bits by the CPU
// backend's q8_0 rule (the backend's quantize_q8_1 rounds alike).
std::vector<float> q8_1_rounded(const std::vector<float>& x, std::int64_t n_in) {
  std::vector<float> out(x.size());
  std::vector<std::uint8_t> q(tensor::row_bytes(DType::q8_0, n_in));
  for (std::size_t r = 0; r < x.size(); r += static_cast<std::size_t>(n_in)) {
    kernels::quantize_row_ref(DType::q8_0, x.data() + r, q.data(), n_in);
    kernels::dequantize_row_ref(DType::q8_0, q.data(), out.data() + r, n_in);
  }
  return out;
}

bool reads_q8_1(DType t) { return t == DType::q8_0 || t == DType::q4_0 || t == DType::q4_1; }

const DType kWeightTypes[] = {DType::f32,  DType::f16,  DType::bf16, DType::q8_0, DType::q4_0,
                              DType::q4_1, DType::q4_K, DType::q5_K, DType::q6_K, DType::nf4};

TEST(CudaBackendKernels, ProjectEveryWeightTypeMatchesTheReference) {
  REQUIRE_GPU();
  auto backend = make_cuda_backend(0, {.batch_invariant = true});  // the built-in kernels (gemm: cuda_gemm_test)
  std::mt19937 rng(std::random_device{}());
  // Rows of 512 (every type; the float types' 16-byte path) and of 300 (the float types' element path).
  std::vector<std::pair<DType, std::int64_t>> cases;
  for (DType type : kWeightTypes) cases.emplace_back(type, 512);
  for (DType type : {DType::f32, DType::f16, DType::bf16}) cases.emplace_back(type, 300);
  for (const auto& [type, n_in] : cases) {
    SCOPED_TRACE(std::string(tensor::dtype_name(type)) + " rows of " + std::to_string(n_in));
    const std::int64_t n_out = 75, n_tokens = 11;  // 75: a partial block of warps; 11: of tokens
    TestMatrix m = random_matrix(type, n_out, n_in, rng);
    const UploadedMatrix w = upload_matrix(*backend, m, type, n_out, n_in);
    const std::vector<float> x = random_floats(static_cast<std::size_t>(n_tokens * n_in), rng);
    // q8_0 / q4_0 / q4_1: integer dot products against the activations rounded to 8 bits per block.
    const std::vector<float> x_ref = reads_q8_1(type) ? q8_1_rounded(x, n_in) : x;
    tc::DeviceBuffer dx = device_floats(x), dy = device_floats({}, static_cast<std::size_t>(n_tokens * n_out)),
                     dy1 = device_floats({}, static_cast<std::size_t>(n_out));
    const Projection all[] = {{ProjectionSite::q, 0, &w.weight(), rows_of(dy, n_tokens, n_out)}};
    const Projection first[] = {{ProjectionSite::q, 0, &w.weight(), rows_of(dy1, 1, n_out)}};
    backend->begin([&] {
      backend->project(rows_of(dx, n_tokens, n_in), all);
      backend->project(rows_of(dx, 1, n_in), first);  // token 0 alone: the same bits (batch invariance)
    });
    backend->wait();
    const std::vector<float> y = to_host(dy, static_cast<std::size_t>(n_tokens * n_out));
    const std::vector<float> y1 = to_host(dy1, static_cast<std::size_t>(n_out));
    double worst = 0;
    for (std::int64_t t = 0; t < n_tokens; ++t) {
      for (std::int64_t o = 0; o < n_out; ++o) {
        double ref = 0;
        for (std::int64_t i = 0; i < n_in; ++i) {
          ref += static_cast<double>(m.values[static_cast<std::size_t>(o * n_in + i)]) *
                 x_ref[static_cast<std::size_t>(t * n_in + i)];
        }
        const float got = y[static_cast<std::size_t>(t * n_out + o)];
        ASSERT_TRUE(std::isfinite(got)) << "token " << t << " row " << o << " unwritten or not finite";
        worst = std::max(worst, std::fabs(got - ref) / (1.0 + std::fabs(ref)));
      }
    }
    EXPECT_LT(worst, 1e-4);
    for (std::int64_t o = 0; o < n_out; ++o) {
      EXPECT_EQ(y1[static_cast<std::size_t>(o)], y[static_cast<std::size_t>(o)]) << "row " << o;
    }
  }
}

// An environment variable set for a scope (the backend reads its switches when it is made).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// The small-token products (decoder_ops.cu's matvec_*; ORCHARD_CUDA_MMA=0 keeps f16 / bf16 on them too):
// every call of 1 to 8 tokens (each token tile, and 5,
// 7 within the tile of 8) and of 11 (two tiles), several outputs in one project() call: runs of one type
// launched together (three, then five: four and one), broken by an output of another type; rows of 96
// elements (fewer 32-element blocks than a block's lanes), 1,056 (a second, partial pass) and 4,128 (past the
// unrolled stride; not a multiple of it); outputs of 75, 3, 130, 33, 64, 17, 5 and 9 rows (partial blocks of
// rows, fewer rows than a block takes). Every output poisoned first; each token of a smaller call the same
// bits as in the 11-token call (batch invariance).
TEST(CudaBackendKernels, SmallTokenProductsOfSeveralOutputsMatchTheReference) {
  REQUIRE_GPU();
  std::unique_ptr<Backend> backend;
  {
    const ScopedEnv matvec("ORCHARD_CUDA_MMA", "0");
    backend = make_cuda_backend(0, {.batch_invariant = true});  // the matvec kernels at 8 and 11 tokens too
  }
  std::mt19937 rng(std::random_device{}());
  const std::int64_t n_outs[] = {75, 3, 130, 40, 33, 64, 17, 5, 9};  // [3]: the other type
  const std::int64_t kMaxTokens = 11;
  for (DType type : {DType::f32, DType::f16, DType::bf16, DType::q8_0, DType::q4_0, DType::q4_1}) {
    const DType other = type == DType::f32 ? DType::f16 : DType::f32;
    for (const std::int64_t n_in : {96, 1056, 4128}) {
      SCOPED_TRACE(std::string(tensor::dtype_name(type)) + " rows of " + std::to_string(n_in));
      std::vector<TestMatrix> m;
      std::vector<UploadedMatrix> w;
      for (std::size_t j = 0; j < std::size(n_outs); ++j) {
        const DType t = j == 3 ? other : type;
        m.push_back(random_matrix(t, n_outs[j], n_in, rng));
        w.push_back(upload_matrix(*backend, m.back(), t, n_outs[j], n_in));
      }
      const std::vector<float> x = random_floats(static_cast<std::size_t>(kMaxTokens * n_in), rng);
      // outputs[n][j]: output j of the call of n tokens (n = 1 .. 8, and 11).
      const std::vector<std::int64_t> counts = {1, 2, 3, 4, 5, 6, 7, 8, kMaxTokens};
      std::vector<std::vector<tc::DeviceBuffer>> outputs(counts.size());
      std::vector<std::vector<Projection>> projections(counts.size());
      for (std::size_t c = 0; c < counts.size(); ++c) {
        for (std::size_t j = 0; j < std::size(n_outs); ++j) {
          outputs[c].push_back(device_floats({}, static_cast<std::size_t>(counts[c] * n_outs[j])));
          projections[c].push_back({ProjectionSite::q, 0, &w[j].weight(), rows_of(outputs[c][j], counts[c], n_outs[j])});
        }
      }
      tc::DeviceBuffer dx = device_floats(x);
      backend->begin([&] {
        for (std::size_t c = 0; c < counts.size(); ++c) backend->project(rows_of(dx, counts[c], n_in), projections[c]);
      });
      backend->wait();
      for (std::size_t j = 0; j < std::size(n_outs); ++j) {
        const DType t = j == 3 ? other : type;
        const std::vector<float> x_ref = reads_q8_1(t) ? q8_1_rounded(x, n_in) : x;
        const std::int64_t n_out = n_outs[j];
        const std::vector<float> all = to_host(outputs.back()[j], static_cast<std::size_t>(kMaxTokens * n_out));
        double worst = 0;
        for (std::int64_t tok = 0; tok < kMaxTokens; ++tok) {
          for (std::int64_t o = 0; o < n_out; ++o) {
            double ref = 0;
            for (std::int64_t i = 0; i < n_in; ++i) {
              ref += static_cast<double>(m[j].values[static_cast<std::size_t>(o * n_in + i)]) *
                     x_ref[static_cast<std::size_t>(tok * n_in + i)];
            }
            const float got = all[static_cast<std::size_t>(tok * n_out + o)];
            ASSERT_TRUE(std::isfinite(got)) << "output " << j << " token " << tok << " row " << o;
            worst = std::max(worst, std::fabs(got - ref) / (1.0 + std::fabs(ref)));
          }
        }
        EXPECT_LT(worst, 1e-4) << "output " << j;
        for (std::size_t c = 0; c + 1 < counts.size(); ++c) {
          const std::vector<float> part = to_host(outputs[c][j], static_cast<std::size_t>(counts[c] * n_out));
          for (std::size_t i = 0; i < part.size(); ++i) {
            ASSERT_EQ(part[i], all[i]) << "output " << j << ", " << counts[c] << " tokens: token " << i / n_out
                                       << " row " << i % n_out;
          }
        }
      }
    }
  }
}

// The f16 / bf16 products on tensor cores (matvec_mma_ops.cu): every call of 2 to 16 tokens (both token tiles,
// partial ones), several outputs in one project() call (runs of one type launched together: three, then five
// as four and one; broken by an f32 output, which keeps the matvec kernels); rows of 96 elements (fewer 32-element
// pieces than the block's warps), 1,064 and 4,104 (k a multiple of 8 but not of 32: a partial last piece);
// outputs of 75, 3, 130, 33, 64, 17, 5 and 9 rows (partial 16-row tiles, fewer rows than a tile). Every output
// poisoned first. Batch invariance by construction: each token of every call the same bits as in a call of 37
// tokens (three tiles of 16) of a --batch-invariant backend, which keeps these kernels at every size, one
// token included (the other backend's single tokens go to the matvec kernels). Against the reference within
// 1e-4 (activations split into 16-bit parts: near f32).
TEST(CudaBackendKernels, TensorCoreProductsOfTwoToSixteenTokensMatchTheReference) {
  REQUIRE_GPU();
  if (tc::device_info().arch() < 80) GTEST_SKIP() << "no bf16 mma.sync before sm_80";
  auto backend = make_cuda_backend(0, {});
  auto invariant = make_cuda_backend(0, {.batch_invariant = true});
  std::mt19937 rng(std::random_device{}());
  const std::int64_t n_outs[] = {75, 3, 130, 40, 33, 64, 17, 5, 9};  // [3]: f32
  const std::int64_t kTokens = 16, kInvariantTokens = 37;
  for (DType type : {DType::f16, DType::bf16}) {
    for (const std::int64_t n_in : {96, 1064, 4104}) {
      SCOPED_TRACE(std::string(tensor::dtype_name(type)) + " rows of " + std::to_string(n_in));
      std::vector<TestMatrix> m;
      std::vector<UploadedMatrix> w, wi;
      for (std::size_t j = 0; j < std::size(n_outs); ++j) {
        const DType t = j == 3 ? DType::f32 : type;
        m.push_back(random_matrix(t, n_outs[j], n_in, rng));
        w.push_back(upload_matrix(*backend, m.back(), t, n_outs[j], n_in));
        wi.push_back(upload_matrix(*invariant, m.back(), t, n_outs[j], n_in));
      }
      const std::vector<float> x = random_floats(static_cast<std::size_t>(kInvariantTokens * n_in), rng);
      tc::DeviceBuffer dx = device_floats(x);
      // outputs[c][j]: output j of the call of c + 1 tokens (c < 16; c = 0 on the invariant backend); [16]: the
      // invariant backend's 37 tokens.
      std::vector<std::vector<tc::DeviceBuffer>> outputs(kTokens + 1);
      std::vector<std::vector<Projection>> projections(kTokens + 1);
      for (std::int64_t c = 0; c <= kTokens; ++c) {
        const std::int64_t n = c < kTokens ? c + 1 : kInvariantTokens;
        const auto cc = static_cast<std::size_t>(c);
        for (std::size_t j = 0; j < std::size(n_outs); ++j) {
          outputs[cc].push_back(device_floats({}, static_cast<std::size_t>(n * n_outs[j])));
          const Weight& weight = c > 0 && c < kTokens ? w[j].weight() : wi[j].weight();
          projections[cc].push_back({ProjectionSite::q, 0, &weight, rows_of(outputs[cc][j], n, n_outs[j])});
        }
      }
      backend->begin([&] {
        for (std::int64_t c = 1; c < kTokens; ++c) {
          backend->project(rows_of(dx, c + 1, n_in), projections[static_cast<std::size_t>(c)]);
        }
      });
      backend->wait();
      invariant->begin([&] {
        invariant->project(rows_of(dx, 1, n_in), projections.front());
        invariant->project(rows_of(dx, kInvariantTokens, n_in), projections.back());
      });
      invariant->wait();
      for (std::size_t j = 0; j < std::size(n_outs); ++j) {
        if (j == 3) continue;  // the f32 output: the matvec kernels' test
        const std::int64_t n_out = n_outs[j];
        const std::vector<float> all =
            to_host(outputs.back()[j], static_cast<std::size_t>(kInvariantTokens * n_out));
        double worst = 0;
        for (std::int64_t tok = 0; tok < kInvariantTokens; ++tok) {
          for (std::int64_t o = 0; o < n_out; ++o) {
            double ref = 0;
            for (std::int64_t i = 0; i < n_in; ++i) {
              ref += static_cast<double>(m[j].values[static_cast<std::size_t>(o * n_in + i)]) *
                     x[static_cast<std::size_t>(tok * n_in + i)];
            }
            const float got = all[static_cast<std::size_t>(tok * n_out + o)];
            ASSERT_TRUE(std::isfinite(got)) << "output " << j << " token " << tok << " row " << o;
            worst = std::max(worst, std::fabs(got - ref) / (1.0 + std::fabs(ref)));
          }
        }
        EXPECT_LT(worst, 1e-4) << "output " << j;
        std::printf("tensor-core products: %s rows of %lld, output %zu: worst %.3g\n", std::string(tensor::dtype_name(type)).c_str(),
                    static_cast<long long>(n_in), j, worst);
        for (std::int64_t c = 0; c < kTokens; ++c) {
          const std::vector<float> part =
              to_host(outputs[static_cast<std::size_t>(c)][j], static_cast<std::size_t>((c + 1) * n_out));
          for (std::size_t i = 0; i < part.size(); ++i) {
            ASSERT_EQ(part[i], all[i]) << "output " << j << ", " << c + 1 << " tokens: token " << i / n_out << " row "
                                       << i % n_out;
          }
        }
      }
    }
  }
}

TEST(CudaBackendKernels, EmbedEveryWeightTypeMatchesTheReference) {
  REQUIRE_GPU();
  auto backend = make_cuda_backend();
  std::mt19937 rng(std::random_device{}());
  for (DType type : kWeightTypes) {
    SCOPED_TRACE(std::string(tensor::dtype_name(type)));
    const std::int64_t n_vocab = 37, n_embd = 256;
    TestMatrix m = random_matrix(type, n_vocab, n_embd, rng);
    const UploadedMatrix w = upload_matrix(*backend, m, type, n_vocab, n_embd);
    std::uniform_int_distribution<std::int32_t> pick(0, static_cast<std::int32_t>(n_vocab - 1));
    std::vector<std::int32_t> tokens(9);
    for (auto& t : tokens) t = pick(rng);
    tc::DeviceBuffer out = device_floats({}, tokens.size() * static_cast<std::size_t>(n_embd));
    backend->begin([&] { backend->embed(w.weight(), tokens, rows_of(out, static_cast<std::int64_t>(tokens.size()), n_embd)); });
    backend->wait();
    const std::vector<float> got = to_host(out, tokens.size() * static_cast<std::size_t>(n_embd));
    for (std::size_t t = 0; t < tokens.size(); ++t) {
      for (std::int64_t i = 0; i < n_embd; ++i) {
        ASSERT_EQ(got[t * static_cast<std::size_t>(n_embd) + static_cast<std::size_t>(i)],
                  m.values[static_cast<std::size_t>(tokens[t] * n_embd + i)])
            << "token " << t << " element " << i;
      }
    }
  }
}

TEST(CudaBackendKernels, NormAndElementWiseOpsMatchTheCpuBackend) {
  REQUIRE_GPU();
  auto gpu = make_cuda_backend();
  auto cpu = make_cpu_backend(1);
  std::mt19937 rng(std::random_device{}());
  const std::int64_t n_rows = 7, n_cols = 300;  // 300: not a multiple of the block or the warp
  const std::size_t n = static_cast<std::size_t>(n_rows * n_cols);
  std::vector<float> a = random_floats(n, rng), b = random_floats(n, rng, 3.0f);
  std::vector<float> w = random_floats(static_cast<std::size_t>(n_cols), rng);
  auto model = std::make_shared<Model>();
  model->weights.output_norm = weight_view(w.data(), w.size() * sizeof(float), DType::f32, 1, n_cols).reshape({n_cols});
  model->weights.token_embd = model->weights.output_norm;  // a bias vector of the same length
  const auto gw = gpu->upload(model);
  const auto cw = cpu->upload(model);
  const std::vector<std::int32_t> pick = {6, 0, 3};

  // On the GPU: norm into a poisoned buffer; bias, add, swiglu, soft cap in place; a gather.
  tc::DeviceBuffer da = device_floats(a), db = device_floats(b), dnorm = device_floats({}, n),
                   dgather = device_floats({}, pick.size() * static_cast<std::size_t>(n_cols));
  gpu->begin([&] {
    gpu->rms_norm(rows_of(da, n_rows, n_cols), gw->output_norm, 1e-5f, rows_of(dnorm, n_rows, n_cols));
    gpu->add_bias(rows_of(da, n_rows, n_cols), gw->token_embd);
    gpu->add(rows_of(da, n_rows, n_cols), rows_of(db, n_rows, n_cols));
    gpu->swiglu(rows_of(da, n_rows, n_cols), rows_of(db, n_rows, n_cols));
    gpu->soft_cap(rows_of(da, n_rows, n_cols), 5.0f);
    gpu->gather_rows(rows_of(da, n_rows, n_cols), pick, rows_of(dgather, static_cast<std::int64_t>(pick.size()), n_cols));
  });
  gpu->wait();
  // The same on the CPU backend.
  std::vector<float> norm(n), gathered(pick.size() * static_cast<std::size_t>(n_cols));
  const Rows ha{a.data(), n_rows, n_cols}, hb{b.data(), n_rows, n_cols};
  cpu->rms_norm(ha, cw->output_norm, 1e-5f, {norm.data(), n_rows, n_cols});
  cpu->add_bias(ha, cw->token_embd);
  cpu->add(ha, hb);
  cpu->swiglu(ha, hb);
  cpu->soft_cap(ha, 5.0f);
  cpu->gather_rows(ha, pick, {gathered.data(), static_cast<std::int64_t>(pick.size()), n_cols});

  auto expect_close = [](const std::vector<float>& got, const std::vector<float>& want, const char* what) {
    ASSERT_EQ(got.size(), want.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      ASSERT_TRUE(std::isfinite(got[i])) << what << " element " << i << " unwritten";
      ASSERT_NEAR(got[i], want[i], 1e-5 * (1 + std::fabs(want[i]))) << what << " element " << i;
    }
  };
  expect_close(to_host(dnorm, n), norm, "rms_norm");
  expect_close(to_host(da, n), a, "bias, add, swiglu, soft cap");
  expect_close(to_host(dgather, gathered.size()), gathered, "gather_rows");
}

// The residual add and the next norm in one kernel (add_rms_norm): against the CPU backend's composition
// (add, then rms_norm) within rounding, and bit for bit against the GPU's own add and rms_norm (a row's
// logits must not depend on which of the two paths a step takes: batch invariance), with rows of 4,096
// (float4 loads, whole q8_1 blocks) and 300, one row and three, outputs poisoned; on a backend that also
// writes the q8_1 blocks alongside (a q8_0 model uploaded) and on one that does not.
TEST(CudaBackendKernels, AddRmsNormMatchesTheCpuCompositionAndTheGpuOpsBitForBit) {
  REQUIRE_GPU();
  auto cpu = make_cpu_backend(1);
  std::mt19937 rng(std::random_device{}());
  for (const bool q8_1_model : {false, true}) {
    auto gpu = make_cuda_backend();
    TestMatrix m = random_matrix(DType::q8_0, 64, 4096, rng);
    auto quantized = std::make_shared<Model>();
    quantized->weights.output = weight_view(m.bytes.data(), m.bytes.size(), DType::q8_0, 64, 4096);
    std::shared_ptr<const ModelWeights> kept;
    if (q8_1_model) kept = gpu->upload(quantized);
    for (const std::int64_t n_cols : {4096, 300}) {
      for (const std::int64_t n_rows : {1, 3}) {
        SCOPED_TRACE(std::to_string(n_rows) + " rows of " + std::to_string(n_cols) +
                     (q8_1_model ? ", q8_1 alongside" : ""));
        const std::size_t n = static_cast<std::size_t>(n_rows * n_cols);
        std::vector<float> a = random_floats(n, rng, 2.0f), b = random_floats(n, rng);
        std::vector<float> w = random_floats(static_cast<std::size_t>(n_cols), rng);
        auto model = std::make_shared<Model>();
        model->weights.output_norm =
            weight_view(w.data(), w.size() * sizeof(float), DType::f32, 1, n_cols).reshape({n_cols});
        const auto gw = gpu->upload(model);
        const auto cw = cpu->upload(model);
        tc::DeviceBuffer fused_acc = device_floats(a), plain_acc = device_floats(a), db = device_floats(b),
                         fused_out = device_floats({}, n), plain_out = device_floats({}, n);
        gpu->begin([&] {
          gpu->add_rms_norm(rows_of(fused_acc, n_rows, n_cols), rows_of(db, n_rows, n_cols), gw->output_norm, 1e-5f,
                            rows_of(fused_out, n_rows, n_cols));
          gpu->add(rows_of(plain_acc, n_rows, n_cols), rows_of(db, n_rows, n_cols));
          gpu->rms_norm(rows_of(plain_acc, n_rows, n_cols), gw->output_norm, 1e-5f, rows_of(plain_out, n_rows, n_cols));
        });
        gpu->wait();
        std::vector<float> want(n);
        cpu->add({a.data(), n_rows, n_cols}, {b.data(), n_rows, n_cols});
        cpu->rms_norm({a.data(), n_rows, n_cols}, cw->output_norm, 1e-5f, {want.data(), n_rows, n_cols});
        const std::vector<float> got_acc = to_host(fused_acc, n), got = to_host(fused_out, n),
                                 plain = to_host(plain_out, n), plain_sum = to_host(plain_acc, n);
        for (std::size_t i = 0; i < n; ++i) {
          ASSERT_TRUE(std::isfinite(got[i])) << "element " << i << " unwritten";
          ASSERT_NEAR(got_acc[i], a[i], 1e-6 * (1 + std::fabs(a[i]))) << "the sum, element " << i;
          ASSERT_NEAR(got[i], want[i], 1e-5 * (1 + std::fabs(want[i]))) << "the norm, element " << i;
          ASSERT_EQ(got_acc[i], plain_sum[i]) << "the sum against the GPU's add, element " << i;
          ASSERT_EQ(got[i], plain[i]) << "the norm against the GPU's add and rms_norm, element " << i;
        }
      }
    }
  }
}

// The q8_1 blocks an op writes alongside its rows (rms_norm, add_rms_norm, swiglu, on a backend whose model
// has q8_1-reading products) are what the next product reads in place of quantizing the rows again: its
// results equal bit for bit those of the same rows quantized by the product itself (the chain broken by an
// add of zeros, which changes no value); and blocks made for rows that another op then changed are not
// used (rms_norm, then an add into the normed rows, then the product: equal to the product of the changed
// rows). q8_0 and q4_0 weights, 3 tokens, rows of 512, outputs poisoned.
TEST(CudaBackendKernels, ProductsReadTheQ8_1BlocksTheirInputsOpMadeAndNeverStaleOnes) {
  REQUIRE_GPU();
  std::mt19937 rng(std::random_device{}());
  const std::int64_t n_tokens = 3, n_in = 512, n_out = 96;
  for (const DType type : {DType::q8_0, DType::q4_0}) {
    SCOPED_TRACE(tensor::dtype_name(type));
    auto gpu = make_cuda_backend();
    TestMatrix m = random_matrix(type, n_out, n_in, rng);
    std::vector<float> w = random_floats(static_cast<std::size_t>(n_in), rng);
    auto model = std::make_shared<Model>();
    model->weights.output = weight_view(m.bytes.data(), m.bytes.size(), type, n_out, n_in);
    model->weights.output_norm = weight_view(w.data(), w.size() * sizeof(float), DType::f32, 1, n_in).reshape({n_in});
    const auto gw = gpu->upload(model);
    const std::size_t n = static_cast<std::size_t>(n_tokens * n_in), n_y = static_cast<std::size_t>(n_tokens * n_out);
    const std::vector<float> x = random_floats(n, rng, 2.0f), r = random_floats(n, rng), up = random_floats(n, rng);
    tc::DeviceBuffer zeros = device_floats(std::vector<float>(n, 0.0f)), dup = device_floats(up), dr = device_floats(r);
    const Rows z = rows_of(zeros, n_tokens, n_in);
    auto product = [&](const Rows& in, tc::DeviceBuffer& y) {
      const Projection p[] = {{ProjectionSite::output, -1, &gw->output, rows_of(y, n_tokens, n_out)}};
      gpu->project(in, p);
    };
    // Each case: ops on fresh copies of x (xs) and a poisoned `in`, returning the rows the product reads;
    // `broken` adds zeros to them before the product.
    using Ops = std::function<Rows(const Rows& xs, const Rows& in)>;
    auto run = [&](const Ops& ops, bool broken, std::vector<float>& read) {
      tc::DeviceBuffer xs = device_floats(x), in = device_floats({}, n), y = device_floats({}, n_y);
      Rows rows;
      gpu->begin([&] {
        rows = ops(rows_of(xs, n_tokens, n_in), rows_of(in, n_tokens, n_in));
        if (broken) gpu->add(rows, z);
        product(rows, y);
      });
      gpu->wait();
      read = to_host(rows.data == xs.as<float>() ? xs : in, n);
      return to_host(y, n_y);
    };
    const Rows dr_rows = rows_of(dr, n_tokens, n_in), up_rows = rows_of(dup, n_tokens, n_in);
    const std::vector<std::pair<const char*, Ops>> cases = {
        {"rms_norm",
         [&](const Rows& xs, const Rows& in) {
           gpu->rms_norm(xs, gw->output_norm, 1e-5f, in);
           return in;
         }},
        {"add_rms_norm",
         [&](const Rows& xs, const Rows& in) {
           gpu->add_rms_norm(xs, dr_rows, gw->output_norm, 1e-5f, in);
           return in;
         }},
        {"swiglu",
         [&](const Rows& xs, const Rows&) {
           gpu->swiglu(xs, up_rows);
           return xs;
         }},
        {"stale", [&](const Rows& xs, const Rows& in) {
           gpu->rms_norm(xs, gw->output_norm, 1e-5f, in);
           gpu->add(in, dr_rows);
           return in;
         }}};
    for (const auto& [name, ops] : cases) {
      SCOPED_TRACE(name);
      std::vector<float> read_fused, read_plain;
      const std::vector<float> fused = run(ops, false, read_fused), plain = run(ops, true, read_plain);
      for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(read_fused[i], read_plain[i]) << "input element " << i;
      for (std::size_t i = 0; i < n_y; ++i) {
        ASSERT_TRUE(std::isfinite(fused[i])) << "output " << i << " unwritten";
        ASSERT_EQ(fused[i], plain[i]) << "output " << i;
      }
    }
  }
}

// RMSNorm on rows of every kind its kernel tells apart: 4,096 and 4,100 (float4 loads, several a thread,
// 4,100 not a multiple of the block's 1,024 elements a pass) and 301 (element loads), one row and three,
// into poisoned outputs, against the CPU backend.
TEST(CudaBackendKernels, RmsNormOfRowsOfEveryLengthMatchesTheCpuBackend) {
  REQUIRE_GPU();
  auto gpu = make_cuda_backend();
  auto cpu = make_cpu_backend(1);
  std::mt19937 rng(std::random_device{}());
  for (const std::int64_t n_cols : {4096, 4100, 301}) {
    for (const std::int64_t n_rows : {1, 3}) {
      SCOPED_TRACE(std::to_string(n_rows) + " rows of " + std::to_string(n_cols));
      const std::size_t n = static_cast<std::size_t>(n_rows * n_cols);
      const std::vector<float> a = random_floats(n, rng, 2.0f);
      std::vector<float> w = random_floats(static_cast<std::size_t>(n_cols), rng);
      auto model = std::make_shared<Model>();
      model->weights.output_norm =
          weight_view(w.data(), w.size() * sizeof(float), DType::f32, 1, n_cols).reshape({n_cols});
      model->weights.token_embd = model->weights.output_norm;
      const auto gw = gpu->upload(model);
      const auto cw = cpu->upload(model);
      tc::DeviceBuffer da = device_floats(a), dout = device_floats({}, n);
      gpu->begin([&] { gpu->rms_norm(rows_of(da, n_rows, n_cols), gw->output_norm, 1e-5f, rows_of(dout, n_rows, n_cols)); });
      gpu->wait();
      std::vector<float> want(n);
      cpu->rms_norm({const_cast<float*>(a.data()), n_rows, n_cols}, cw->output_norm, 1e-5f, {want.data(), n_rows, n_cols});
      const std::vector<float> got = to_host(dout, n);
      for (std::size_t i = 0; i < n; ++i) {
        ASSERT_TRUE(std::isfinite(got[i])) << "element " << i << " unwritten";
        ASSERT_NEAR(got[i], want[i], 1e-5 * (1 + std::fabs(want[i]))) << "element " << i;
      }
    }
  }
}

// Whole models: the CUDA backend against the CPU backend (the same KV type on both: f16 unless asked), two
// sequences, a prefill in two chunks and decode steps, every row's logits compared.
struct Agreement {
  double max_abs = 0;
  std::int32_t greedy_compared = 0;
};

Agreement compare_backends(const std::shared_ptr<const Model>& model, const std::shared_ptr<const Model>& cpu_model,
                           const std::vector<std::int32_t>& prompt_a, const std::vector<std::int32_t>& prompt_b,
                           float greedy_margin = 1e-2f, const CudaOptions& cuda = {},
                           DType kv_type = DType::f16) {
  ModelRunner gpu(model, make_cuda_backend(0, cuda));
  ModelRunner cpu(cpu_model, make_cpu_backend(0));
  KvCache gkv(gpu.make_kv_storage([&] {
    KvCacheConfig c = gpu.kv_config(64, kv_type);
    c.prefix_caching = false;
    return c;
  }()));
  KvCache ckv = make_kv(cpu, 64, kv_type);
  Agreement out;
  auto compare = [&](const auto& g, const auto& c) {
    for (std::size_t s = 0; s < g.size(); ++s) {
      for (std::size_t r = 0; r < g[s].size(); ++r) {
        for (std::size_t i = 0; i < g[s][r].size(); ++i) {
          if (!std::isfinite(g[s][r][i])) {
            ADD_FAILURE() << "seq " << s << " row " << r << " logit " << i << " is not finite";
            return;
          }
          out.max_abs = std::max(out.max_abs, static_cast<double>(std::fabs(g[s][r][i] - c[s][r][i])));
        }
      }
    }
  };
  Seq ga, gb, ca, cb;
  ga.id = gkv.create();
  gb.id = gkv.create();
  ca.id = ckv.create();
  cb.id = ckv.create();
  ga.tokens = ca.tokens = prompt_a;
  gb.tokens = cb.tokens = prompt_b;
  const auto half_a = static_cast<std::int32_t>(prompt_a.size() / 2);
  const auto rest_a = static_cast<std::int32_t>(prompt_a.size()) - half_a;
  // Step 1: a's first half and all of b; step 2: a's second half; then both decode greedily (the CPU's
  // choice fed to both, so the sequences stay the same), with the greedy choices compared where the CPU's
  // margin is clear.
  compare(run_step(gpu, gkv, {{&ga, half_a}, {&gb, static_cast<std::int32_t>(prompt_b.size())}}),
          run_step(cpu, ckv, {{&ca, half_a}, {&cb, static_cast<std::int32_t>(prompt_b.size())}}));
  auto g = run_step(gpu, gkv, {{&ga, rest_a}});
  auto c = run_step(cpu, ckv, {{&ca, rest_a}});
  compare(g, c);
  std::vector<float> g_last = g[0].back(), c_last = c[0].back();
  std::vector<float> gb_last, cb_last;
  for (int step = 0; step < 8; ++step) {
    const std::vector<float>* rows[] = {&c_last};
    for (const auto* row : rows) {
      std::vector<float> sorted = *row;
      std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<>());
      if (sorted[0] - sorted[1] > greedy_margin) {
        EXPECT_EQ(argmax(g_last), argmax(c_last)) << "greedy step " << step;
        ++out.greedy_compared;
      }
    }
    const std::int32_t next = argmax(c_last);
    ga.tokens.push_back(next);
    ca.tokens.push_back(next);
    gb.tokens.push_back(next);
    cb.tokens.push_back(next);
    g = run_step(gpu, gkv, {{&ga, 1}, {&gb, 1}});
    c = run_step(cpu, ckv, {{&ca, 1}, {&cb, 1}});
    compare(g, c);
    g_last = g[0].back();
    c_last = c[0].back();
  }
  return out;
}

std::vector<std::int32_t> some_tokens(std::int32_t n, std::int32_t n_vocab, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<std::int32_t> d(1, n_vocab - 1);
  std::vector<std::int32_t> v(static_cast<std::size_t>(n));
  for (auto& t : v) t = d(rng);
  return v;
}

class CudaBackendModels : public ::testing::TestWithParam<const char*> {};

TEST_P(CudaBackendModels, LogitsAgreeWithTheCpuBackend) {
  REQUIRE_GPU();
  const auto model = load_model(model_dir(GetParam()).string());
  const std::int32_t n_vocab = model->config.n_vocab;
  const Agreement a = compare_backends(model, model, some_tokens(37, n_vocab, std::random_device{}()),
                                       some_tokens(21, n_vocab, std::random_device{}()));
  EXPECT_LT(a.max_abs, 1e-2);
  RecordProperty("max_abs", std::to_string(a.max_abs));
}

// Batch invariance on CUDA (the built-in kernels, as --batch-invariant keeps them): a sequence's logits are
// the same bits whether its steps run alone or among 16 other sequences prefilling in chunks and decoding,
// the sequence at another place in each step's batch, so its rows are seldom the first of their attention
// group (the generic attention kernel of head dims other than 64, 128 and 256 once gave such rows the
// positions of the step's first rows: a request's output then changed with what shared its steps). Chunked
// alike both ways: a chunk of 1 is a decode row, which pal's attention computes with another kernel than
// a prefill chunk.
TEST_P(CudaBackendModels, LogitsOfASequenceDoNotDependOnWhatSharesItsSteps) {
  REQUIRE_GPU();
  const auto model = load_model(model_dir(GetParam()).string());
  ModelRunner gpu(model, make_cuda_backend(0, {.batch_invariant = true}));
  const auto kv = [&] {
    KvCacheConfig c = gpu.kv_config(256, DType::f16);
    c.prefix_caching = false;
    return KvCache(gpu.make_kv_storage(c));
  };
  const std::vector<std::int32_t> tokens = some_tokens(70, model->config.n_vocab, std::random_device{}());
  for (std::int32_t chunk : {1, 7, 33}) {
    KvCache alone_kv = kv(), crowd_kv = kv();
    const auto alone = run_probe(gpu, alone_kv, tokens, chunk, false);
    const auto crowd = run_probe(gpu, crowd_kv, tokens, chunk, true);
    ASSERT_EQ(alone.size(), tokens.size());
    ASSERT_EQ(crowd.size(), tokens.size());
    for (std::size_t pos = 0; pos < tokens.size(); ++pos) {
      double max_abs = 0;
      for (std::size_t i = 0; i < alone[pos].size(); ++i) {
        max_abs = std::max(max_abs, static_cast<double>(std::fabs(crowd[pos][i] - alone[pos][i])));
      }
      ASSERT_EQ(std::memcmp(crowd[pos].data(), alone[pos].data(), alone[pos].size() * sizeof(float)), 0)
          << GetParam() << ": position " << pos << " with chunks of " << chunk << " differs among 16 other "
          << "sequences from alone (max |difference| " << max_abs << ")";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(TestModels, CudaBackendModels, ::testing::Values("llama", "mistral", "qwen2", "qwen3"));

TEST(CudaBackendModelsReal, Stories260KAgreesWithTheCpuBackend) {
  REQUIRE_GPU();
  ORCHARD_REQUIRE_SHARED_DATA("models/stories260K/stories260K.bin");
  const auto model = load_llama2c_model(orchard::testing::shared_data("models/stories260K/stories260K.bin"));
  // The opening of the story the model tells itself (its reference greedy output): text of the kind it
  // was trained on, 0.0023 on an H100 (2026-11-28). Prompts of random token ids, drawn afresh each run,
  // failed the 1e-2 bound in 1 run of 16 there (0.0106): they drive the attention to extremes where one f16
  // K/V element rounding the other way on one backend moves the logits by more than text does.
  std::vector<std::int32_t> story{1};
  for (std::int32_t id : model->tokenizer->encode(
           "Once upon a time, there was a little girl named Lily. She loved to play outside in the park.", {})) {
    story.push_back(id);
  }
  const Agreement a = compare_backends(model, model, story, {1, 403, 407});
  RecordProperty("max_abs", std::to_string(a.max_abs));
  std::printf("stories260K: max |cuda - cpu| logit %.3g, %d greedy steps compared\n", a.max_abs, a.greedy_compared);
  EXPECT_LT(a.max_abs, 1e-2);
  EXPECT_GT(a.greedy_compared, 0);
}

// A copy of `src` whose matrices are their own values dequantized to f32: what the GPU computes with, for a
// CPU reference that does not round the activations to 8 bits as its quantized kernels do.
std::shared_ptr<const Model> dequantized_twin(const Model& src) {
  auto m = std::make_shared<Model>(src);
  std::map<const std::byte*, Weight> done;
  auto convert = [&](Weight& w) {
    if (!w || w.dtype() == DType::f32) return;
    if (auto it = done.find(w.data()); it != done.end()) {
      w = it->second;
      return;
    }
    const std::int64_t n_out = pie::n_out(w), n_in = pie::n_in(w);
    auto back = std::make_shared<std::vector<float>>(static_cast<std::size_t>(n_out * n_in));
    for (std::int64_t r = 0; r < n_out; ++r) kernels::dequantize_row_ref(w.dtype(), w.row(r), back->data() + r * n_in, n_in);
    const std::byte* key = w.data();
    w = weight_view(back->data(), back->size() * sizeof(float), DType::f32, n_out, n_in);
    m->storage.push_back(back);
    done[key] = w;
  };
  convert(m->weights.token_embd);
  convert(m->weights.output);
  for (LayerWeights& l : m->weights.layers) {
    for (Weight* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) convert(*w);
  }
  return m;
}

// The random-weight model (head dim 64: pal's CUDA attention) with its matrices in each weight type; the
// CPU runs the same values dequantized to f32 (its quantized kernels would round the activations too).
std::shared_ptr<const Model> with_matrices(const Model& src, DType type, bool dequantized) {
  auto m = std::make_shared<Model>(src);
  auto convert = [&](Weight& w) {
    const std::int64_t n_out = pie::n_out(w), n_in = pie::n_in(w);
    const std::size_t qrow = tensor::row_bytes(type, n_in);
    auto q = std::make_shared<std::vector<std::uint8_t>>(qrow * static_cast<std::size_t>(n_out));
    auto back = std::make_shared<std::vector<float>>(static_cast<std::size_t>(n_out * n_in));
    for (std::int64_t r = 0; r < n_out; ++r) {
      const auto* row = reinterpret_cast<const float*>(w.row(r));
      kernels::quantize_row_ref(type, row, q->data() + static_cast<std::size_t>(r) * qrow, n_in);
      kernels::dequantize_row_ref(type, q->data() + static_cast<std::size_t>(r) * qrow, back->data() + r * n_in, n_in);
    }
    if (dequantized) {
      w = weight_view(back->data(), back->size() * sizeof(float), DType::f32, n_out, n_in);
      m->storage.push_back(back);
    } else {
      w = weight_view(q->data(), q->size(), type, n_out, n_in);
      m->storage.push_back(q);
    }
  };
  const bool tied = src.weights.output.data() == src.weights.token_embd.data();
  convert(m->weights.token_embd);
  if (tied) {
    m->weights.output = m->weights.token_embd;
  } else {
    convert(m->weights.output);
  }
  for (LayerWeights& l : m->weights.layers) {
    for (Weight* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) convert(*w);
  }
  return m;
}

// The real default model (SmolLM2-135M-Instruct: 30 layers, head dim 64) on its f16 path: its matrices in
// f16 on the GPU against the CPU on the same values in f32 (activations in f32 on both sides).
TEST(CudaBackendModelsReal, DefaultModelAgreesWithTheCpuBackend) {
  REQUIRE_GPU();
  ORCHARD_REQUIRE_DEFAULT_MODEL();
  const auto model = load_model(orchard::testing::default_model_path());
  const auto& tok = *model->tokenizer;
  const auto values = dequantized_twin(*model);
  const auto gpu_model = with_matrices(*values, DType::f16, false);
  const auto cpu_model = with_matrices(*values, DType::f16, true);
  const auto prompt_a = tok.encode("The capital of France is Paris. The capital of Italy is", {});
  const auto prompt_b = tok.encode("def fibonacci(n):", {});
  // f32 KV on both (issue 35's bound): keys and values unrounded, the same values the CPU attends over.
  const Agreement f32 = compare_backends(gpu_model, cpu_model, prompt_a, prompt_b, 1e-2f, {}, DType::f32);
  // f16 KV on both (the GPU's default): a K/V element whose value before rounding differs in its last bits
  // between the backends may round the other way on one, and 30 layers carry that to the logits (0.0229 on
  // an H200; the CPU alone, f16 KV against f32 KV on this protocol, differs by 0.0153 on the development
  // machine, 2026-11-28). A misread block or a wrong RoPE moves them by whole units.
  const Agreement f16 = compare_backends(gpu_model, cpu_model, prompt_a, prompt_b, 1e-2f, {}, DType::f16);
  RecordProperty("max_abs_f32_kv", std::to_string(f32.max_abs));
  RecordProperty("max_abs_f16_kv", std::to_string(f16.max_abs));
  std::printf("default model, f16 matrices: max |cuda - cpu| logit %.3g at f32 KV, %.3g at f16 KV; %d / %d greedy "
              "steps compared\n",
              f32.max_abs, f16.max_abs, f32.greedy_compared, f16.greedy_compared);
  EXPECT_LT(f32.max_abs, 1e-2);
  EXPECT_LT(f16.max_abs, 5e-2);
  EXPECT_GT(f32.greedy_compared, 0);
  EXPECT_GT(f16.greedy_compared, 0);
}

// The default model in its file's types (Q4_1, a q8_0 output head) on both backends: both round each
// product's activations to 8 bits by the same rule, but an activation that lands on the other side of a
// rounding boundary after sums in another order moves by a whole 1/127 of its block's largest value, and 30
// layers carry that to the logits: the CPU's own AVX-512, AVX2 and scalar paths differ from each other by up
// to 2.0 on these logits (measured 2026-11-28), so logits are not compared one by one. What must agree is
// the model's quality: perplexity over 8,192 teacher-forced tokens of text within 0.5% (issue 35), and the
// greedy choice at nearly every position. Calibration (CPU AVX-512 against AVX2, this protocol): a token's
// log-likelihood differs by 0.099 (standard deviation), so the perplexity ratio over N tokens scatters by
// 0.099 / sqrt(N): 0.11% here (0.5% is 4.5 of those; over 1,024 tokens the ISAs were 0.48% apart and the
// H100 0.61%); the ISAs chose alike at 98% of positions, the H100 at 95.1%. A misread block or a wrong RoPE
// moves perplexity by far more.
TEST(CudaBackendModelsReal, DefaultModelQuantizedKeepsTheCpuPerplexity) {
  REQUIRE_GPU();
  ORCHARD_REQUIRE_DEFAULT_MODEL();
  ORCHARD_REQUIRE_SHARED_DATA("corpus/war-and-peace.txt");
  const auto model = load_model(orchard::testing::default_model_path());
  std::ifstream in(orchard::testing::shared_data("corpus/war-and-peace.txt"), std::ios::binary);
  std::string text(60000, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<std::size_t>(in.gcount()));
  const std::vector<std::int32_t> tokens = model->tokenizer->encode(text, {});
  constexpr std::int32_t kChunk = 513, kChunks = 16;  // 512 scored tokens a chunk
  ASSERT_GE(tokens.size(), static_cast<std::size_t>(kChunk * kChunks));
  ModelRunner gpu(model, make_cuda_backend());
  ModelRunner cpu(model, make_cpu_backend(0));
  KvCache gkv(gpu.make_kv_storage(gpu.kv_config(64, DType::f16)));
  KvCache ckv = make_kv(cpu, 64, DType::f16);
  double nll_gpu = 0, nll_cpu = 0, max_abs = 0;
  std::int32_t scored = 0, same_choice = 0;
  auto nll = [](const std::vector<float>& row, std::int32_t next) {
    const float mx = *std::max_element(row.begin(), row.end());
    double sum = 0;
    for (float v : row) sum += std::exp(static_cast<double>(v - mx));
    return std::log(sum) + mx - row[static_cast<std::size_t>(next)];
  };
  for (std::int32_t c = 0; c < kChunks; ++c) {
    Seq g, h;
    g.id = gkv.create();
    h.id = ckv.create();
    g.tokens = h.tokens = std::vector<std::int32_t>(tokens.begin() + c * kChunk, tokens.begin() + (c + 1) * kChunk);
    const auto lg = run_step(gpu, gkv, {{&g, kChunk - 1}});
    const auto lc = run_step(cpu, ckv, {{&h, kChunk - 1}});
    for (std::int32_t i = 0; i < kChunk - 1; ++i) {
      const auto& rg = lg[0][static_cast<std::size_t>(i)];
      const auto& rc = lc[0][static_cast<std::size_t>(i)];
      for (std::size_t v = 0; v < rg.size(); ++v) {
        ASSERT_TRUE(std::isfinite(rg[v])) << "chunk " << c << " position " << i << " logit " << v;
        max_abs = std::max(max_abs, static_cast<double>(std::fabs(rg[v] - rc[v])));
      }
      const std::int32_t next = g.tokens[static_cast<std::size_t>(i + 1)];
      nll_gpu += nll(rg, next);
      nll_cpu += nll(rc, next);
      same_choice += argmax(rg) == argmax(rc) ? 1 : 0;
      ++scored;
    }
    gkv.release(g.id);
    ckv.release(h.id);
  }
  const double ppl_gpu = std::exp(nll_gpu / scored), ppl_cpu = std::exp(nll_cpu / scored);
  const double agree = static_cast<double>(same_choice) / scored;
  RecordProperty("ppl_gpu", std::to_string(ppl_gpu));
  RecordProperty("ppl_cpu", std::to_string(ppl_cpu));
  std::printf("default model, q4_1: perplexity %.4f on cuda, %.4f on the cpu (%+.3f%%) over %d tokens; same greedy "
              "choice at %.1f%% of positions; max |cuda - cpu| logit %.3g\n",
              ppl_gpu, ppl_cpu, 100.0 * (ppl_gpu / ppl_cpu - 1.0), scored, 100.0 * agree, max_abs);
  EXPECT_LT(std::fabs(ppl_gpu / ppl_cpu - 1.0), 5e-3);
  EXPECT_GE(agree, 0.9);
}

// Steps captured as CUDA graphs in pieces (the default: a piece launched each few norms, the next captured
// meanwhile; llama's two layers make two pieces, qwen3's q / k norms four), captured whole
// (ORCHARD_CUDA_GRAPHS=step) and with plain launches (ORCHARD_CUDA_GRAPHS=0): bit-identical logits through
// a prefill, decode steps of two sequences (each step an update of the kept graphs: positions, lengths and
// page tables change), one sequence alone (a new shape), and two again (the first shape's graphs, kept).
// qwen3 (head dim 64) takes pal's attention, llama (12) the generic kernels.
std::vector<float> logits_of_steps(const std::shared_ptr<const Model>& model, const char* graphs,
                                   const CudaOptions& cuda = {}) {
  setenv("ORCHARD_CUDA_GRAPHS", graphs, 1);
  ModelRunner runner(model, make_cuda_backend(0, cuda));
  unsetenv("ORCHARD_CUDA_GRAPHS");
  KvCache kv(runner.make_kv_storage([&] {
    KvCacheConfig c = runner.kv_config(32, DType::f16);
    c.prefix_caching = false;
    return c;
  }()));
  const std::int32_t n_vocab = model->config.n_vocab;
  Seq a, b;
  a.id = kv.create();
  b.id = kv.create();
  a.tokens = some_tokens(19, n_vocab, 7);
  b.tokens = some_tokens(5, n_vocab, 11);
  std::vector<float> all;
  auto keep = [&](const std::vector<std::vector<std::vector<float>>>& step) {
    for (const auto& seq : step) {
      for (const auto& row : seq) all.insert(all.end(), row.begin(), row.end());
    }
  };
  keep(run_step(runner, kv, {{&a, 19}, {&b, 5}}));
  std::mt19937 rng(5);
  std::uniform_int_distribution<std::int32_t> token(1, n_vocab - 1);
  for (int step = 0; step < 12; ++step) {
    a.tokens.push_back(token(rng));
    if (step < 4 || step >= 8) b.tokens.push_back(token(rng));
    if (step >= 4 && step < 8) {
      keep(run_step(runner, kv, {{&a, 1}}));
    } else {
      keep(run_step(runner, kv, {{&a, 1}, {&b, 1}}));
    }
  }
  return all;
}

TEST(CudaBackendGraphs, CapturedStepsMatchPlainLaunchesBitForBit) {
  REQUIRE_GPU();
  // Each model twice: with the built-in products, and with every product on tensor cores (cuBLAS, its
  // calls captured into the graph) where cuBLAS is present.
  const bool blas = tc::blas_unavailable_reason().empty();
  for (const auto& [name, gemm] : {std::pair{"qwen3", false}, {"llama", false}, {"qwen3", true}, {"llama", true}}) {
    SCOPED_TRACE(std::string(name) + (gemm ? " on tensor cores" : ""));
    if (gemm && !blas) continue;
    const CudaOptions cuda = gemm ? CudaOptions{.gemm_min_tokens = 1} : CudaOptions{.batch_invariant = true};
    const auto model = load_model(model_dir(name).string());
    const std::vector<float> plain = logits_of_steps(model, "0", cuda);
    ASSERT_GT(plain.size(), 0u);
    for (const char* mode : {"1", "step"}) {
      SCOPED_TRACE(std::string("ORCHARD_CUDA_GRAPHS=") + mode);
      const std::vector<float> captured = logits_of_steps(model, mode, cuda);
      ASSERT_EQ(captured.size(), plain.size());
      for (std::size_t i = 0; i < captured.size(); ++i) {
        ASSERT_TRUE(std::isfinite(plain[i])) << "logit " << i;
        ASSERT_EQ(captured[i], plain[i]) << "logit " << i;
      }
    }
  }
}

class CudaBackendWeightTypes : public ::testing::TestWithParam<DType> {};

TEST_P(CudaBackendWeightTypes, RandomModelAgreesWithTheCpuBackend) {
  REQUIRE_GPU();
  // The built-in kernels at every size (RandomModelAgreesOnTensorCores: the products of many tokens on
  // cuBLAS).
  const auto src = random_model();
  const DType type = GetParam();
  const auto gpu_model = type == DType::f32 ? src : with_matrices(*src, type, false);
  // The CPU keeps the blocks of the types whose products round the activations to 8 bits (as the GPU's
  // do, by the same rule); of the others it computes with the dequantized values in f32. Those three types
  // differ by more than rounding order: an activation one side rounds up and the other down (after sums in
  // another order) moves by a whole step of 1/127 of its block's largest value, and the random weights
  // carry that to the logits (0.18-0.24 measured on an H100); their bound is 0.5, and the
  // greedy choices are compared where the CPU's margin exceeds twice that.
  const auto cpu_model = type == DType::f32 ? src : with_matrices(*src, type, !reads_q8_1(type));
  const std::int32_t n_vocab = src->config.n_vocab;
  const double bound = reads_q8_1(type) ? 0.5 : 1e-2;
  const Agreement a = compare_backends(gpu_model, cpu_model, some_tokens(45, n_vocab, std::random_device{}()),
                                       some_tokens(17, n_vocab, std::random_device{}()), static_cast<float>(2 * bound),
                                       {.batch_invariant = true});
  EXPECT_LT(a.max_abs, bound);
}

// Every product on tensor cores (cuBLAS from one token on; q8_0's int8 products of 32-64 tokens off, they
// round the activations to 8 bits: next test): the types it takes (f16 / bf16 as they are, the block types
// expanded to f16) against the CPU on the dequantized weights in f32. The activations are
// rounded to f16 on the way in (bf16 for bf16 weights: 8 bits of mantissa), which the random model's
// logits carry: measured on an H100 (two runs), f16 0.0087-0.0100, the block types 0.011-0.015, bf16
// 0.057-0.061; the bounds are about twice those.
TEST_P(CudaBackendWeightTypes, RandomModelAgreesOnTensorCores) {
  REQUIRE_GPU();
  if (!tc::blas_unavailable_reason().empty()) GTEST_SKIP() << "no cuBLAS: " << tc::blas_unavailable_reason();
  const DType type = GetParam();
  if (type == DType::f32 || type == DType::nf4) GTEST_SKIP() << "not a tensor-core type (built-in kernels)";
  const auto src = random_model();
  const auto gpu_model = with_matrices(*src, type, false);
  const auto cpu_model = with_matrices(*src, type, true);
  const std::int32_t n_vocab = src->config.n_vocab;
  const double bound = type == DType::bf16 ? 0.12 : type == DType::f16 ? 2e-2 : 3e-2;
  const Agreement a = compare_backends(gpu_model, cpu_model, some_tokens(45, n_vocab, std::random_device{}()),
                                       some_tokens(17, n_vocab, std::random_device{}()), static_cast<float>(2 * bound),
                                       {.gemm_min_tokens = 1, .int8_products = false});
  EXPECT_LT(a.max_abs, bound);
  RecordProperty("max_abs", std::to_string(a.max_abs));
  std::printf("tensor cores, %s: max |gpu - cpu| %.5f\n", std::string(tensor::dtype_name(type)).c_str(), a.max_abs);
}

// q8_0's products of 32-64 tokens on int8 tensor cores (mmq_ops.cu; the first step's 22 + 40 tokens go there)
// against the CPU keeping the blocks: both round the activations to 8 bits by the same rule, so the bound is
// RandomModelAgreesWithTheCpuBackend's for the types that do (an activation on the other side of a rounding
// step after sums in another order; measured 0.14-0.17 on an H200 against the CPU on dequantized f32 weights,
// which rounds nothing).
TEST(CudaBackendInt8Products, RandomModelAgreesWithTheCpuBackend) {
  REQUIRE_GPU();
  const auto src = random_model();
  const auto gpu_model = with_matrices(*src, DType::q8_0, false);
  const auto cpu_model = with_matrices(*src, DType::q8_0, false);
  const std::int32_t n_vocab = src->config.n_vocab;
  const double bound = 0.5;
  const Agreement a = compare_backends(gpu_model, cpu_model, some_tokens(45, n_vocab, std::random_device{}()),
                                       some_tokens(40, n_vocab, std::random_device{}()), static_cast<float>(2 * bound),
                                       {.int8_products = true});
  EXPECT_LT(a.max_abs, bound);
  RecordProperty("max_abs", std::to_string(a.max_abs));
  std::printf("int8 tensor cores, q8_0: max |gpu - cpu| %.5f\n", a.max_abs);
}

INSTANTIATE_TEST_SUITE_P(Types, CudaBackendWeightTypes, ::testing::ValuesIn(kWeightTypes),
                         [](const auto& info) { return std::string(tensor::dtype_name(info.param)); });

// The engine on CUDA: a JSON-schema constraint validates, and requests batched together give what each
// gives alone (greedy).
std::string generate(Engine& engine, const std::string& prompt, std::optional<pse::Grammar> grammar, int n) {
  GenerateRequest r;
  r.prompt = engine.model().tokenizer->encode(prompt, {});
  r.max_tokens = n;
  r.sampling.temperature = 0;
  if (grammar) r.grammar = *grammar;
  auto stream = engine.submit(std::move(r));
  const RunResult result = collect(*stream);
  EXPECT_TRUE(result.done);
  return result.samples.empty() ? std::string() : result.samples[0].text;
}

// An explicit f32 KV type is kept on CUDA (unset gives f16: the test below), its pool counted in 4-byte
// elements, and generation runs through it.
TEST(CudaBackendEngine, ExplicitF32KvIsKept) {
  REQUIRE_GPU();
  EngineOptions options;
  options.device = DeviceRequest::cuda;
  options.context_length = 256;
  options.kv_dtype = DType::f32;
  options.kv_cache_bytes = std::int64_t{64} << 20;
  Engine engine(random_model(), options);
  EXPECT_EQ(engine.options().kv_dtype, std::optional<DType>(DType::f32));
  const KvCacheConfig one = ModelRunner(random_model(), make_cpu_backend(0)).kv_config(1, DType::f32);
  EXPECT_EQ(engine.stats().kv_pages, static_cast<std::int32_t>((std::int64_t{64} << 20) / one.page_bytes()));
  const pse::Grammar digits = pse::parse_regex("[0-9]{5}");
  EXPECT_EQ(generate(engine, "Numbers:", digits, 16).size(), 5u);
}

TEST(CudaBackendEngine, ConstrainedGenerationValidatesAndBatchingMatchesAlone) {
  REQUIRE_GPU();
  EngineOptions options;
  options.device = DeviceRequest::cuda;
  options.max_running = 4;
  options.context_length = 256;
  options.batch_invariant = true;  // batched equal to alone, bit for bit
  Engine engine(random_model(), options);
  EXPECT_EQ(engine.device().device, tensor::Device::cuda);
  EXPECT_EQ(engine.options().kv_dtype, DType::f16);

  const pse::Grammar schema = pse::json_schema_to_grammar(std::string_view(
      R"({"type":"object","properties":{"name":{"type":"string","maxLength":8},"age":{"type":"integer"}},)"
      R"("required":["name","age"],"additionalProperties":false})"));
  const std::string json = generate(engine, "A person:", schema, 64);
  const nlohmann::json parsed = nlohmann::json::parse(json);  // throws (fails the test) when it does not parse
  EXPECT_TRUE(parsed.at("name").is_string()) << json;
  // JSON Schema's integers are numbers with a zero fraction ("0.0" is one).
  ASSERT_TRUE(parsed.at("age").is_number()) << json;
  const double age = parsed.at("age").get<double>();
  EXPECT_EQ(age, std::floor(age)) << json;

  const std::vector<std::string> prompts = {"one", "two two", "three three three", "four"};
  std::vector<std::string> alone;
  for (const auto& p : prompts) alone.push_back(generate(engine, p, std::nullopt, 24));
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const auto& p : prompts) {
    GenerateRequest r;
    r.prompt = engine.model().tokenizer->encode(p, {});
    r.max_tokens = 24;
    r.sampling.temperature = 0;
    streams.push_back(engine.submit(std::move(r)));
  }
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    const RunResult result = collect(*streams[i]);
    ASSERT_EQ(result.samples.size(), 1u);
    EXPECT_EQ(result.samples[0].text, alone[i]) << "request " << i;
  }
  EXPECT_GT(engine.stats().device_sampled_rows, 0u);  // the rows were sampled on the device
}

// Speculation on CUDA with the random model's matrices in f16 and in bf16, so that the tensor-core products
// verify the drafts: greedy outputs identical with and without it. --batch-invariant is what guarantees it
// (without it one-token steps run on the matvec kernels, which round differently: docs/cuda-backend.md). The
// oracle drafter replays the recorded output with about a third of its tokens wrong, 4 and 15 a step (steps
// of up to 16 rows: both token tiles), so drafts are kept and rejected (the KV rollback too).
TEST(CudaBackendEngine, SpeculationOnTensorCoresKeepsTheGreedyOutput) {
  REQUIRE_GPU();
  // The engine's custom drafter, pointed at each run's oracle.
  class SwitchedDrafter final : public Drafter {
   public:
    void set(std::unique_ptr<Drafter> inner) { inner_ = std::move(inner); }
    void propose(std::span<Row> rows) override {
      if (inner_) inner_->propose(rows);
    }

   private:
    std::unique_ptr<Drafter> inner_;
  };
  for (DType type : {DType::f16, DType::bf16}) {
    SCOPED_TRACE(std::string(tensor::dtype_name(type)));
    const auto model = with_matrices(*random_model(), type, false);
    auto drafter = std::make_shared<SwitchedDrafter>();
    EngineOptions options;
    options.device = DeviceRequest::cuda;
    options.max_running = 1;
    options.context_length = 256;
    options.batch_invariant = true;
    options.custom_drafter = drafter;
    Engine engine(model, options);
    GenerateRequest request;
    request.prompt = model->tokenizer->encode("Once upon a time", {});
    request.max_tokens = 64;
    request.sampling.temperature = 0;
    request.ignore_eos = true;
    request.speculative = SpeculativeOptions{};
    const RunResult plain = collect(*engine.submit(request));
    ASSERT_EQ(plain.samples.size(), 1u);
    ASSERT_EQ(plain.samples[0].tokens.size(), 64u);
    std::vector<std::int32_t> sequence = request.prompt;
    sequence.insert(sequence.end(), plain.samples[0].tokens.begin(), plain.samples[0].tokens.end());
    for (const std::int32_t k : {4, 15}) {
      drafter->set(make_oracle_drafter(sequence, 0.7, 7, model->config.n_vocab));
      request.speculative = SpeculativeOptions{DraftMode::custom, k};
      const RunResult fast = collect(*engine.submit(request));
      ASSERT_EQ(fast.samples.size(), 1u);
      EXPECT_EQ(fast.samples[0].tokens, plain.samples[0].tokens) << "K = " << k;
      EXPECT_GT(fast.usage.accepted_draft_tokens, 0) << "K = " << k;
      EXPECT_LT(fast.usage.accepted_draft_tokens, fast.usage.draft_tokens) << "K = " << k;
    }
  }
}

TEST(CudaBackendErrors, ModelLargerThanTheGpuNamesBothSizes) {
  REQUIRE_GPU();
  auto backend = make_cuda_backend();
  const tc::MemoryInfo mem = tc::memory_info();
  // A weight that claims twice the card's memory (never read: the size check comes first).
  static float one = 0;
  const std::int64_t n_in = 1 << 20, n_out = static_cast<std::int64_t>(2 * mem.total / (n_in * sizeof(float)));
  auto model = std::make_shared<Model>();
  model->weights.token_embd = tensor::Tensor::view(
      tensor::Buffer::borrow(&one, static_cast<std::size_t>(n_out * n_in) * sizeof(float), false), 0, DType::f32,
      {n_out, n_in});
  try {
    backend->upload(model);
    FAIL() << "a model larger than the GPU was uploaded";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(std::to_string(static_cast<std::size_t>(n_out * n_in) * sizeof(float))), std::string::npos) << what;
    EXPECT_NE(what.find("free"), std::string::npos) << what;
  }
}

// KV pages are f16 (any head dim up to 256) or f32 (pal's head dims 64, 128, 256); anything else is refused
// naming the type, or the head dim.
TEST(CudaBackendErrors, KvCacheTypesAndHeadDims) {
  REQUIRE_GPU();
  auto backend = make_cuda_backend();
  KvCacheConfig c;
  c.n_layer = 1;
  c.n_kv_head = 1;
  c.head_dim = 64;
  c.n_pages = 4;
  for (DType t : {DType::f16, DType::f32}) {
    c.dtype = t;
    EXPECT_NO_THROW(backend->make_kv_storage(c)) << tensor::dtype_name(t);
  }
  auto expect_refused = [&](const char* what) {
    try {
      backend->make_kv_storage(c);
      ADD_FAILURE() << "accepted: " << what;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  c.dtype = DType::bf16;
  expect_refused("bf16");
  c.dtype = DType::f32;
  c.head_dim = 80;
  expect_refused("head_dim 80");
  c.dtype = DType::f16;
  EXPECT_NO_THROW(backend->make_kv_storage(c));
}

// Where CUDA cannot be used (CI): asking for it is a clear error, auto falls back to the CPU and says why.
TEST(DeviceChoice, CudaAskedWithoutAGpuIsAnErrorThatSaysWhy) {
  if (tc::available()) GTEST_SKIP() << "a GPU is present: " << tc::device_info().name;
  try {
    choose_device(DeviceRequest::cuda);
    FAIL() << "cuda was chosen without a GPU";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(tc::unavailable_reason()), std::string::npos) << e.what();
  }
  EXPECT_THROW(make_cuda_backend(), Error);
  const DeviceChoice automatic = choose_device(DeviceRequest::automatic);
  EXPECT_EQ(automatic.device, tensor::Device::cpu);
  EXPECT_NE(automatic.reason.find(tc::unavailable_reason()), std::string::npos) << automatic.reason;
  EngineOptions options;
  options.device = DeviceRequest::cuda;
  EXPECT_THROW(Engine(random_model(), options), Error);
}

// --gpu-memory: a fraction in (0, 1], checked before any device is touched (so everywhere).
TEST(GpuMemory, FractionsOutsideZeroToOneAreRefusedByName) {
  for (double bad : {0.0, -0.5, 1.5, std::numeric_limits<double>::quiet_NaN()}) {
    EngineOptions options;
    options.gpu_memory = bad;
    try {
      Engine engine(random_model(), options);
      ADD_FAILURE() << "gpu_memory " << bad << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("gpu_memory"), std::string::npos) << e.what();
    }
  }
}

// On a GPU the KV pool takes what the fraction leaves after the weights (never more than the fraction of
// the card), and a fraction that leaves less than one context is an error that gives the figures.
TEST(GpuMemory, KvPoolIsSizedFromFreeGpuMemory) {
  REQUIRE_GPU();
  const tc::MemoryInfo mem = tc::memory_info();
  auto kv_bytes = [](double fraction) {
    EngineOptions options;
    options.device = DeviceRequest::cuda;
    options.gpu_memory = fraction;
    options.context_length = 256;
    Engine engine(random_model(), options);
    return engine.options().kv_cache_bytes;
  };
  // (The pool is capped at 2^20 pages: the random model's small pages may reach it at both fractions.)
  const std::int64_t small = kv_bytes(0.3), large = kv_bytes(0.9);
  EXPECT_GT(small, 0);
  EXPECT_GE(large, small);
  EXPECT_LE(small, static_cast<std::int64_t>(0.3 * static_cast<double>(mem.total)));
  EXPECT_LE(large, static_cast<std::int64_t>(0.9 * static_cast<double>(mem.total)));
  const tc::MemoryInfo now = tc::memory_info();  // the pools above are cached now, counted free
  const double cached = static_cast<double>(tc::MemoryPool::global().bytes_cached());
  const double used = 1.0 - (static_cast<double>(now.free) + cached) / static_cast<double>(now.total);
  try {
    kv_bytes(std::max(used / 2, 1e-6));  // below what is already in use: nothing left for the pool
    ADD_FAILURE() << "a pool from a fraction below the memory in use";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("KV pool"), std::string::npos) << e.what();
  }
}

TEST(DeviceChoice, RequestsParseAndBadOnesAreNamed) {
  EXPECT_EQ(parse_device_request("cpu"), DeviceRequest::cpu);
  EXPECT_EQ(parse_device_request("cuda"), DeviceRequest::cuda);
  EXPECT_EQ(parse_device_request("auto"), DeviceRequest::automatic);
  try {
    parse_device_request("gpu0");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("gpu0"), std::string::npos);
  }
  EXPECT_EQ(choose_device(DeviceRequest::cpu).device, tensor::Device::cpu);
}

}  // namespace
}  // namespace pie::testing
