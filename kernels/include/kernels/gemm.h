// Many-token products with a weight matrix packed once (an encoder's batch: hundreds of token rows).
//
// matmul (kernels/matmul.h) reads the weights in their file type, a few rows against a few tokens per
// pass with a horizontal sum per result: right for decoding, where the weight stream is the cost. With
// hundreds of tokens the arithmetic is the cost; here W is converted once to f32 panels of kGemmPanel
// outputs, element k of all the panel's outputs side by side, and a register tile of tokens x one panel
// accumulates outer products (a broadcast activation times a row of the panel): no horizontal sums, each
// weight load serving every token of the tile. Each result is one fused multiply-add chain over k in
// order whatever the tile, so a token's output does not depend on the others in its batch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "kernels/isa.h"
#include "kernels/matmul.h"
#include "tensor/thread_pool.h"

namespace kernels {

inline constexpr std::int64_t kGemmPanel = 32;  // outputs per packed panel

// W [n_out, n_in] as f32 panels: panel p holds outputs [p * kGemmPanel, (p + 1) * kGemmPanel), element
// (k, j) at panel(p)[k * kGemmPanel + j]; outputs past n_out are zero. 64-byte aligned. Move-only.
class PackedMatrix {
 public:
  PackedMatrix() = default;
  // From weights of any type (dequantized to f32). Throws ShapeError on bad params (as matmul does),
  // UnsupportedError for a type with no dequantization (q8_K).
  static PackedMatrix pack(const MatmulParams& p);

  std::int64_t n_out() const { return n_out_; }
  std::int64_t n_in() const { return n_in_; }
  std::int64_t n_panels() const { return (n_out_ + kGemmPanel - 1) / kGemmPanel; }
  const float* panel(std::int64_t p) const { return data_.get() + p * n_in_ * kGemmPanel; }

 private:
  struct AlignedDelete {
    void operator()(float* p) const;
  };
  std::unique_ptr<float[], AlignedDelete> data_;
  std::int64_t n_out_ = 0, n_in_ = 0;
};

// What happens to each result after the product: y = act(x W^T + bias).
enum class GemmActivation { none, gelu_erf };
struct GemmEpilogue {
  const float* bias = nullptr;  // [n_out] or nullptr
  GemmActivation act = GemmActivation::none;
};

// y [n_tokens, n_out] = act(x [n_tokens, n_in] W^T + bias), rows dense, parallel over panels on `pool`
// (nullptr: the calling thread). Throws ShapeError on a negative n_tokens, an empty matrix with work to
// do or null pointers (nothing written then).
void gemm(const PackedMatrix& w, const float* x, std::int64_t n_tokens, float* y, const GemmEpilogue& epilogue,
          tensor::ThreadPool* pool, Isa isa = best_isa());
// The reference from the unpacked weights: double sums, std::erfc. Same errors.
void gemm_ref(const MatmulParams& w, const float* x, std::int64_t n_tokens, float* y, const GemmEpilogue& epilogue);

}  // namespace kernels
