// Typed errors of the CUDA backend (tensor/cuda). Messages start with the operation in brackets and carry the
// driver or NVRTC status and the offending value, e.g.
// `[tensor::cuda::Jit::compile] decode_attention.cu (-arch=sm_90): NVRTC_ERROR_COMPILATION: <the NVRTC log>`.
#pragma once

#include <tensor/error.h>

#include <string>

namespace tensor::cuda {

// Base of every error thrown by the CUDA backend.
class CudaError : public tensor::Error {
 public:
  using tensor::Error::Error;
};

// CUDA cannot be used here: the build has no CUDA ("built without CUDA"), the driver library is missing,
// or no device is present. The message says which.
class CudaUnavailable : public CudaError {
 public:
  using CudaError::CudaError;
};

// A driver API call failed (launch, allocation, copy, module load). Carries the CUresult name and text.
class DriverError : public CudaError {
 public:
  DriverError(const std::string& message, int status) : CudaError(message), status_(status) {}
  int status() const { return status_; }

 private:
  int status_;
};

// NVRTC rejected a kernel source; the message holds the full compiler log.
class CompileError : public CudaError {
 public:
  CompileError(const std::string& message, std::string log) : CudaError(message), log_(std::move(log)) {}
  const std::string& log() const { return log_; }

 private:
  std::string log_;
};

}  // namespace tensor::cuda
