// bitsandbytes' NF4 tensor layout: the double quantization of the absmax and the conversion between the
// flat layout and Orchard's nf4 rows. Transcribed from bitsandbytes 0.50 (functional.quantize_4bit,
// backends/default/ops.py, csrc/cpu_ops.cpp quantize_cpu_impl); checked byte for byte against it by
// tests/kernels/nf4_test.cpp on goldens recorded with tests/kernels/make_nf4_goldens.py.
#include "kernels/nf4.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <string>

#include "kernels/error.h"
#include "tensor/blocks.h"

namespace kernels {
namespace {

constexpr int kLutSize = 65536;

// bitsandbytes' quantize_blockwise on the CPU codes a scaled value v in [-1, 1] through a table of
// 65,536 bins over [-1, 1], each holding the code nearest the bin's left edge (build_quantize_lut).
struct DynamicLut {
  std::array<std::uint8_t, kLutSize> code{};
  DynamicLut() {
    const std::array<float, 256>& map = nf4_dynamic_map();
    float mid[255];
    for (int i = 0; i < 255; ++i) mid[i] = 0.5f * (map[i] + map[i + 1]);
    int c = 0;
    for (int i = 0; i < kLutSize; ++i) {
      const float v = -1.0f + (2.0f * static_cast<float>(i)) / static_cast<float>(kLutSize - 1);
      while (c < 255 && mid[c] < v) ++c;
      code[i] = static_cast<std::uint8_t>(c);
    }
  }
};

// The bin of v (norm_to_lut_index). bitsandbytes compiles it with FMA contraction: (v + 1) / 2 * 65535
// + 0.5 is one fused multiply-add there, and the truncation to an integer sees its single rounding.
int lut_index(float v) {
  v = std::clamp(v, -1.0f, 1.0f);
  const float half = (v + 1.0f) * 0.5f;
  return static_cast<int>(static_cast<std::uint16_t>(std::fma(half, static_cast<float>(kLutSize - 1), 0.5f)));
}

// torch.mean of a contiguous float32 vector as torch's CPU kernel computes it on one thread
// (aten/native/cpu/SumKernel.cpp: W-float vectors, four interleaved vector accumulators
// cascaded over four levels, the leftover vectors into the first, the four added, then the tail elements
// and the W lanes in order into a float; the sum divided by n in float). Torch splits arrays of more than
// 32,768 elements between threads, which no single formula reproduces; below that this is its bits.
template <int W>
float torch_cpu_sum(std::span<const float> v) {
  constexpr int kIlp = 4, kLevels = 4;
  using Vec = std::array<float, W>;
  const std::int64_t n = static_cast<std::int64_t>(v.size());
  const std::int64_t n_vec = n / W, n_rows = n_vec / kIlp;
  const auto ceil_log2 = [](std::int64_t x) -> std::int64_t {
    return x <= 2 ? 1 : static_cast<std::int64_t>(std::bit_width(static_cast<std::uint64_t>(x - 1)));
  };
  const std::int64_t level_power = std::max<std::int64_t>(4, ceil_log2(n_rows) / kLevels);
  const std::int64_t level_step = std::int64_t{1} << level_power, level_mask = level_step - 1;
  std::array<std::array<Vec, kIlp>, kLevels> acc{};
  const auto add_row = [&](std::int64_t row) {
    for (int k = 0; k < kIlp; ++k) {
      for (int l = 0; l < W; ++l) acc[0][k][l] += v[static_cast<std::size_t>((row * kIlp + k) * W + l)];
    }
  };
  std::int64_t i = 0;
  while (i + level_step <= n_rows) {
    for (std::int64_t j = 0; j < level_step; ++j, ++i) add_row(i);
    for (int j = 1; j < kLevels; ++j) {
      for (int k = 0; k < kIlp; ++k) {
        for (int l = 0; l < W; ++l) {
          acc[j][k][l] += acc[j - 1][k][l];
          acc[j - 1][k][l] = 0.0f;
        }
      }
      if ((i & (level_mask << (j * level_power))) != 0) break;
    }
  }
  for (; i < n_rows; ++i) add_row(i);
  for (int j = 1; j < kLevels; ++j) {
    for (int k = 0; k < kIlp; ++k) {
      for (int l = 0; l < W; ++l) acc[0][k][l] += acc[j][k][l];
    }
  }
  Vec sum = acc[0][0];
  for (std::int64_t r = n_rows * kIlp; r < n_vec; ++r) {
    for (int l = 0; l < W; ++l) sum[l] += v[static_cast<std::size_t>(r * W + l)];
  }
  for (int k = 1; k < kIlp; ++k) {
    for (int l = 0; l < W; ++l) sum[l] += acc[0][k][l];
  }
  if constexpr (W == 1) return sum[0];
  float total = 0.0f;
  for (std::int64_t k = n_vec * W; k < n; ++k) total += v[static_cast<std::size_t>(k)];
  for (int l = 0; l < W; ++l) total += sum[l];
  return total;
}

float torch_cpu_mean(std::span<const float> v) {
  // Vectorized<float> of its AVX2 kernel, which torch also runs on AVX-512 machines (checked there against
  // torch 2.15); shorter arrays take the scalar path.
  constexpr int kVec = 8;
  const float sum = v.size() >= kVec ? torch_cpu_sum<kVec>(v) : torch_cpu_sum<1>(v);
  return sum / static_cast<float>(v.size());
}

void check_n(const char* op, std::int64_t n) {
  if (n < 0 || n % kNf4Block != 0) {
    throw ShapeError(std::string("[kernels::") + op + "] nf4: " + std::to_string(n) +
                     " weights are not a multiple of the block of " + std::to_string(kNf4Block));
  }
}

}  // namespace

int nf4_code(float s) {
  const std::array<float, 16>& l = nf4_levels();
  int q = 0;
  // bucketize(right=False) on the 15 midpoints: the number of midpoints strictly below s.
  while (q < 15 && (l[q] + l[q + 1]) / 2.0f < s) ++q;
  return q;
}

Nf4NestedAbsmax nf4_compress_absmax(std::span<const float> absmax) {
  if (absmax.empty()) throw ShapeError("[kernels::nf4_compress_absmax] no absmax to compress");
  for (std::size_t i = 0; i < absmax.size(); ++i) {
    if (!std::isfinite(absmax[i]) || absmax[i] < 0.0f) {
      throw ShapeError("[kernels::nf4_compress_absmax] absmax " + std::to_string(i) + " is " + std::to_string(absmax[i]) +
                       ", not a finite non-negative float");
    }
  }
  Nf4NestedAbsmax out;
  out.offset = torch_cpu_mean(absmax);
  static const DynamicLut lut;
  const std::size_t n = absmax.size();
  out.codes.resize(n);
  out.nested_absmax.resize((n + kNf4NestedBlock - 1) / kNf4NestedBlock);
  std::vector<float> centred(n);
  for (std::size_t i = 0; i < n; ++i) centred[i] = absmax[i] - out.offset;
  for (std::size_t b = 0; b < out.nested_absmax.size(); ++b) {
    const std::size_t begin = b * kNf4NestedBlock, end = std::min(n, begin + kNf4NestedBlock);
    float m = 0.0f;
    for (std::size_t i = begin; i < end; ++i) m = std::max(m, std::fabs(centred[i]));
    out.nested_absmax[b] = m;
    if (m == 0.0f) {  // bitsandbytes writes code 0 for an all-zero block
      std::fill(out.codes.begin() + static_cast<std::ptrdiff_t>(begin), out.codes.begin() + static_cast<std::ptrdiff_t>(end), 0);
      continue;
    }
    const float inv = 1.0f / m;
    for (std::size_t i = begin; i < end; ++i) out.codes[i] = lut.code[static_cast<std::size_t>(lut_index(centred[i] * inv))];
  }
  return out;
}

void nf4_decompress_absmax(std::span<const std::uint8_t> codes, std::span<const float> nested_absmax,
                           std::span<const float> quant_map, float offset, std::int64_t nested_block,
                           std::span<float> absmax) {
  const char* op = "[kernels::nf4_decompress_absmax] ";
  if (quant_map.size() != 256) {
    throw ShapeError(std::string(op) + "nested_quant_map has " + std::to_string(quant_map.size()) +
                     " entries, want 256");
  }
  if (nested_block <= 0) throw ShapeError(std::string(op) + "nested blocksize " + std::to_string(nested_block));
  const std::size_t want_nested = (codes.size() + static_cast<std::size_t>(nested_block) - 1) / static_cast<std::size_t>(nested_block);
  if (nested_absmax.size() != want_nested || absmax.size() != codes.size()) {
    throw ShapeError(std::string(op) + std::to_string(codes.size()) + " absmax codes need " +
                     std::to_string(want_nested) + " nested_absmax (got " + std::to_string(nested_absmax.size()) +
                     ") and room for " + std::to_string(codes.size()) + " (got " + std::to_string(absmax.size()) + ")");
  }
  for (std::size_t i = 0; i < codes.size(); ++i) {
    const float scaled = quant_map[codes[i]] * nested_absmax[i / static_cast<std::size_t>(nested_block)];
    absmax[i] = scaled + offset;
  }
}

void nf4_blocks_from_bnb(const std::uint8_t* packed, const float* absmax, std::int64_t n, void* blocks) {
  check_n("nf4_blocks_from_bnb", n);
  auto* out = static_cast<tensor::BlockNf4*>(blocks);
  for (std::int64_t b = 0; b < n / kNf4Block; ++b) {
    out[b].absmax = absmax[b];
    std::memcpy(out[b].qs, packed + b * (kNf4Block / 2), kNf4Block / 2);
  }
}

void nf4_bnb_from_blocks(const void* blocks, std::int64_t n, std::uint8_t* packed, float* absmax) {
  check_n("nf4_bnb_from_blocks", n);
  const auto* in = static_cast<const tensor::BlockNf4*>(blocks);
  for (std::int64_t b = 0; b < n / kNf4Block; ++b) {
    absmax[b] = in[b].absmax;
    std::memcpy(packed + b * (kNf4Block / 2), in[b].qs, kNf4Block / 2);
  }
}

}  // namespace kernels
