// The products of many tokens on int8 tensor cores (pie/src/backend/cuda/mmq_ops.cu): the kernel launched as
// the backend launches it (product_launch.h) with q8_0, q4_0 and q4_1 weights, against the exact sums of the
// same weights' and q8_1 activations' stored values in double (within the bound of f32 sums), on fresh random
// inputs with poisoned outputs (and poison past each output that must stay); two block shapes (the default,
// whose warps split the length, and one whose warps split the rows); token counts 1, 7, 33, 64, 65 and 200
// (partial token tiles, several), rows not a multiple of the block's (75; 130, 3 and 64 as three outputs of one
// launch), rows of 256 (one stage, fewer than the pipeline's depth), 768 and 2,304 (several stages, the ring
// wrapping); the length whole and in 2 and 3 parts across blocks added by mmq_sum (parts of unequal stages,
// the poisoned scratch); every token of a smaller call the same bits as in the call of 200 at the same parts
// (batch invariance by construction). Then the backend's project() of q8_0 at 32, 47 and 64 tokens (the counts
// it sends the kernel; a length of 33 stages, split in two by mmq_parts), how many parts mmq_parts gives, what
// the kernel takes (product_launch.h's mmq_takes) and ORCHARD_CUDA_MMQ_SHAPE's parser (the last three checked
// everywhere). The GPU tests skip with the reason where CUDA cannot be used. 21 s on an H200 with a
// cold JIT cache (the double references and six modules).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cuda_sources.h"
#include "kernels/quant.h"
#include "pie/backend.h"
#include "pie/model.h"
#include "product_launch.h"
#include "device_buffers.h"
#include "require_gpu.h"
#include "tensor/cuda/jit.h"
#include "tensor/cuda/memory_pool.h"
#include "tensor/cuda/stream.h"
#include "tensor/half.h"

namespace pie::testing {
namespace {

using orchard::testing::poisoned;
using orchard::testing::to_host;
using orchard::testing::upload;

using tensor::DType;
namespace tc = tensor::cuda;

std::vector<float> random_floats(std::size_t n, std::mt19937& rng) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// Rows of n values as blocks of `type` by the CPU's rule (kernels::quantize_row_ref).
std::vector<std::uint8_t> quantized_rows(DType type, const std::vector<float>& values, std::int64_t n) {
  const std::size_t row = tensor::row_bytes(type, n);
  const std::size_t rows = values.size() / static_cast<std::size_t>(n);
  std::vector<std::uint8_t> out(row * rows);
  for (std::size_t r = 0; r < rows; ++r) {
    kernels::quantize_row_ref(type, values.data() + r * static_cast<std::size_t>(n), out.data() + r * row, n);
  }
  return out;
}
std::vector<std::uint8_t> q8_0_rows(const std::vector<float>& values, std::int64_t n) {
  return quantized_rows(DType::q8_0, values, n);
}

float block_d(const std::uint8_t* block) {
  std::uint16_t h;
  std::memcpy(&h, block, 2);
  return tensor::f16_to_f32(h);
}

const DType kTypes[] = {DType::q8_0, DType::q4_0, DType::q4_1};

// Activations as the kernel reads them (decoder_ops.cu's quantize_q8_1: the CPU's q8_0 rule): each token's
// int8 (n_blocks * 32) and (d, d * sum q) a block.
struct Q8_1 {
  std::vector<std::int8_t> q;
  std::vector<float> d;  // pairs
};
Q8_1 q8_1_of(const std::vector<float>& x, std::int64_t n_in) {
  const std::vector<std::uint8_t> blocks = q8_0_rows(x, n_in);
  Q8_1 a;
  const std::size_t n_blocks = blocks.size() / 34;
  a.q.resize(n_blocks * 32);
  a.d.resize(n_blocks * 2);
  for (std::size_t b = 0; b < n_blocks; ++b) {
    const float d = block_d(blocks.data() + 34 * b);
    int sum = 0;
    for (int i = 0; i < 32; ++i) {
      a.q[32 * b + i] = static_cast<std::int8_t>(blocks[34 * b + 2 + i]);
      sum += a.q[32 * b + i];
    }
    a.d[2 * b] = d;
    a.d[2 * b + 1] = d * static_cast<float>(sum);
  }
  return a;
}

// One output row's product with one token from the stored values (the weight's blocks, the activations'
// int8, d and d * sum as the buffers hold them) in double: per block d_w d_x times the integer dot of the
// quants (q4_0: nibbles - 8, as d_w (d_x dot(nibbles, q) - 8 d_x sum); q4_1: d_w d_x dot(nibbles, q) + m_w d_x
// sum), and the sum of the magnitudes of the parts the kernel rounds (the scale of the f32 bound).
struct Exact {
  double value = 0, magnitude = 0;
};
Exact exact_dot(DType type, const std::uint8_t* row, const Q8_1& x, std::size_t token, std::int64_t n_blocks) {
  Exact e;
  const std::size_t bb = tensor::row_bytes(type, 32);
  for (std::int64_t b = 0; b < n_blocks; ++b) {
    const std::uint8_t* wb = row + bb * static_cast<std::size_t>(b);
    const std::size_t xb = token * static_cast<std::size_t>(n_blocks) + static_cast<std::size_t>(b);
    const std::int8_t* q = x.q.data() + 32 * xb;
    const double dw = block_d(wb), dx = x.d[2 * xb], sx = x.d[2 * xb + 1];
    long long dot = 0;
    if (type == DType::q8_0) {
      for (int i = 0; i < 32; ++i) dot += static_cast<std::int8_t>(wb[2 + i]) * q[i];
      e.value += dw * dx * static_cast<double>(dot);
      e.magnitude += std::fabs(dw * dx * static_cast<double>(dot));
      continue;
    }
    const std::uint8_t* nib = wb + (type == DType::q4_0 ? 2 : 4);
    for (int i = 0; i < 16; ++i) dot += (nib[i] & 0xF) * q[i] + (nib[i] >> 4) * q[16 + i];
    if (type == DType::q4_0) {
      e.value += dw * (dx * static_cast<double>(dot) - 8.0 * sx);
      e.magnitude += std::fabs(dw) * (std::fabs(dx * static_cast<double>(dot)) + 8.0 * std::fabs(sx));
    } else {
      const double mw = block_d(wb + 2);
      e.value += dw * dx * static_cast<double>(dot) + mw * sx;
      e.magnitude += std::fabs(dw * dx * static_cast<double>(dot)) + std::fabs(mw * sx);
    }
  }
  return e;
}

// The kernel's sums are f32: each block's parts are rounded a few times (at most four: q4_0's d_x dot, 8 d_x
// sum, their difference, times d_w) and added in block order, so an output is within (n_blocks + 4) units of
// 2^-24 of the parts' magnitudes.
double f32_bound(const Exact& e, std::int64_t n_blocks) {
  return static_cast<double>(n_blocks + 4) * std::ldexp(1.0, -24) * e.magnitude + 1e-30;
}

TEST(CudaMmq, KernelMatchesTheExactIntegerDots) {
  REQUIRE_GPU();
  if (tc::device_info().arch() < 80) GTEST_SKIP() << "int8 mma.sync needs sm_80 (this card is sm_" << tc::device_info().arch() << ")";
  std::mt19937 rng(std::random_device{}());
  tc::Stream stream;
  // The default shape (its warps split the length, their parts added at the end) and one whose warps split the
  // rows.
  for (const pie::cuda::MmqShape& shape : {pie::cuda::MmqShape{}, pie::cuda::MmqShape::parse("4,1,1,8,3,1")}) {
  SCOPED_TRACE("shape of " + std::to_string(shape.rows()) + " rows, " + std::to_string(shape.tokens()) + " tokens, " +
               std::to_string(shape.ksplit) + " parts of the length");
  const tc::Module& module = tc::load_module("mmq_ops.cu", pie::cuda::kernel_text("mmq_ops.cu"), shape.defines());
  struct Case {
    std::int64_t n_in;
    std::vector<int> n_out;
  };
  for (DType type : kTypes) {
  const tc::Kernel k = module.kernel(pie::cuda::mmq_entry(std::string(tensor::dtype_name(type))).c_str());
  const tc::Kernel sum = module.kernel("mmq_sum");
  k.set_max_dynamic_shared(shape.shared_bytes(type));
  for (const Case& c : {Case{512, {75}}, Case{256, {130, 3, 64}}, Case{768, {16}}, Case{2304, {130, 64}}}) {
    const std::int64_t n_in = c.n_in, n_blocks = n_in / 32;
    const std::size_t row = tensor::row_bytes(type, n_in);
    std::vector<std::vector<std::uint8_t>> w;
    std::vector<tc::DeviceBuffer> dw;
    for (int n_out : c.n_out) {
      w.push_back(quantized_rows(type, random_floats(static_cast<std::size_t>(n_out * n_in), rng), n_in));
      dw.push_back(upload(w.back().data(), w.back().size()));
    }
    const Q8_1 x = q8_1_of(random_floats(static_cast<std::size_t>(200 * n_in), rng), n_in);
    tc::DeviceBuffer dq = upload(x.q.data(), x.q.size()), dd = upload(x.d.data(), x.d.size() * sizeof(float));
    // The exact sums of every (output, token, row), the same for a token whatever the call.
    std::vector<std::vector<Exact>> exact(c.n_out.size());
    for (std::size_t j = 0; j < c.n_out.size(); ++j) {
      for (int t = 0; t < 200; ++t) {
        for (int o = 0; o < c.n_out[j]; ++o) {
          exact[j].push_back(exact_dot(type, w[j].data() + static_cast<std::size_t>(o) * row, x, static_cast<std::size_t>(t), n_blocks));
        }
      }
    }
    // The length whole (1) and in parts added by mmq_sum (2; 3: stages not a multiple of the parts for 768
    // and 2,304; fewer stages than parts asked are refused down to what fits).
    for (int forced_parts : {1, 2, 3}) {
    std::vector<std::vector<float>> largest(c.n_out.size());
    for (int n_tokens : {200, 1, 7, 33, 64, 65}) {  // the largest first: the others are checked against it
      SCOPED_TRACE(std::string(tensor::dtype_name(type)) + " rows of " + std::to_string(n_in) + ", " + std::to_string(c.n_out.size()) + " outputs, " +
                   std::to_string(n_tokens) + " tokens, " + std::to_string(forced_parts) + " parts asked");
      pie::cuda::ProductOutputs po;
      std::vector<tc::DeviceBuffer> dy;
      for (std::size_t j = 0; j < c.n_out.size(); ++j) {
        // 64 floats past the output: rows or tokens past its end must not be written.
        dy.push_back(poisoned(static_cast<std::size_t>(n_tokens * c.n_out[j] + 64)));
        ASSERT_TRUE(pie::cuda::mmq_takes(type, n_in, static_cast<long long>(row), dw[j].as<void>()));
        po.w[j] = dw[j].as<void>();
        po.y[j] = dy[j].as<float>();
        po.row_bytes[j] = static_cast<long long>(row);
        po.n_out[j] = c.n_out[j];
        ++po.count;
      }
      const unsigned grid_x = pie::cuda::matvec_layout(po, shape.rows());
      int n_parts = pie::cuda::mmq_parts(grid_x, n_in, forced_parts);
      ASSERT_EQ(n_parts, forced_parts <= n_blocks / 8 ? forced_parts : forced_parts == 3 ? 1 : n_blocks / 8);
      const long long n_part_floats = pie::cuda::mmq_parts_floats(n_parts, grid_x, shape.rows(), n_tokens);
      ASSERT_EQ(n_part_floats, n_parts == 1 ? 0 : static_cast<long long>(n_parts) * n_tokens * grid_x * shape.rows());
      tc::DeviceBuffer part_buffer = poisoned(static_cast<std::size_t>(std::max(n_part_floats, 1LL)));
      float* parts = n_parts == 1 ? nullptr : part_buffer.as<float>();
      const tc::Dim3 grid{grid_x, static_cast<unsigned>((n_tokens + shape.tokens() - 1) / shape.tokens()),
                          static_cast<unsigned>(n_parts)};
      int ni = static_cast<int>(n_in), nt = n_tokens;
      const void* q = dq.as<void>();
      const void* d = dd.as<void>();
      void* args[] = {&po, &ni, &q, &d, &nt, &parts};
      k.launch(grid, {static_cast<unsigned>(shape.threads()), 1, 1}, static_cast<unsigned>(shape.shared_bytes(type)),
               &stream, args);
      if (n_parts > 1) {
        int nbx = static_cast<int>(grid_x);
        void* sum_args[] = {&po, &parts, &n_parts, &nbx, &nt};
        sum.launch({(grid_x * static_cast<unsigned>(shape.rows()) + 255) / 256, static_cast<unsigned>(n_tokens), 1},
                   {256, 1, 1}, 0, &stream, sum_args);
      }
      stream.synchronize();
      for (std::size_t j = 0; j < c.n_out.size(); ++j) {
        const int n_out = c.n_out[j];
        const std::vector<float> y = to_host(dy[j], static_cast<std::size_t>(n_tokens * n_out + 64));
        for (std::size_t i = static_cast<std::size_t>(n_tokens * n_out); i < y.size(); ++i) {
          ASSERT_TRUE(std::isnan(y[i])) << "output " << j << ": written past its end at " << i;
        }
        for (int t = 0; t < n_tokens; ++t) {
          for (int o = 0; o < n_out; ++o) {
            const float got = y[static_cast<std::size_t>(t * n_out + o)];
            const Exact& e = exact[j][static_cast<std::size_t>(t * n_out + o)];
            ASSERT_TRUE(std::isfinite(got)) << "output " << j << " token " << t << " row " << o << " unwritten";
            ASSERT_LE(std::fabs(got - e.value), f32_bound(e, n_blocks))
                << "output " << j << " token " << t << " row " << o << ": " << got << " against " << e.value;
          }
        }
        if (n_tokens == 200) {
          largest[j] = y;
        } else {
          for (std::size_t i = 0; i < static_cast<std::size_t>(n_tokens * n_out); ++i) {
            ASSERT_EQ(std::memcmp(&y[i], &largest[j][i], sizeof(float)), 0)
                << "output " << j << " element " << i << ": " << y[i] << " in this call, " << largest[j][i]
                << " in the call of 200 tokens";
          }
        }
      }
    }
    }
  }
  }
  }
}

// The backend's project() of q8_0 rows at 32, 47 and 64 tokens (the counts it sends the kernel: two outputs of
// one input, one launch) against the CPU reference on the activations rounded to 8 bits by the CPU's rule,
// within the f32 bound of the kernel's sums.
TEST(CudaMmq, BackendProductsOfThirtyTwoToSixtyFourQ8_0TokensMatchTheExactDots) {
  REQUIRE_GPU();
  if (tc::device_info().arch() < 80) GTEST_SKIP() << "int8 mma.sync needs sm_80 (this card is sm_" << tc::device_info().arch() << ")";
  std::mt19937 rng(std::random_device{}());
  auto backend = make_cuda_backend(0, {});
  // 8,448 inputs: 33 stages, the length in mmq_parts's two parts of 16 and 17 (the launch's 5 blocks of rows).
  const std::int64_t n_in = 8448, n_blocks = n_in / 32;
  const std::size_t row = tensor::row_bytes(DType::q8_0, n_in);
  const int n_out[] = {75, 40};
  const int rows = pie::cuda::MmqShape{}.rows();
  ASSERT_EQ(pie::cuda::mmq_parts(static_cast<unsigned>((n_out[0] + rows - 1) / rows + (n_out[1] + rows - 1) / rows), n_in), 2);
  std::vector<std::uint8_t> bytes[2];
  std::shared_ptr<Model> host[2];
  std::shared_ptr<const ModelWeights> device[2];
  for (int j = 0; j < 2; ++j) {
    bytes[j] = q8_0_rows(random_floats(static_cast<std::size_t>(n_out[j] * n_in), rng), n_in);
    host[j] = std::make_shared<Model>();
    host[j]->weights.token_embd = weight_view(bytes[j].data(), bytes[j].size(), DType::q8_0, n_out[j], n_in);
    device[j] = backend->upload(host[j]);
  }
  for (std::int64_t n_tokens : {32, 47, 64}) {
    SCOPED_TRACE(std::to_string(n_tokens) + " tokens");
    const std::vector<float> x = random_floats(static_cast<std::size_t>(n_tokens * n_in), rng);
    const Q8_1 xq = q8_1_of(x, n_in);
    tc::DeviceBuffer dx = upload(x.data(), x.size() * sizeof(float));
    tc::DeviceBuffer dy[2] = {poisoned(static_cast<std::size_t>(n_tokens * n_out[0])),
                              poisoned(static_cast<std::size_t>(n_tokens * n_out[1]))};
    const Projection outs[] = {
        {ProjectionSite::q, 0, &device[0]->token_embd, {dy[0].as<float>(), n_tokens, n_out[0]}},
        {ProjectionSite::k, 0, &device[1]->token_embd, {dy[1].as<float>(), n_tokens, n_out[1]}}};
    backend->begin([&] { backend->project({dx.as<float>(), n_tokens, n_in}, outs); });
    backend->wait();
    for (int j = 0; j < 2; ++j) {
      const std::vector<float> y = to_host(dy[j], static_cast<std::size_t>(n_tokens * n_out[j]));
      for (std::int64_t t = 0; t < n_tokens; ++t) {
        for (int o = 0; o < n_out[j]; ++o) {
          const float got = y[static_cast<std::size_t>(t * n_out[j] + o)];
          const Exact e = exact_dot(DType::q8_0, bytes[j].data() + static_cast<std::size_t>(o) * row, xq,
                                    static_cast<std::size_t>(t), n_blocks);
          ASSERT_TRUE(std::isfinite(got)) << "output " << j << " token " << t << " row " << o << " unwritten";
          ASSERT_LE(std::fabs(got - e.value), f32_bound(e, n_blocks))
              << "output " << j << " token " << t << " row " << o << ": " << got << " against " << e.value;
        }
      }
    }
  }
}

// How many parts a launch's length is split into: from the weights' shape only (the blocks of rows and the
// stages), enough for kMmqTargetBlocks blocks with parts of at least kMmqMinPartStages stages; a forced count
// only where there are stages for it.
TEST(CudaMmq, LengthPartsFollowTheWeightsShape) {
  using pie::cuda::mmq_parts;
  EXPECT_EQ(mmq_parts(128, 4096), 1);   // o of the 8B shapes (4096 rows at 32 a block): 16 stages
  EXPECT_EQ(mmq_parts(192, 4096), 1);   // q + k + v
  EXPECT_EQ(mmq_parts(896, 4096), 1);   // gate + up
  EXPECT_EQ(mmq_parts(128, 14336), 2);  // down: 56 stages
  EXPECT_EQ(mmq_parts(4, 8448), 2);     // 33 stages: 2 parts of at least 16
  EXPECT_EQ(mmq_parts(4, 16384), 4);    // 64 stages: 4 parts of 16
  EXPECT_EQ(mmq_parts(4, 2304), 1);     // 9 stages: one part
  EXPECT_EQ(mmq_parts(300, 4096), 1);   // enough blocks already
  EXPECT_EQ(mmq_parts(4, 768, 3), 3);   // forced: a stage a part
  EXPECT_EQ(mmq_parts(4, 768, 4), 2);   // forced past the stages: halved until it fits
  EXPECT_EQ(mmq_parts(4, 256, 2), 1);
  EXPECT_EQ(pie::cuda::mmq_parts_floats(1, 128, 32, 64), 0);
  EXPECT_EQ(pie::cuda::mmq_parts_floats(2, 128, 32, 64), 2LL * 64 * 128 * 32);
}

// What the kernel takes: q8_0 / q4_0 / q4_1 rows of a multiple of 256 elements starting 16-byte aligned; every
// other type, length or start stays on the other paths.
TEST(CudaMmq, TakesOnlyWholeStagesOfAlignedBlockRows) {
  alignas(16) static const unsigned char rows[64] = {};
  const long long row_512 = static_cast<long long>(tensor::row_bytes(DType::q8_0, 512));
  EXPECT_TRUE(pie::cuda::mmq_takes(DType::q8_0, 512, row_512, rows));
  EXPECT_TRUE(pie::cuda::mmq_takes(DType::q8_0, 14336, static_cast<long long>(tensor::row_bytes(DType::q8_0, 14336)), rows));
  EXPECT_TRUE(pie::cuda::mmq_takes(DType::q4_0, 4096, static_cast<long long>(tensor::row_bytes(DType::q4_0, 4096)), rows));
  EXPECT_TRUE(pie::cuda::mmq_takes(DType::q4_1, 256, static_cast<long long>(tensor::row_bytes(DType::q4_1, 256)), rows));
  EXPECT_FALSE(pie::cuda::mmq_takes(DType::q4_0, 544, static_cast<long long>(tensor::row_bytes(DType::q4_0, 544)), rows));
  EXPECT_FALSE(pie::cuda::mmq_takes(DType::q8_0, 576, static_cast<long long>(tensor::row_bytes(DType::q8_0, 576)), rows));
  EXPECT_FALSE(pie::cuda::mmq_takes(DType::q8_0, 512, row_512 + 2, rows));  // rows 2 bytes apart more
  EXPECT_FALSE(pie::cuda::mmq_takes(DType::q8_0, 512, row_512, rows + 2));  // a start off 16 bytes
  for (DType t : {DType::f32, DType::f16, DType::bf16, DType::q4_K, DType::q6_K}) {
    EXPECT_FALSE(pie::cuda::mmq_takes(t, 512, static_cast<long long>(tensor::row_bytes(t, 512)), rows))
        << tensor::dtype_name(t);
  }
}

// ORCHARD_CUDA_MMQ_SHAPE's parser: six fields of 1 to 16 (ksplit dividing 8, at most 32 warps), anything else
// refused saying what it wants.
TEST(CudaMmq, ShapesParseOrAreRefusedWithTheReason) {
  const pie::cuda::MmqShape s = pie::cuda::MmqShape::parse("2,2,1,4,3,2");
  EXPECT_EQ(s.rows(), 32);
  EXPECT_EQ(s.tokens(), 64);
  EXPECT_EQ(s.threads(), 256);
  EXPECT_EQ(s.stages, 3);
  EXPECT_EQ(s.ksplit, 2);
  EXPECT_EQ(s.defines().size(), 6u);
  for (const char* bad : {"", "x", "1,2,3", "2,2,1,4,3", "2,2,1,4,3,1,", "2,2,1,4,3,1,1", "0,1,1,1,1,1", "17,1,1,1,1,1",
                          "8,8,1,1,1,1", "4,2,1,1,1,8", "2,2,1,4,3,3", "2;2;1;4;3;1"}) {
    try {
      pie::cuda::MmqShape::parse(bad);
      ADD_FAILURE() << "'" << bad << "' parsed";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("warps_m,warps_n,wm,wn,stages,ksplit"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace pie::testing
