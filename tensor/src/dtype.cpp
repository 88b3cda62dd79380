#include "tensor/dtype.h"

#include <array>
#include <cctype>
#include <string>

#include "tensor/error.h"

namespace tensor {
namespace {

// ggml type ids (ggml.h enum ggml_type; GGUF GGMLQuantizationType).
constexpr std::array<DTypeInfo, kNumDTypes> kInfo = {{
    {DType::f32, "f32", 0, 1, 4, false},
    {DType::f16, "f16", 1, 1, 2, false},
    {DType::bf16, "bf16", 30, 1, 2, false},
    {DType::q4_0, "q4_0", 2, 32, 18, true},
    {DType::q4_1, "q4_1", 3, 32, 20, true},
    {DType::q5_0, "q5_0", 6, 32, 22, true},
    {DType::q5_1, "q5_1", 7, 32, 24, true},
    {DType::q8_0, "q8_0", 8, 32, 34, true},
    {DType::q2_K, "q2_K", 10, 256, 84, true},
    {DType::q3_K, "q3_K", 11, 256, 110, true},
    {DType::q4_K, "q4_K", 12, 256, 144, true},
    {DType::q5_K, "q5_K", 13, 256, 176, true},
    {DType::q6_K, "q6_K", 14, 256, 210, true},
    {DType::q8_K, "q8_K", 15, 256, 292, true},
    {DType::nf4, "nf4", kGgmlTypeNf4, kQK_NF4, 36, true},  // not a ggml type (Orchard's id)
}};

}  // namespace

std::span<const DTypeInfo> all_dtypes() { return kInfo; }

const DTypeInfo& dtype_info(DType t) {
  const auto i = static_cast<std::size_t>(t);
  if (i >= kInfo.size()) {
    throw DTypeError("[tensor::dtype_info] invalid DType value " + std::to_string(i));
  }
  return kInfo[i];
}

std::size_t row_bytes(DType t, std::int64_t n) {
  const DTypeInfo& info = dtype_info(t);
  if (n < 0 || n % info.block_size != 0) {
    throw ShapeError("[tensor::row_bytes] " + std::string(info.name) + ": row length " +
                     std::to_string(n) + " is not a non-negative multiple of the block size " +
                     std::to_string(info.block_size));
  }
  return static_cast<std::size_t>(n / info.block_size) * info.block_bytes;
}

std::optional<DType> dtype_from_ggml(std::uint32_t ggml_type) {
  for (const DTypeInfo& info : kInfo) {
    if (info.ggml_type == ggml_type) return info.dtype;
  }
  return std::nullopt;
}

DType dtype_from_ggml_checked(std::uint32_t ggml_type) {
  if (auto t = dtype_from_ggml(ggml_type)) return *t;
  throw DTypeError("[tensor::dtype_from_ggml] ggml type id " + std::to_string(ggml_type) +
                   " is not supported (supported: f32 f16 bf16 q4_0 q4_1 q5_0 q5_1 q8_0 q2_K..q8_K, and Orchard's nf4 " +
                   std::to_string(kGgmlTypeNf4) + ")");
}

DType dtype_from_name(std::string_view name) {
  auto lower = [](std::string_view s) {
    std::string out(s);
    for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return out;
  };
  const std::string want = lower(name);
  for (const DTypeInfo& info : kInfo) {
    if (lower(info.name) == want) return info.dtype;
  }
  throw DTypeError("[tensor::dtype_from_name] unknown dtype \"" + std::string(name) + "\"");
}

}  // namespace tensor
