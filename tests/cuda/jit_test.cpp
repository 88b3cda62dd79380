// The CUDA JIT without a GPU: cache keys, the disk cache, NVRTC errors with their log, and what a machine
// without a driver or GPU reports. (Kernel compilation of every embedded source: jit_compile_test.cpp.)
#include <gtest/gtest.h>
#include <tensor/cuda/device.h>
#include <tensor/cuda/jit.h>
#include <tensor/cuda/memory_pool.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

namespace {

namespace tc = tensor::cuda;

constexpr const char* kTinyKernel = R"(extern "C" __global__ void add_one(float* x, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] += 1.0f;
})";

// Points the disk cache at a fresh folder for the test's lifetime.
class TempCache {
 public:
  TempCache() {
    dir_ = std::filesystem::temp_directory_path() /
           ("orchard-jit-test-" + std::to_string(std::random_device{}()));
    old_ = std::getenv("ORCHARD_CACHE_DIR") ? std::getenv("ORCHARD_CACHE_DIR") : "";
    setenv("ORCHARD_CACHE_DIR", dir_.c_str(), 1);
  }
  ~TempCache() {
    if (old_.empty()) unsetenv("ORCHARD_CACHE_DIR"); else setenv("ORCHARD_CACHE_DIR", old_.c_str(), 1);
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  const std::filesystem::path& dir() const { return dir_; }

 private:
  std::filesystem::path dir_;
  std::string old_;
};

#define SKIP_WITHOUT_CUDA_BUILD() \
  if (!tc::built_with_cuda()) GTEST_SKIP() << "built without CUDA (ORCHARD_CUDA off)"

TEST(CudaJit, CacheDirFollowsEnvironment) {
  TempCache cache;
  EXPECT_EQ(tc::jit_cache_dir(), cache.dir() / "kernels");
}

TEST(CudaJit, CacheKeyCoversSourceOptionsAndArch) {
  SKIP_WITHOUT_CUDA_BUILD();
  const std::string a = tc::jit_cache_key(kTinyKernel, {"-DX=1"}, 90);
  EXPECT_EQ(a, tc::jit_cache_key(kTinyKernel, {"-DX=1"}, 90));
  EXPECT_NE(a, tc::jit_cache_key(kTinyKernel, {"-DX=2"}, 90));
  EXPECT_NE(a, tc::jit_cache_key(kTinyKernel, {"-DX=1"}, 80));
  EXPECT_NE(a, tc::jit_cache_key(std::string(kTinyKernel) + " ", {"-DX=1"}, 90));
  EXPECT_NE(tc::jit_cache_key("ab", {"c"}, 90), tc::jit_cache_key("a", {"bc"}, 90));
  EXPECT_EQ(a.size(), 32u);
}

TEST(CudaJit, CompilesWithoutGpuAndHitsTheDiskCache) {
  SKIP_WITHOUT_CUDA_BUILD();
  TempCache cache;
  const auto before = tc::jit_stats();
  const std::string cubin = tc::compile_cubin("tiny.cu", kTinyKernel, {}, 80);
  ASSERT_GT(cubin.size(), 4u);
  EXPECT_EQ(cubin.substr(1, 3), "ELF");
  const auto mid = tc::jit_stats();
  EXPECT_EQ(mid.compiles, before.compiles + 1);
  const auto path = cache.dir() / "kernels" / (tc::jit_cache_key(kTinyKernel, {}, 80) + ".cubin");
  EXPECT_TRUE(std::filesystem::exists(path)) << path;
  EXPECT_EQ(tc::compile_cubin("tiny.cu", kTinyKernel, {}, 80), cubin);
  const auto after = tc::jit_stats();
  EXPECT_EQ(after.compiles, mid.compiles);
  EXPECT_EQ(after.disk_hits, mid.disk_hits + 1);
}

TEST(CudaJit, UnwritableCacheIsNotAnError) {
  SKIP_WITHOUT_CUDA_BUILD();
  TempCache cache;
  // A file where the cache folder should be: nothing can be written, compilation still succeeds.
  std::filesystem::create_directories(cache.dir());
  { std::ofstream(cache.dir() / "kernels") << "not a folder"; }
  EXPECT_GT(tc::compile_cubin("tiny.cu", kTinyKernel, {"-DUNWRITABLE"}, 90).size(), 0u);
}

TEST(CudaJit, CompileErrorCarriesTheNvrtcLog) {
  SKIP_WITHOUT_CUDA_BUILD();
  TempCache cache;
  try {
    tc::compile_cubin("broken.cu", "extern \"C\" __global__ void f() { undefined_thing = 1; }", {"-DA=1"}, 90);
    FAIL() << "expected CompileError";
  } catch (const tc::CompileError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("[tensor::cuda::compile_cubin] broken.cu"), std::string::npos) << what;
    EXPECT_NE(what.find("-DA=1"), std::string::npos) << what;
    EXPECT_NE(what.find("undefined_thing"), std::string::npos) << what;
    EXPECT_NE(e.log().find("undefined_thing"), std::string::npos);
  }
}

TEST(CudaJit, BadArchitectureIsACompileError) {
  SKIP_WITHOUT_CUDA_BUILD();
  TempCache cache;
  EXPECT_THROW(tc::compile_cubin("tiny.cu", kTinyKernel, {}, 12), tc::CompileError);
}

TEST(CudaDevice, UnavailableMachineThrowsWithTheReason) {
  if (tc::available()) GTEST_SKIP() << "a CUDA device is present; this test is for machines without one";
  const std::string reason = tc::unavailable_reason();
  EXPECT_FALSE(reason.empty());
  try {
    tc::device_info();
    FAIL() << "expected CudaUnavailable";
  } catch (const tc::CudaUnavailable& e) {
    EXPECT_NE(std::string(e.what()).find(reason.substr(0, 20)), std::string::npos) << e.what();
  }
  EXPECT_THROW(tc::MemoryPool::global().allocate(1024), tc::CudaUnavailable);
  EXPECT_THROW(tc::Stream(), tc::CudaUnavailable);
  EXPECT_THROW(tc::load_module("tiny.cu", kTinyKernel, {}), tc::CudaUnavailable);
}

TEST(CudaMemoryPool, SizeClasses) {
  EXPECT_EQ(tc::MemoryPool::size_class(1), 256u);
  EXPECT_EQ(tc::MemoryPool::size_class(256), 256u);
  EXPECT_EQ(tc::MemoryPool::size_class(257), 512u);
  EXPECT_EQ(tc::MemoryPool::size_class(5u << 20), 8u << 20);
  EXPECT_EQ(tc::MemoryPool::size_class((32u << 20) + 1), 34u << 20);
  EXPECT_EQ(tc::MemoryPool::global().allocate(0).empty(), true);
}

}  // namespace
