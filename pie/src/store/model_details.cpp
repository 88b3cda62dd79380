#include "pie/model_details.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <optional>

#include "pie/error.h"
#include "tensor/gguf.h"

namespace pie {
namespace {

// llama.cpp's llama_ftype numbering (general.file_type), as its names are written.
std::string file_type_name(std::uint64_t type) {
  static const std::map<std::uint64_t, const char*> kNames = {
      {0, "F32"},      {1, "F16"},      {2, "Q4_0"},    {3, "Q4_1"},    {7, "Q8_0"},
      {8, "Q5_0"},     {9, "Q5_1"},     {10, "Q2_K"},   {11, "Q3_K_S"}, {12, "Q3_K_M"},
      {13, "Q3_K_L"},  {14, "Q4_K_S"},  {15, "Q4_K_M"}, {16, "Q5_K_S"}, {17, "Q5_K_M"},
      {18, "Q6_K"},    {19, "IQ2_XXS"}, {20, "IQ2_XS"}, {21, "Q2_K_S"}, {22, "IQ3_XS"},
      {23, "IQ3_XXS"}, {24, "IQ1_S"},   {25, "IQ4_NL"}, {26, "IQ3_S"},  {27, "IQ3_M"},
      {28, "IQ2_S"},   {29, "IQ2_M"},   {30, "IQ4_XS"}, {31, "IQ1_M"},  {32, "BF16"},
      {36, "TQ1_0"},   {37, "TQ2_0"}};
  const auto it = kNames.find(type);
  return it == kNames.end() ? std::string() : it->second;
}

std::uint64_t uint_or_zero(const tensor::gguf::File& file, const std::string& key) {
  const tensor::gguf::Value* v = file.find(key);
  if (v == nullptr) return 0;
  try {
    return v->as_uint(key);
  } catch (const std::exception&) {
    return 0;
  }
}

std::string string_or_empty(const tensor::gguf::File& file, const std::string& key) {
  const tensor::gguf::Value* v = file.find(key);
  return v != nullptr && v->type == tensor::gguf::ValueType::kString ? v->as_string(key)
                                                                     : std::string();
}

}  // namespace

std::string format_parameter_size(std::uint64_t count) {
  const double n = static_cast<double>(count);
  if (count >= 1'000'000'000) return fmt::format("{:.1f}B", n / 1e9);
  if (count >= 1'000'000) return fmt::format("{:.1f}M", n / 1e6);
  return fmt::format("{:.1f}K", n / 1e3);
}

ModelDetails read_model_details(const std::filesystem::path& gguf) {
  std::optional<tensor::gguf::File> opened;
  try {
    opened = tensor::gguf::File::open(gguf);
  } catch (const std::exception& e) {
    throw ModelError(
        fmt::format("[show] {}: not a readable GGUF file: {}", gguf.string(), e.what()));
  }
  const tensor::gguf::File& file = *opened;
  ModelDetails out;
  out.family = string_or_empty(file, "general.architecture");
  out.name = string_or_empty(file, "general.name");
  const std::string& arch = out.family;
  out.context_length = uint_or_zero(file, arch + ".context_length");
  out.embedding_length = uint_or_zero(file, arch + ".embedding_length");
  out.block_count = uint_or_zero(file, arch + ".block_count");
  out.head_count = uint_or_zero(file, arch + ".attention.head_count");
  out.head_count_kv = uint_or_zero(file, arch + ".attention.head_count_kv");
  out.chat_template = string_or_empty(file, "tokenizer.chat_template");
  if (arch == "bert") {
    out.embedding = true;
    const std::uint64_t pooling =
        file.find("bert.pooling_type") != nullptr ? uint_or_zero(file, "bert.pooling_type") : 1;
    static const char* const kPooling[] = {"none", "mean", "cls", "last"};
    out.pooling = pooling >= 1 && pooling <= 3 ? kPooling[pooling] : std::to_string(pooling);
  }
  if (const tensor::gguf::Value* tokens = file.find("tokenizer.ggml.tokens");
      tokens != nullptr && tokens->type == tensor::gguf::ValueType::kArray) {
    out.vocab_size = tokens->as_array("tokenizer.ggml.tokens").items.size();
  }
  std::map<std::uint32_t, std::size_t> matrix_types;
  for (const tensor::gguf::TensorInfo& t : file.tensors()) {
    std::uint64_t n = 1;
    for (std::uint64_t d : t.dims) n *= d;
    out.parameter_count += n;
    if (t.dims.size() >= 2) ++matrix_types[t.type];
  }
  out.parameter_size = format_parameter_size(out.parameter_count);
  if (file.find("general.file_type") != nullptr)
    out.quantization = file_type_name(uint_or_zero(file, "general.file_type"));
  if (out.quantization.empty() && !matrix_types.empty()) {
    const auto most =
        std::max_element(matrix_types.begin(), matrix_types.end(),
                         [](const auto& a, const auto& b) { return a.second < b.second; });
    out.quantization = std::string(tensor::gguf::ggml_type_name(most->first));
    std::transform(out.quantization.begin(), out.quantization.end(), out.quantization.begin(),
                   [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  }
  return out;
}

}  // namespace pie
