// Every embedded CUDA kernel (pal and kernels) compiles with NVRTC for sm_80 and sm_90, in every variant
// the launchers use: no GPU needed, so a broken kernel fails CI.
#include <gtest/gtest.h>
#include <kernels/cuda/bitmask_cuda.h>
#include <pal/cuda/attention_cuda.h>
#include <tensor/cuda/device.h>
#include <tensor/cuda/jit.h>

#include "cuda_sources.h"  // pie/src/backend/cuda: the CUDA backend's kernels

#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

namespace {

namespace tc = tensor::cuda;

class JitCompile : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    if (!tc::built_with_cuda()) GTEST_SKIP() << "built without CUDA (ORCHARD_CUDA off)";
    // A fresh cache: the test must run NVRTC, not read an old cubin.
    dir_ = std::filesystem::temp_directory_path() / ("orchard-jit-compile-" + std::to_string(std::random_device{}()));
    setenv("ORCHARD_CACHE_DIR", dir_.c_str(), 1);
  }
  void TearDown() override {
    std::error_code ec;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
    unsetenv("ORCHARD_CACHE_DIR");
  }
  std::filesystem::path dir_;
};

TEST_P(JitCompile, PalKernels) {
  const int arch = GetParam();
  const auto variants = pal::cuda::kernel_variants();
  ASSERT_GE(variants.size(), 12u);
  for (const auto& v : variants) {
    std::string opts;
    for (const auto& o : v.options) opts += o + " ";
    SCOPED_TRACE(v.source + " " + opts + "sm_" + std::to_string(arch));
    std::string cubin;
    EXPECT_NO_THROW(cubin = tc::compile_cubin(v.source, pal::cuda::kernel_text(v.source), v.options, arch));
    EXPECT_GT(cubin.size(), 0u);
  }
}

TEST_P(JitCompile, KernelsLayerSources) {
  const int arch = GetParam();
  const auto sources = kernels::cuda::embedded_sources();
  ASSERT_FALSE(sources.empty());
  for (const auto& s : sources) {
    SCOPED_TRACE(std::string(s.name));
    EXPECT_NO_THROW(tc::compile_cubin(s.name, s.text, {}, arch));
  }
}

TEST_P(JitCompile, PieBackendSources) {
  const int arch = GetParam();
  const auto sources = pie::cuda::embedded_sources();
  ASSERT_FALSE(sources.empty());
  for (const auto& s : sources) {
    SCOPED_TRACE(std::string(s.name));
    std::string cubin;
    EXPECT_NO_THROW(cubin = tc::compile_cubin(s.name, pie::cuda::kernel_text(s.name), {}, arch));
    EXPECT_GT(cubin.size(), 0u);
  }
  EXPECT_NO_THROW(pie::cuda::embedded_source("decoder_ops.cu"));
  EXPECT_NO_THROW(pie::cuda::embedded_source("weight_blocks.cuh"));
  EXPECT_NO_THROW(pie::cuda::embedded_source("lora_ops.cu"));
  EXPECT_NO_THROW(pie::cuda::embedded_source("matvec_mma_ops.cu"));
  EXPECT_NO_THROW(pie::cuda::embedded_source("mmq_ops.cu"));
}

// The matvec products' tunables other than the defaults (orchard_bench_products sweeps them with -D): four
// lanes a block (the smallest parts), two pieces a load, pipelined loads everywhere but the float types' wide
// tiles, eight rows a wide tile, the rows asked into L2 before the wait for the kernel before. About 11 s of NVRTC an
// architecture (conformance label).
TEST_P(JitCompile, PieBackendProductTunables) {
  const int arch = GetParam();
  const std::vector<std::string> options = {"-DMV_SPLIT=4", "-DMV_UNROLL=2", "-DMV_PIPELINE=1", "-DMV_PIPELINE_WIDE=0",
                                            "-DMV_ROWS_WIDE=8", "-DMV_PREFETCH_L2=1"};
  std::string cubin;
  EXPECT_NO_THROW(cubin = tc::compile_cubin("decoder_ops.cu", pie::cuda::kernel_text("decoder_ops.cu"), options, arch));
  EXPECT_GT(cubin.size(), 0u);
}

// The tensor-core products' tunables other than the defaults (orchard_bench_products --mma sweeps them with
// -D): activations rounded once, pipelining the other way round, two 16-row tiles and four warps a block, one
// block an SM at least, two pieces a load.
TEST_P(JitCompile, PieBackendMmaProductTunables) {
  const int arch = GetParam();
  const std::vector<std::string> options = {"-DMMA_EXACT_X=0", "-DMMA_PIPELINE=0", "-DMMA_PIPELINE_N16=1",
                                            "-DMMA_TILES=2",   "-DMMA_WARPS=4",    "-DMMA_MIN_BLOCKS=1",
                                            "-DMMA_UNROLL=2"};
  std::string cubin;
  EXPECT_NO_THROW(cubin = tc::compile_cubin("matvec_mma_ops.cu", pie::cuda::kernel_text("matvec_mma_ops.cu"), options,
                                            arch));
  EXPECT_GT(cubin.size(), 0u);
}

// The int8 tensor-core products' tunables other than the defaults (orchard_bench_products --mmq sweeps them
// with -D): a 2 x 2 warp grid of two 16-row and four 8-token tiles each, four stages.
TEST_P(JitCompile, PieBackendMmqProductTunables) {
  const int arch = GetParam();
  const std::vector<std::string> options = {"-DMMQ_WARPS_M=2", "-DMMQ_WARPS_N=2", "-DMMQ_WM=2", "-DMMQ_WN=4",
                                            "-DMMQ_STAGES=4"};
  std::string cubin;
  EXPECT_NO_THROW(cubin = tc::compile_cubin("mmq_ops.cu", pie::cuda::kernel_text("mmq_ops.cu"), options, arch));
  EXPECT_GT(cubin.size(), 0u);
}

TEST(JitCompileSources, EveryPalSourceIsEmbedded) {
  if (!tc::built_with_cuda()) GTEST_SKIP() << "built without CUDA (ORCHARD_CUDA off)";
  for (const char* name : {"cuda_common.cuh", "decode_attention.cu", "prefill_attention.cu", "kv_write.cu"}) {
    EXPECT_NO_THROW(pal::cuda::embedded_source(name)) << name;
  }
  EXPECT_THROW(pal::cuda::embedded_source("nope.cu"), tc::CudaError);
}

INSTANTIATE_TEST_SUITE_P(Archs, JitCompile, ::testing::Values(80, 90),
                         [](const auto& info) { return "sm_" + std::to_string(info.param); });

}  // namespace
