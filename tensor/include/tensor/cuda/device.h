// The CUDA device as the rest of Orchard sees it: whether CUDA is built in and usable, the device's
// properties, and its primary context. The driver library (libcuda) is loaded at run time, so binaries built
// with CUDA still start on machines with no driver; every entry point then throws CudaUnavailable.
#pragma once

#include <tensor/cuda/cuda_error.h>

#include <cstddef>
#include <string>

namespace tensor::cuda {

// True when this build has the CUDA backend (ORCHARD_CUDA); never throws.
bool built_with_cuda();

// "" when a CUDA device can be used; otherwise why not ("built without CUDA", "no CUDA driver (libcuda.so.1:
// ...)", "no CUDA device"). Never throws; the answer is computed once.
std::string unavailable_reason();
inline bool available() { return unavailable_reason().empty(); }

struct DeviceInfo {
  int ordinal = 0;
  std::string name;
  int cc_major = 0;                    // compute capability, e.g. 9.0 for the H100/H200
  int cc_minor = 0;
  int n_sms = 0;                       // multiprocessors
  std::size_t total_memory = 0;        // bytes
  std::size_t l2_bytes = 0;
  int max_smem_per_block_optin = 0;    // bytes of shared memory a block may use after opting in
  int driver_version = 0;              // e.g. 13000
  int arch() const { return cc_major * 10 + cc_minor; }  // 90 for sm_90
};

// Properties of device `ordinal`. Throws CudaUnavailable, or DriverError for an ordinal out of range.
const DeviceInfo& device_info(int ordinal = 0);

// Makes device `ordinal`'s primary context current on the calling thread (retained once per process).
// Every CUDA entry point calls it; throws CudaUnavailable or DriverError.
void make_current(int ordinal = 0);

// Free and total memory of device `ordinal`, in bytes, as the driver reports them now.
struct MemoryInfo {
  std::size_t free = 0;
  std::size_t total = 0;
};
// Throws CudaUnavailable or DriverError.
MemoryInfo memory_info(int ordinal = 0);

// Blocks until all work on the current device is done. Throws DriverError (e.g. a kernel fault).
void synchronize();

// Opens / closes the range a profiler started with its collection off records (ncu
// --profile-from-start off): a developer's hook to profile chosen steps. Throws DriverError.
void profiler_range(bool open);

}  // namespace tensor::cuda
