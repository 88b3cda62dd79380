// The tensor/cuda sources compiled as a build without CUDA (ORCHARD_HAVE_CUDA=0; this test compiles them
// itself): every entry point throws CudaUnavailable saying "built without CUDA".
#include <gtest/gtest.h>
#include <tensor/cuda/blas.h>
#include <tensor/cuda/device.h>
#include <tensor/cuda/jit.h>
#include <tensor/cuda/memory_pool.h>
#include <tensor/cuda/stream.h>

#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

namespace {

namespace tc = tensor::cuda;

void expect_built_without(const std::function<void()>& call, const char* op) {
  try {
    call();
    ADD_FAILURE() << op << ": expected CudaUnavailable";
  } catch (const tc::CudaUnavailable& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("built without CUDA"), std::string::npos) << what;
    EXPECT_NE(what.find(op), std::string::npos) << what;
  }
}

TEST(CudaDisabled, ReportsBuiltWithoutCuda) {
  EXPECT_FALSE(tc::built_with_cuda());
  EXPECT_FALSE(tc::available());
  EXPECT_NE(tc::unavailable_reason().find("built without CUDA"), std::string::npos);
}

TEST(CudaDisabled, EveryEntryPointThrows) {
  expect_built_without([] { tc::device_info(); }, "tensor::cuda::device_info");
  expect_built_without([] { tc::make_current(); }, "tensor::cuda::make_current");
  expect_built_without([] { tc::synchronize(); }, "tensor::cuda::synchronize");
  expect_built_without([] { tc::Stream s; }, "tensor::cuda::Stream");
  expect_built_without([] { tc::Event e; }, "tensor::cuda::Event");
  expect_built_without([] { tc::MemoryPool::global().allocate(64); }, "tensor::cuda::MemoryPool::allocate");
  expect_built_without([] { tc::nvrtc_version(); }, "tensor::cuda::nvrtc_version");
  expect_built_without([] { tc::jit_cache_key("x", {}, 90); }, "tensor::cuda::jit_cache_key");
  expect_built_without([] { tc::compile_cubin("x.cu", "x", {}, 90); }, "tensor::cuda::compile_cubin");
  expect_built_without([] { tc::load_module("x.cu", "x", {}); }, "tensor::cuda::load_module");
  expect_built_without([] { tc::DeviceBuffer b; b.fill_bytes(0); }, "tensor::cuda::DeviceBuffer::fill_bytes");
}

// cuBLAS cannot be loaded without CUDA (the backend's products keep their kernels); ORCHARD_CUBLAS=0 hides it
// whatever the build, and the reason says so.
TEST(CudaDisabled, CublasIsUnavailableAndTheVariableHidesIt) {
  EXPECT_NE(tc::blas_unavailable_reason().find("built without CUDA"), std::string::npos);
  setenv("ORCHARD_CUBLAS", "0", 1);
  EXPECT_EQ(tc::blas_unavailable_reason(), "hidden by ORCHARD_CUBLAS=0");
  unsetenv("ORCHARD_CUBLAS");
}

}  // namespace
