#include "model/bnb_nf4.h"

#include <fmt/format.h>

#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <span>
#include <vector>

#include "kernels/error.h"
#include "kernels/nf4.h"
#include "pie/error.h"

namespace pie::detail {
namespace {

using nlohmann::json;

constexpr const char* kStateSuffix = ".quant_state.bitsandbytes__nf4";

[[noreturn]] void fail(const SafetensorsTensor& t, const std::string& what) {
  throw ModelError(fmt::format("[hf] {}: tensor '{}': {}", t.file.string(), t.name, what));
}

const SafetensorsTensor& bytes_tensor(const SafetensorsSet& set, const std::string& name, const SafetensorsTensor& owner) {
  const SafetensorsTensor* t = set.find_bytes(name);
  if (t == nullptr) fail(owner, fmt::format("bitsandbytes 4-bit weight without its U8 tensor '{}'", name));
  return *t;
}

// An F32 tensor of exactly n elements, copied out (safetensors does not align its data).
std::vector<float> f32_tensor(const SafetensorsSet& set, const std::string& name, std::int64_t n,
                              const SafetensorsTensor& owner) {
  const SafetensorsTensor* t = set.find(name);
  if (t == nullptr) fail(owner, fmt::format("bitsandbytes 4-bit weight without its tensor '{}'", name));
  if (t->dtype != tensor::DType::f32 || t->n_elements() != n) {
    fail(*t, fmt::format("want {} float32 values, got {} of {}", n, t->n_elements(), tensor::dtype_name(t->dtype)));
  }
  std::vector<float> out(static_cast<std::size_t>(n));
  std::memcpy(out.data(), t->data, out.size() * sizeof(float));
  return out;
}

json state_json(const SafetensorsTensor& t) {
  try {
    json j = json::parse(reinterpret_cast<const char*>(t.data), reinterpret_cast<const char*>(t.data) + t.n_bytes);
    if (!j.is_object()) fail(t, "the quantization state is not a JSON object");
    return j;
  } catch (const json::exception& e) {
    fail(t, fmt::format("the quantization state is not valid JSON: {}", e.what()));
  }
}

template <typename T>
T field(const json& j, const char* key, const SafetensorsTensor& t) {
  if (!j.contains(key)) fail(t, fmt::format("quantization state without \"{}\"", key));
  try {
    return j[key].get<T>();
  } catch (const json::exception&) {
    fail(t, fmt::format("quantization state field \"{}\" holds {}", key, j[key].dump()));
  }
}

}  // namespace

bool is_bnb_4bit(const SafetensorsSet& set, const std::string& name) {
  return set.find_bytes(name + kStateSuffix) != nullptr ||
         set.find_bytes(name + ".quant_state.bitsandbytes__fp4") != nullptr;
}

Weight read_bnb_nf4(const SafetensorsSet& set, const std::string& name, std::int64_t n_out, std::int64_t n_in,
                    Model& model) {
  if (const SafetensorsTensor* fp4 = set.find_bytes(name + ".quant_state.bitsandbytes__fp4")) {
    fail(*fp4, "bitsandbytes fp4 weights are not supported (nf4 only)");
  }
  const SafetensorsTensor* state_p = set.find_bytes(name + kStateSuffix);
  if (state_p == nullptr) {
    throw ModelError(fmt::format("[hf] tensor '{}': no bitsandbytes quantization state '{}{}'", name, name, kStateSuffix));
  }
  const SafetensorsTensor& state_t = *state_p;
  const json state = state_json(state_t);
  if (field<std::string>(state, "quant_type", state_t) != "nf4") {
    fail(state_t, fmt::format("quant_type {} (nf4 only)", state["quant_type"].dump()));
  }
  const std::int64_t blocksize = field<std::int64_t>(state, "blocksize", state_t);
  if (blocksize != kernels::kNf4Block) fail(state_t, fmt::format("blocksize {} (64 only)", blocksize));
  const std::vector<std::int64_t> shape = field<std::vector<std::int64_t>>(state, "shape", state_t);
  if (shape != std::vector<std::int64_t>{n_out, n_in}) {
    fail(state_t, fmt::format("shape [{}], expected [{}, {}]", fmt::join(shape, ", "), n_out, n_in));
  }
  if (n_in % kernels::kNf4Block != 0) {
    fail(state_t, fmt::format("rows of {} are not whole blocks of 64 (Orchard's nf4 rows)", n_in));
  }
  const std::int64_t n = n_out * n_in, n_blocks = n / kernels::kNf4Block;

  const SafetensorsTensor& packed = bytes_tensor(set, name, state_t);
  if (static_cast<std::int64_t>(packed.n_bytes) != n / 2) {
    fail(packed, fmt::format("{} packed bytes, want {} for [{}, {}]", packed.n_bytes, n / 2, n_out, n_in));
  }
  const std::vector<float> quant_map = f32_tensor(set, name + ".quant_map", 16, state_t);
  const std::array<float, 16>& levels = kernels::nf4_levels();
  for (int i = 0; i < 16; ++i) {
    if (std::bit_cast<std::uint32_t>(quant_map[i]) != std::bit_cast<std::uint32_t>(levels[i])) {
      fail(*set.find(name + ".quant_map"), fmt::format("entry {} is {}, not NF4's level {}", i, quant_map[i], levels[i]));
    }
  }

  std::vector<float> absmax;
  if (state.contains("nested_offset")) {  // double quantization
    const SafetensorsTensor& codes = bytes_tensor(set, name + ".absmax", state_t);
    if (static_cast<std::int64_t>(codes.n_bytes) != n_blocks) {
      fail(codes, fmt::format("{} absmax codes, want {}", codes.n_bytes, n_blocks));
    }
    const std::int64_t nested_block = field<std::int64_t>(state, "nested_blocksize", state_t);
    if (nested_block <= 0) fail(state_t, fmt::format("nested_blocksize {}", nested_block));
    const float offset = field<float>(state, "nested_offset", state_t);
    const std::vector<float> nested =
        f32_tensor(set, name + ".nested_absmax", (n_blocks + nested_block - 1) / nested_block, state_t);
    const std::vector<float> nested_map = f32_tensor(set, name + ".nested_quant_map", 256, state_t);
    absmax.resize(static_cast<std::size_t>(n_blocks));
    kernels::nf4_decompress_absmax({reinterpret_cast<const std::uint8_t*>(codes.data), codes.n_bytes}, nested,
                                   nested_map, offset, nested_block, absmax);
  } else {
    absmax = f32_tensor(set, name + ".absmax", n_blocks, state_t);
  }
  for (std::size_t b = 0; b < absmax.size(); ++b) {
    if (!std::isfinite(absmax[b])) fail(state_t, fmt::format("absmax of block {} is {}", b, absmax[b]));
  }

  auto blocks = std::make_shared<std::vector<std::byte>>(tensor::row_bytes(tensor::DType::nf4, n_in) *
                                                         static_cast<std::size_t>(n_out));
  kernels::nf4_blocks_from_bnb(reinterpret_cast<const std::uint8_t*>(packed.data), absmax.data(), n, blocks->data());
  model.storage.push_back(blocks);
  return weight_view(blocks->data(), blocks->size(), tensor::DType::nf4, n_out, n_in);
}

}  // namespace pie::detail
