// The CUDA kernel lab on a GPU (skipped with the reason where there is none): every kernel against its
// CPU reference over sweeps of shapes, fresh random inputs each run, outputs poisoned.
#include <gtest/gtest.h>
#include <kernels/cuda/bitmask_cuda.h>
#include <pal/cuda/attention_cuda.h>
#include <pal/cuda/kv_write_cuda.h>
#include <kernels/error.h>
#include <pal/error.h>
#include <tensor/cuda/device.h>

#include <random>

#include "require_gpu.h"
#include "cuda_lab.h"

namespace {

namespace lab = orchard::cuda_lab;

void expect_all_ok(const std::vector<lab::CaseResult>& results) {
  ASSERT_FALSE(results.empty());
  for (const auto& r : results) {
    EXPECT_TRUE(r.ok()) << r.name << ": error " << r.error << " (tolerance " << r.tolerance << ")"
                        << (r.unwritten ? " unwritten/mismatch: " : "") << r.detail;
  }
}

std::uint64_t fresh_seed() {
  const std::uint64_t seed = (static_cast<std::uint64_t>(std::random_device{}()) << 32) | std::random_device{}();
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  return seed;
}

TEST(CudaLab, DecodeAttention) { REQUIRE_GPU(); expect_all_ok(lab::check_decode(fresh_seed())); }
TEST(CudaLab, PrefillAttention) { REQUIRE_GPU(); expect_all_ok(lab::check_prefill(fresh_seed())); }
TEST(CudaLab, RopeAppend) { REQUIRE_GPU(); expect_all_ok(lab::check_rope_append(fresh_seed())); }
TEST(CudaLab, CopyPages) { REQUIRE_GPU(); expect_all_ok(lab::check_copy_pages(fresh_seed())); }
TEST(CudaLab, Bitmask) { REQUIRE_GPU(); expect_all_ok(lab::check_bitmask(fresh_seed())); }

// Validation runs before any device work, so these hold on every machine with a CUDA build.
TEST(CudaLabErrors, UnsupportedShapesThrowPalError) {
  pal::PagedKv kv;
  kv.dtype = tensor::DType::q8_0;
  kv.head_dim = 128;
  kv.n_kv_heads = 8;
  pal::AttentionParams p;
  p.n_q_heads = 32;
  p.scale = 0.1f;
  float dummy = 0;
  try {
    pal::cuda::decode_attention(kv, p, {&dummy, &dummy}, 16);
    ADD_FAILURE() << "a q8_0 KV cache was accepted";
  } catch (const pal::Error& e) {
    EXPECT_NE(std::string(e.what()).find("KV dtype q8_0"), std::string::npos) << e.what();
  }
  EXPECT_THROW(pal::cuda::prefill_attention(kv, p, {&kv.n_kv_heads, &dummy, &dummy}, 16), pal::Error);
  kv.dtype = tensor::DType::f32;
  kv.n_seqs = 1;
  kv.head_dim = 96;  // f32 takes pal's head dims too
  EXPECT_THROW(pal::cuda::decode_attention(kv, p, {&dummy, &dummy}, 16), pal::Error);
  kv.n_seqs = 0;
  kv.dtype = tensor::DType::bf16;
  kv.head_dim = 96;
  EXPECT_THROW(pal::cuda::decode_attention(kv, p, {&dummy, &dummy}, 16), pal::Error);
  kv.head_dim = 128;
  p.n_q_heads = 12;
  EXPECT_THROW(pal::cuda::prefill_attention(kv, p, {nullptr, &dummy, &dummy}, 16), pal::Error);
  pal::cuda::KvWriteArgs w{tensor::DType::bf16, 8, 80, &dummy, &dummy};
  EXPECT_THROW(pal::cuda::kv_append(w, &dummy, &dummy, nullptr, 1), pal::Error);
  pal::cuda::KvWriteArgs w8{tensor::DType::q8_0, 8, 128, &dummy, &dummy};
  try {
    pal::cuda::kv_append(w8, &dummy, &dummy, nullptr, 0);
    ADD_FAILURE() << "a q8_0 KV write was accepted";
  } catch (const pal::Error& e) {
    EXPECT_NE(std::string(e.what()).find("KV dtype q8_0"), std::string::npos) << e.what();
  }
  pal::RopeConfig rc;
  rc.head_dim = 64;
  rc.rotary_dim = 64;
  w.head_dim = 128;
  EXPECT_THROW(pal::cuda::rope_append(rc, w, &dummy, &dummy, &dummy, nullptr, nullptr, 1, 1), pal::Error);
}

TEST(CudaLabErrors, BitmaskShapeErrors) {
  float x = 0;
  std::uint32_t m = 0;
  EXPECT_THROW(kernels::cuda::apply_bitmask(&x, &m, 1, 100, 3, 100), kernels::ShapeError);
  EXPECT_THROW(kernels::cuda::apply_bitmask(&x, &m, -1, 100, 4, 100), kernels::ShapeError);
}

}  // namespace
