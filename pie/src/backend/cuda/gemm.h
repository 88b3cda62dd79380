// Products of many tokens on tensor cores (cuBLAS), for CudaBackend::project: f16 / bf16 weights
// read as they are, the 32- and 256-element block types expanded to f16 a slab of rows at a time
// (128 MiB: a whole matrix of an 8B model), the activations converted once per project() call; f32
// accumulation and output. Asked for (CudaOptions::gemm_splits; off by default: measured slower in
// the engine, docs/cuda-backend.md), a product of few output tiles (a batch's [4096, 4096] has 32 of
// 128 x 128, an H100 132 multiprocessors) has its sum cut into parts, one strided-batched call, the
// parts then summed by a small kernel. For measuring, ORCHARD_GEMM_SPLITS and ORCHARD_GEMM_SLAB_MB in
// the environment set gemm_splits and the slab's size where the options leave them 0. Below a
// product's token threshold, for the other weight types, with batch invariance asked for, or where
// cuBLAS cannot be loaded (one log line says why), project() declines and the backend's own kernels
// compute the product.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "pie/backend.h"
#include "tensor/cuda/blas.h"
#include "tensor/cuda/memory_pool.h"
#include "tensor/cuda/stream.h"

namespace pie::cuda {

class GemmProducts {
 public:
  // Returns `buffer` with at least `bytes` (the backend's growth rule: it may throw to abandon a
  // capture).
  using Grow = std::function<tensor::cuda::DeviceBuffer&(tensor::cuda::DeviceBuffer&, std::size_t)>;

  // Loads cuBLAS unless options.batch_invariant; where it cannot be loaded, logs why once per
  // process and declines every product.
  GemmProducts(const tensor::cuda::Stream& stream, const CudaOptions& options, Grow grow);
  ~GemmProducts();

  // Whether products go to cuBLAS at all.
  bool enabled() const { return blas_ != nullptr; }
  // The fewest tokens a product of weight type `t` sends to cuBLAS (0: never).
  std::int32_t min_tokens(tensor::DType t) const;

  // The parts a product of [n_out, n_in] over n_tokens has its sum cut into (1: not cut): with
  // gemm_splits N >= 2, as many as leave no multiprocessor idle (output tiles of 128 x 128), at most N,
  // each a multiple of 8 and at least 256 elements long.
  int splits(std::int64_t n_out, std::int64_t n_tokens, std::int64_t n_in) const;

  // A new project() call: the activations will be converted again at their first use.
  void new_input() { converted_ = false; }
  // p's product of `in` queued on the stream when it goes to cuBLAS (true); false leaves it to the
  // caller.
  bool project(const Rows& in, const Projection& p);

 private:
  const void* converted(const Rows& in, tensor::cuda::GemmInput type);
  // y [n_tokens, n_out] (rows ldy apart) = w x, cut into splits() parts where that pays.
  void product(tensor::cuda::GemmInput type, const void* w, std::int64_t ldw, const void* x,
               std::int64_t n_in, float* y, std::int64_t ldy, std::int64_t n_out,
               std::int64_t n_tokens);

  const tensor::cuda::Stream& stream_;
  std::int32_t min_tokens_override_ = 0;
  std::int32_t max_splits_ = 0;
  int n_sms_ = 0;
  std::size_t slab_bytes_ = 0;
  Grow grow_;
  std::unique_ptr<tensor::cuda::Blas> blas_;
  tensor::cuda::DeviceBuffer input_, slab_,
      partials_;  // the activations as f16 / bf16; a slab of expanded rows; a cut sum's parts
  bool converted_ = false;
  tensor::cuda::GemmInput converted_type_ = tensor::cuda::GemmInput::f16;
};

}  // namespace pie::cuda
