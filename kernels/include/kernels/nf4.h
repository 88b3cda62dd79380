// bitsandbytes' NF4 (QLoRA's NormalFloat4) as bitsandbytes stores a tensor, and its conversion to and
// from Orchard's row type tensor::DType::nf4 (tensor/blocks.h BlockNf4).
//
// bitsandbytes quantizes a tensor flattened: blocks of 64 consecutive weights, each with a float absmax;
// codes index the 16 NF4 levels, two per byte, the first element in the HIGH nibble. With
// compress_statistics (QLoRA's double quantization) the absmax array is quantized again: its mean (the
// offset) subtracted, then blocks of 256 absmax scaled by their own absmax (nested_absmax, f32) and coded
// 8-bit with bitsandbytes' signed dynamic map (nested_quant_map). Decoding an absmax is then
// nested_quant_map[code] * nested_absmax[i / 256] + offset, and a weight level[q] * absmax, each one f32
// operation, which is what every function here does (docs/nf4.md has the layout and its sources).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

namespace kernels {

inline constexpr std::int64_t kNf4Block = 64;          // weights per absmax
inline constexpr std::int64_t kNf4NestedBlock = 256;   // absmax per nested_absmax (double quantization)

// The 16 NF4 levels in code order (ascending; bitsandbytes' get_4bit_type("nf4") as float32).
const std::array<float, 16>& nf4_levels();
// bitsandbytes' signed 8-bit dynamic map (create_dynamic_map(), float32, ascending), the code of the
// double-quantized absmax (what checkpoints store as nested_quant_map).
const std::array<float, 256>& nf4_dynamic_map();

// The code bitsandbytes' quantize_4bit gives a value already scaled by 1 / absmax and clamped to [-1, 1]:
// the index of the first midpoint between adjacent levels that is >= s (torch.bucketize).
int nf4_code(float s);

// Double-quantized absmax, as quantize_4bit(compress_statistics=True) leaves them.
struct Nf4NestedAbsmax {
  std::vector<std::uint8_t> codes;   // [n_blocks] indices into nf4_dynamic_map()
  std::vector<float> nested_absmax;  // [ceil(n_blocks / 256)]
  float offset = 0.0f;               // mean of the absmax before quantization
};

// bitsandbytes' compression of an absmax array on its CPU path: the offset is torch's float32 mean (its
// one-thread summation order, exact for up to 32,768 absmax: 2M weights), blocks of 256 coded through the
// 65,536-entry nearest-code table of its C++ quantize_blockwise. Throws ShapeError on an empty array or
// one holding a negative or non-finite value.
Nf4NestedAbsmax nf4_compress_absmax(std::span<const float> absmax);

// absmax[i] = quant_map[codes[i]] * nested_absmax[i / nested_block] + offset. quant_map is the checkpoint's
// nested_quant_map (256 floats). Throws ShapeError when the sizes do not agree (nothing written then).
void nf4_decompress_absmax(std::span<const std::uint8_t> codes, std::span<const float> nested_absmax,
                           std::span<const float> quant_map, float offset, std::int64_t nested_block,
                           std::span<float> absmax);

// bitsandbytes' flat layout <-> rows of tensor::DType::nf4 blocks. packed [n / 2] bytes, absmax [n / 64],
// blocks [n / 64] BlockNf4; n a multiple of 64 (ShapeError otherwise). The bytes and floats are copied as
// they are, so the two layouts hold the same tensor bit for bit.
void nf4_blocks_from_bnb(const std::uint8_t* packed, const float* absmax, std::int64_t n, void* blocks);
void nf4_bnb_from_blocks(const void* blocks, std::int64_t n, std::uint8_t* packed, float* absmax);

}  // namespace kernels
