// The q4_1_x16 layout: weights repacked at load (repack_weights), unpacked for the references, and the
// activations in the matching runs (act_pack_runs).
#include "q4_1_x16.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "kernels/error.h"
#include "kernels/matmul.h"
#include "quant_common.h"

namespace kernels {
namespace {

using tensor::BlockQ4_1;
using detail::kRunBlocks;
using tensor::kQK;

// A run of c blocks: [d x c][m x c][4 chunks of 4 c bytes]; chunk j holds qs[4 j .. 4 j + 3] of block b
// at 4 b. c * 20 bytes, as the plain blocks.
void pack_run(const BlockQ4_1* b, int c, unsigned char* out) {
  auto* d = out;
  auto* m = out + 2 * c;
  unsigned char* q = out + 4 * c;
  for (int k = 0; k < c; ++k) {
    std::memcpy(d + 2 * k, &b[k].d, 2);
    std::memcpy(m + 2 * k, &b[k].m, 2);
    for (int j = 0; j < 4; ++j) std::memcpy(q + j * 4 * c + 4 * k, b[k].qs + 4 * j, 4);
  }
}

void unpack_run(const unsigned char* in, int c, BlockQ4_1* b) {
  const unsigned char* q = in + 4 * c;
  for (int k = 0; k < c; ++k) {
    std::memcpy(&b[k].d, in + 2 * k, 2);
    std::memcpy(&b[k].m, in + 2 * c + 2 * k, 2);
    for (int j = 0; j < 4; ++j) std::memcpy(b[k].qs + 4 * j, q + j * 4 * c + 4 * k, 4);
  }
}

void check_layout(const char* op, WeightLayout layout, tensor::DType w_type, std::int64_t n) {
  if (layout == WeightLayout::q4_1_x16 && w_type != tensor::DType::q4_1) {
    throw ShapeError(std::string("[kernels::") + op + "] the q4_1_x16 layout holds q4_1 weights, not " +
                     std::string(tensor::dtype_name(w_type)));
  }
  if (n < 0 || n % kQK != 0) {
    throw ShapeError(std::string("[kernels::") + op + "] a row of " + std::to_string(n) +
                     " elements (a multiple of 32 expected)");
  }
}

}  // namespace

WeightLayout preferred_layout(tensor::DType w, Isa isa) {
  if (w == tensor::DType::q4_1 && isa == Isa::avx512 && isa_supported(Isa::avx512) &&
      detail::tile_q4_1_x16_avx512().dot != nullptr) {
    return WeightLayout::q4_1_x16;
  }
  return WeightLayout::plain;
}

std::size_t aligned_row_bytes(tensor::DType w_type, std::int64_t n_in) {
  return (tensor::row_bytes(w_type, n_in) + 63) / 64 * 64;
}

void repack_weights(WeightLayout layout, tensor::DType w_type, const void* w, std::size_t row_bytes,
                    std::int64_t n_out, std::int64_t n_in, void* out, std::size_t out_row_bytes) {
  check_layout("repack_weights", layout, w_type, n_in);
  if (n_out < 0) throw ShapeError("[kernels::repack_weights] negative n_out " + std::to_string(n_out));
  const std::size_t dense = tensor::row_bytes(w_type, n_in);
  if (row_bytes == 0) row_bytes = dense;
  if (out_row_bytes == 0) out_row_bytes = dense;
  if (row_bytes < dense || out_row_bytes < dense) {
    throw ShapeError("[kernels::repack_weights] row_bytes " + std::to_string(row_bytes) + " / out_row_bytes " +
                     std::to_string(out_row_bytes) + " below a row's " + std::to_string(dense));
  }
  for (std::int64_t r = 0; r < n_out; ++r) {
    const auto* src = static_cast<const unsigned char*>(w) + static_cast<std::size_t>(r) * row_bytes;
    auto* dst = static_cast<unsigned char*>(out) + static_cast<std::size_t>(r) * out_row_bytes;
    if (layout == WeightLayout::plain) {
      std::memcpy(dst, src, dense);
      continue;
    }
    const auto* b = reinterpret_cast<const BlockQ4_1*>(src);
    const std::int64_t nb = n_in / kQK;
    const std::int64_t full = nb / kRunBlocks * kRunBlocks;
    for (std::int64_t i = 0; i < full; i += kRunBlocks) {
      pack_run(b + i, kRunBlocks, dst + static_cast<std::size_t>(i) * sizeof(BlockQ4_1));
    }
    std::memcpy(dst + full * sizeof(BlockQ4_1), b + full, static_cast<std::size_t>(nb - full) * sizeof(BlockQ4_1));
  }
}

void unpack_weight_row(WeightLayout layout, tensor::DType w_type, const void* row, std::int64_t n, void* out) {
  check_layout("unpack_weight_row", layout, w_type, n);
  if (layout == WeightLayout::plain) {
    std::memcpy(out, row, tensor::row_bytes(w_type, n));
    return;
  }
  const auto* in = static_cast<const unsigned char*>(row);
  auto* b = static_cast<BlockQ4_1*>(out);
  const std::int64_t nb = n / kQK;
  const std::int64_t full = nb / kRunBlocks * kRunBlocks;
  for (std::int64_t i = 0; i < full; i += kRunBlocks) {
    unpack_run(in + static_cast<std::size_t>(i) * sizeof(BlockQ4_1), kRunBlocks, b + i);
  }
  std::memcpy(b + full, in + full * sizeof(BlockQ4_1), static_cast<std::size_t>(nb - full) * sizeof(BlockQ4_1));
}

namespace detail {

std::size_t act_run_bytes(std::int64_t n) {
  const std::int64_t runs = (n / kQK + kRunBlocks - 1) / kRunBlocks;
  return static_cast<std::size_t>(runs) * sizeof(ActRun);
}

void act_pack_runs(const void* x, void* out, std::int64_t n) {
  const auto* b = static_cast<const tensor::BlockQ8_0*>(x);
  auto* runs = static_cast<ActRun*>(out);
  std::memset(out, 0, act_run_bytes(n));
  const std::int64_t nb = n / kQK, full = nb / kRunBlocks * kRunBlocks;
  for (std::int64_t i = 0; i < nb; ++i) {
    ActRun& a = runs[i / kRunBlocks];
    const int k = static_cast<int>(i % kRunBlocks);
    if (i < full) {
      for (int j = 0; j < 4; ++j) {
        std::memcpy(a.lo[j] + 4 * k, b[i].qs + 4 * j, 4);
        std::memcpy(a.hi[j] + 4 * k, b[i].qs + 16 + 4 * j, 4);
      }
    } else {  // the last blocks, as the weights' plain ones: 32 levels each, side by side
      std::memcpy(reinterpret_cast<unsigned char*>(&a) + 32 * k, b[i].qs, 32);  // lo, then hi
    }
    int sum = 0;
    for (int j = 0; j < kQK; ++j) sum += b[i].qs[j];
    a.d[k] = fp16(b[i].d);
    a.s[k] = a.d[k] * static_cast<float>(sum);
  }
}

}  // namespace detail
}  // namespace kernels
