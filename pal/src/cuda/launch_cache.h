// Kernels of the embedded pal sources, compiled once per option set and kept for the process (private).
#pragma once

#include <tensor/cuda/jit.h>

#include <string>
#include <vector>

namespace pal::cuda::detail {

// The entry point `entry` of embedded source `source` compiled with `options` for the current device;
// a positive max_dynamic_shared raises its dynamic shared memory limit once, when first loaded.
// Throws tensor::cuda errors (CompileError with the NVRTC log, CudaUnavailable, DriverError).
tensor::cuda::Kernel kernel(const std::string& source, const std::vector<std::string>& options, const char* entry,
                            int max_dynamic_shared = 0);

// Multiprocessors of the current device (for grid sizing).
int n_sms();

}  // namespace pal::cuda::detail
