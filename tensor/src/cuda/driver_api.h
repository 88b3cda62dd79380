// The CUDA driver API loaded at run time with dlopen("libcuda.so.1"): binaries built with CUDA start on
// machines without a driver (CI), and fail there only when a CUDA entry point is called. Private to tensor.
#pragma once

#ifndef ORCHARD_HAVE_CUDA
#define ORCHARD_HAVE_CUDA 0
#endif

#if ORCHARD_HAVE_CUDA
#include <cuda.h>
#include <cudaProfiler.h>

#include <string>

namespace tensor::cuda::detail {

#define ORCHARD_CU_FUNCTIONS(X)                                                                          \
  X(cuInit) X(cuDriverGetVersion) X(cuDeviceGetCount) X(cuDeviceGet) X(cuDeviceGetName)                   \
  X(cuDeviceGetAttribute) X(cuDeviceTotalMem) X(cuDevicePrimaryCtxRetain) X(cuCtxSetCurrent)              \
  X(cuCtxSynchronize) X(cuModuleLoadData) X(cuModuleGetFunction) X(cuLaunchKernel) X(cuFuncSetAttribute)  \
  X(cuMemAlloc) X(cuMemFree) X(cuMemcpyHtoD) X(cuMemcpyDtoH) X(cuMemcpyHtoDAsync) X(cuMemcpyDtoHAsync)    \
  X(cuMemsetD8) X(cuMemsetD8Async) X(cuMemcpyDtoDAsync) X(cuStreamCreate) X(cuStreamDestroy) X(cuStreamSynchronize) X(cuStreamQuery)            \
  X(cuStreamWaitEvent) X(cuEventCreate) X(cuEventDestroy) X(cuEventRecord) X(cuEventSynchronize)          \
  X(cuEventElapsedTime) X(cuGetErrorName) X(cuGetErrorString) X(cuOccupancyMaxActiveBlocksPerMultiprocessor) X(cuLaunchKernelEx) X(cuMemGetInfo)                                 \
  X(cuMemAllocHost) X(cuMemFreeHost) X(cuStreamBeginCapture) X(cuStreamEndCapture) X(cuGraphInstantiate)   \
  X(cuGraphExecUpdate) X(cuGraphLaunch) X(cuGraphDestroy) X(cuGraphExecDestroy) X(cuGraphGetNodes)    \
  X(cuProfilerStart) X(cuProfilerStop)

struct DriverApi {
#define ORCHARD_CU_MEMBER(fn) decltype(&::fn) fn = nullptr;
  ORCHARD_CU_FUNCTIONS(ORCHARD_CU_MEMBER)
#undef ORCHARD_CU_MEMBER
};

// The loaded driver with cuInit done; throws CudaUnavailable (the reason) when it cannot be loaded.
const DriverApi& driver();

// Throws DriverError "[op] <what>: CUDA_ERROR_X (text)" when status is not CUDA_SUCCESS.
void check(CUresult status, const char* op, const std::string& what);

}  // namespace tensor::cuda::detail
#endif

namespace tensor::cuda::detail {
// Throws CudaUnavailable "[op] built without CUDA ...". Used by every entry point of a build without CUDA.
[[noreturn]] void throw_built_without_cuda(const char* op);
}  // namespace tensor::cuda::detail
