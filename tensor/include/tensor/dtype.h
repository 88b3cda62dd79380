// Element types: f32, f16, bf16 and the GGUF/ggml block-quantized types, with their ggml type ids, block
// sizes and bytes per block (bit-exact to ggml's block layouts; the structs are in tensor/blocks.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace tensor {

enum class DType : std::uint8_t {
  f32,
  f16,
  bf16,
  q4_0,
  q4_1,
  q5_0,
  q5_1,
  q8_0,
  q2_K,
  q3_K,
  q4_K,
  q5_K,
  q6_K,
  q8_K,
  nf4,  // bitsandbytes' NormalFloat4 (QLoRA base weights); an Orchard type id in GGUF (kGgmlTypeNf4)
};

inline constexpr int kNumDTypes = 15;
inline constexpr std::int64_t kQK = 32;    // elements per block of the _0/_1 types (ggml QK4_0 etc.)
inline constexpr std::int64_t kQK_K = 256;  // elements per super-block of the K types (ggml QK_K)
inline constexpr std::int64_t kQK_NF4 = 64;  // elements per nf4 block (bitsandbytes' default blocksize)
// nf4's type id in GGUF files: Orchard's own, far outside ggml's range (0..41 today), so a reader that does
// not know it refuses the tensor rather than misreading it (docs/nf4.md).
inline constexpr std::uint32_t kGgmlTypeNf4 = 1024;

struct DTypeInfo {
  DType dtype;
  std::string_view name;     // "f32", "q4_K", ...: the ggml spelling, lower-case prefix
  std::uint32_t ggml_type;   // ggml_type / GGMLQuantizationType id in GGUF files
  std::int64_t block_size;   // elements per block (1 for f32/f16/bf16)
  std::size_t block_bytes;   // bytes per block
  bool quantized;
};

// Every DType, in enum order.
std::span<const DTypeInfo> all_dtypes();
// The description of `t` (never throws for a valid enumerator).
const DTypeInfo& dtype_info(DType t);
inline std::string_view dtype_name(DType t) { return dtype_info(t).name; }
inline std::int64_t block_size(DType t) { return dtype_info(t).block_size; }
inline std::size_t block_bytes(DType t) { return dtype_info(t).block_bytes; }
inline bool is_quantized(DType t) { return dtype_info(t).quantized; }

// Bytes of a contiguous row of n elements. Throws ShapeError when n < 0 or n is not a multiple of the
// block size.
std::size_t row_bytes(DType t, std::int64_t n);

// The DType of a ggml type id, or nullopt for ids Orchard does not handle (Q8_1, IQ*, TQ*, ...).
std::optional<DType> dtype_from_ggml(std::uint32_t ggml_type);
// Same, throwing DTypeError naming the id when it is not supported.
DType dtype_from_ggml_checked(std::uint32_t ggml_type);
// Parses a name as printed by dtype_name ("q4_K"; case-insensitive). Throws DTypeError on an unknown name.
DType dtype_from_name(std::string_view name);

}  // namespace tensor
