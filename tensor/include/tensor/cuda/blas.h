// cuBLAS, loaded at run time: dlopen("libcublas.so.13"), then ".12"; the few declarations it needs
// are written in tensor/src/cuda/blas.cpp, so the build needs no cuBLAS header or library and a
// binary starts where cuBLAS is absent (blas_unavailable_reason() then says why, and callers keep
// their own kernels). ORCHARD_CUBLAS=0 in the environment hides the library (the fallback, testable
// anywhere).
#pragma once

#include <tensor/cuda/cuda_error.h>
#include <tensor/cuda/memory_pool.h>
#include <tensor/cuda/stream.h>

#include <cstdint>
#include <string>

namespace tensor::cuda {

// "" when cuBLAS can be used on this machine; else why not ("hidden by ORCHARD_CUBLAS=0",
// "libcublas.so.13 / .12 not found (...)", "built without CUDA", a missing symbol or a failed
// cublasCreate).
std::string blas_unavailable_reason();

// The element type of a product's two inputs (the output and the accumulation are f32).
enum class GemmInput : std::uint8_t { f16, bf16 };

// A cuBLAS handle on the current device, bound to `stream`, with a workspace of its own set once
// (cublasSetWorkspace): its calls allocate nothing, so they can be captured into a CUDA graph.
// Throws CudaUnavailable (the reason) when cuBLAS cannot be used, CudaError when a cuBLAS call
// fails.
class Blas {
 public:
  explicit Blas(const Stream& stream);
  ~Blas();
  Blas(const Blas&) = delete;
  Blas& operator=(const Blas&) = delete;

  // y[t][o] = sum_i w[o][i] x[t][i] for o < n_out, t < n_tokens, i < n_in, on tensor cores with f32
  // accumulation: w row-major with rows ldw elements apart, x row-major with rows ldx apart (both
  // `input`), y f32 with rows ldy apart. Throws tensor::ShapeError for sizes or strides out of
  // range.
  void gemm(GemmInput input, const void* w, std::int64_t ldw, const void* x, std::int64_t ldx,
            float* y, std::int64_t ldy, std::int64_t n_out, std::int64_t n_tokens,
            std::int64_t n_in) const;

  // The same product with its sum over i cut into `splits` equal parts, one strided-batched call:
  // partials[s][t][o] = sum over i in [s n_in / splits, (s + 1) n_in / splits) of w[o][i] x[t][i]
  // (partials [splits, n_tokens, n_out], dense). A product of few output tiles otherwise leaves
  // most multiprocessors idle; the caller sums the parts. n_in / splits must be a multiple of 8
  // (16-byte aligned parts). Throws tensor::ShapeError for sizes or strides out of range.
  void gemm_split_k(GemmInput input, const void* w, std::int64_t ldw, const void* x,
                    std::int64_t ldx, float* partials, std::int64_t n_out, std::int64_t n_tokens,
                    std::int64_t n_in, int splits) const;

 private:
  void* handle_ = nullptr;  // the cublasHandle_t
  DeviceBuffer workspace_;
};

}  // namespace tensor::cuda
