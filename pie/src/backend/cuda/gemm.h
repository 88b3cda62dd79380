// Products of many tokens on tensor cores (cuBLAS), for CudaBackend::project: f16 / bf16 weights
// read as they are, the 32- and 256-element block types expanded to f16 a slab of rows at a time
// into a scratch that stays in L2, the activations converted once per project() call; f32
// accumulation and output. Below a product's token threshold, for the other weight types, with
// batch invariance asked for, or where cuBLAS cannot be loaded (one log line says why), project()
// declines and the backend's own kernels compute the product.
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

  // A new project() call: the activations will be converted again at their first use.
  void new_input() { converted_ = false; }
  // p's product of `in` queued on the stream when it goes to cuBLAS (true); false leaves it to the
  // caller.
  bool project(const Rows& in, const Projection& p);

 private:
  const void* converted(const Rows& in, tensor::cuda::GemmInput type);

  const tensor::cuda::Stream& stream_;
  std::int32_t min_tokens_override_ = 0;
  std::size_t slab_bytes_ = 0;
  Grow grow_;
  std::unique_ptr<tensor::cuda::Blas> blas_;
  tensor::cuda::DeviceBuffer input_,
      slab_;  // the activations as f16 / bf16; a slab of expanded rows
  bool converted_ = false;
  tensor::cuda::GemmInput converted_type_ = tensor::cuda::GemmInput::f16;
};

}  // namespace pie::cuda
