#include "model/safetensors.h"

#include <fmt/format.h>

#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "pie/error.h"
#include "tensor/error.h"

namespace pie::detail {
namespace {

using nlohmann::json;

// A header bigger than this is not a real checkpoint's (the largest have a few MB of JSON).
constexpr std::uint64_t kMaxHeaderBytes = 256ull << 20;

[[noreturn]] void fail(const std::filesystem::path& file, const std::string& what) {
  throw ModelError(fmt::format("[safetensors] {}: {}", file.string(), what));
}

// nullopt for the safetensors types that are not weights we read (integer buffers such as BERT's
// position_ids, F64, F8): kept aside so that only asking for one is an error.
std::optional<tensor::DType> parse_dtype(const std::filesystem::path& file, const std::string& name, const json& v) {
  if (!v.is_string()) fail(file, fmt::format("tensor '{}': \"dtype\" is not a string", name));
  const std::string s = v.get<std::string>();
  if (s == "F32") return tensor::DType::f32;
  if (s == "F16") return tensor::DType::f16;
  if (s == "BF16") return tensor::DType::bf16;
  for (const char* other :
       {"BOOL", "U8", "I8", "I16", "U16", "I32", "U32", "I64", "U64", "F64", "F8_E4M3", "F8_E5M2"}) {
    if (s == other) return std::nullopt;
  }
  fail(file, fmt::format("tensor '{}': dtype {} is not supported (F32, F16, BF16)", name, s));
}

std::uint64_t parse_u64(const std::filesystem::path& file, const std::string& name, const char* field,
                        const json& v) {
  if (!v.is_number_integer() || (v.is_number_integer() && !v.is_number_unsigned() && v.get<std::int64_t>() < 0)) {
    fail(file, fmt::format("tensor '{}': {} holds {}, not a non-negative integer", name, field, v.dump()));
  }
  return v.get<std::uint64_t>();
}

}  // namespace

std::int64_t SafetensorsTensor::n_elements() const {
  std::int64_t n = 1;
  for (std::int64_t d : shape) n *= d;
  return n;
}

SafetensorsFile::SafetensorsFile(const std::filesystem::path& path) : path_(path) {
  try {
    buffer_ = tensor::Buffer::map_file(path);
  } catch (const tensor::Error& e) {
    fail(path, fmt::format("cannot be read: {}", e.what()));
  }
  const std::size_t size = buffer_.size();
  if (size < 8) fail(path, fmt::format("{} bytes is too short for the 8-byte header length", size));
  std::uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) {
    header_len = header_len << 8 | static_cast<std::uint8_t>(buffer_.data()[i]);
  }
  if (header_len > kMaxHeaderBytes || header_len > size - 8) {
    fail(path, fmt::format("header length {} runs past the file's end ({} bytes)", header_len, size));
  }
  const char* text = reinterpret_cast<const char*>(buffer_.data() + 8);
  json header;
  try {
    header = json::parse(text, text + header_len);
  } catch (const json::exception& e) {
    fail(path, fmt::format("header is not valid JSON: {}", e.what()));
  }
  if (!header.is_object()) fail(path, "header is not a JSON object");
  const std::byte* data = buffer_.data() + 8 + header_len;
  const std::uint64_t data_size = size - 8 - header_len;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    if (!entry.is_object()) fail(path, fmt::format("tensor '{}': entry is not an object", name));
    for (const char* key : {"dtype", "shape", "data_offsets"}) {
      if (!entry.contains(key)) fail(path, fmt::format("tensor '{}': \"{}\" is missing", name, key));
    }
    SafetensorsTensor t;
    t.name = name;
    t.file = path;
    const std::optional<tensor::DType> dtype = parse_dtype(path, name, entry["dtype"]);
    const std::string dtype_name = entry["dtype"].get<std::string>();
    if (!dtype && dtype_name != "U8") {
      unsupported_.emplace(name, dtype_name);
      continue;
    }
    const std::uint64_t elem_bytes = dtype ? tensor::row_bytes(*dtype, 1) : 1;
    const json& shape = entry["shape"];
    if (!shape.is_array() || shape.size() > 8) {
      fail(path, fmt::format("tensor '{}': \"shape\" is not an array of at most 8 sizes", name));
    }
    std::uint64_t n_elements = 1;
    for (const json& d : shape) {
      const std::uint64_t dim = parse_u64(path, name, "\"shape\"", d);
      if (dim != 0 && n_elements > std::numeric_limits<std::uint64_t>::max() / 8 / dim) {
        fail(path, fmt::format("tensor '{}': shape {} overflows", name, shape.dump()));
      }
      n_elements *= dim;
      t.shape.push_back(static_cast<std::int64_t>(dim));
    }
    const json& offsets = entry["data_offsets"];
    if (!offsets.is_array() || offsets.size() != 2) {
      fail(path, fmt::format("tensor '{}': \"data_offsets\" is not [begin, end]", name));
    }
    const std::uint64_t begin = parse_u64(path, name, "\"data_offsets\"", offsets[0]);
    const std::uint64_t end = parse_u64(path, name, "\"data_offsets\"", offsets[1]);
    if (begin > end || end > data_size) {
      fail(path, fmt::format("tensor '{}': data_offsets [{}, {}) lie outside the {} data bytes", name, begin,
                             end, data_size));
    }
    const std::uint64_t want = n_elements * elem_bytes;
    if (end - begin != want) {
      fail(path, fmt::format("tensor '{}': shape {} of {} needs {} bytes, data_offsets give {}", name,
                             shape.dump(), dtype ? std::string(tensor::dtype_name(*dtype)) : dtype_name, want,
                             end - begin));
    }
    t.data = data + begin;
    t.n_bytes = static_cast<std::size_t>(end - begin);
    if (!dtype) {  // U8: not a weight type, but bitsandbytes' packed 4-bit weights and quantization state
      unsupported_.emplace(name, dtype_name);
      bytes_.emplace(name, std::move(t));
      continue;
    }
    t.dtype = *dtype;
    tensors_.emplace(name, std::move(t));
  }
}

SafetensorsSet::SafetensorsSet(const std::filesystem::path& folder) : folder_(folder) {
  const std::filesystem::path index_path = folder / "model.safetensors.index.json";
  const std::filesystem::path single = folder / "model.safetensors";
  if (std::filesystem::exists(index_path)) {
    json index;
    try {
      std::ifstream in(index_path, std::ios::binary);
      if (!in) fail(index_path, "cannot be opened");
      index = json::parse(in);
    } catch (const json::exception& e) {
      fail(index_path, fmt::format("is not valid JSON: {}", e.what()));
    }
    if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
      fail(index_path, "\"weight_map\" is missing or not an object");
    }
    std::map<std::string, std::shared_ptr<SafetensorsFile>> shards;
    for (const auto& [name, shard] : index["weight_map"].items()) {
      if (!shard.is_string()) fail(index_path, fmt::format("weight_map['{}'] is not a file name", name));
      const std::string file = shard.get<std::string>();
      // Shards are plain file names beside the index: no path may escape the folder.
      if (file.empty() || file.find('/') != std::string::npos || file.find('\\') != std::string::npos ||
          file == "." || file == "..") {
        fail(index_path, fmt::format("weight_map['{}'] names '{}', not a file in the folder", name, file));
      }
      auto it = shards.find(file);
      if (it == shards.end()) {
        auto opened = std::make_shared<SafetensorsFile>(folder / file);
        files_.push_back(opened);
        it = shards.emplace(file, std::move(opened)).first;
      }
      auto t = it->second->tensors().find(name);
      if (it->second->unsupported().contains(name)) continue;
      if (t == it->second->tensors().end()) {
        fail(index_path, fmt::format("weight_map places tensor '{}' in {}, which does not hold it", name, file));
      }
      index_.emplace(name, &t->second);
    }
    // Tensors of the shards the index does not mention are still usable.
    for (const auto& f : files_) {
      for (const auto& [name, t] : f->tensors()) index_.emplace(name, &t);
    }
  } else if (std::filesystem::exists(single)) {
    files_.push_back(std::make_shared<SafetensorsFile>(single));
    for (const auto& [name, t] : files_.back()->tensors()) index_.emplace(name, &t);
  } else {
    throw ModelError(fmt::format("[hf] {}: neither model.safetensors nor model.safetensors.index.json is there",
                                 folder.string()));
  }
}

const SafetensorsTensor* SafetensorsSet::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : it->second;
}

const SafetensorsTensor* SafetensorsSet::find_bytes(const std::string& name) const {
  for (const auto& f : files_) {
    if (auto it = f->bytes().find(name); it != f->bytes().end()) return &it->second;
  }
  return nullptr;
}

const SafetensorsTensor& SafetensorsSet::get(const std::string& name) const {
  const SafetensorsTensor* t = find(name);
  for (const auto& f : files_) {
    if (t != nullptr) break;
    if (auto u = f->unsupported().find(name); u != f->unsupported().end()) {
      fail(f->path(), fmt::format("tensor '{}': dtype {} is not supported (F32, F16, BF16)", name, u->second));
    }
  }
  if (t == nullptr) {
    throw ModelError(fmt::format("[hf] {}: tensor '{}' is missing", folder_.string(), name));
  }
  return *t;
}

std::vector<std::string> SafetensorsSet::names() const {
  std::vector<std::string> out;
  out.reserve(index_.size());
  for (const auto& [name, t] : index_) out.push_back(name);
  return out;
}

std::vector<std::shared_ptr<const void>> SafetensorsSet::storage() const {
  std::vector<std::shared_ptr<const void>> out;
  for (const auto& f : files_) out.push_back(f);
  return out;
}

std::uint64_t SafetensorsSet::total_bytes() const {
  std::uint64_t n = 0;
  for (const auto& f : files_) n += f->buffer().size();
  return n;
}

}  // namespace pie::detail
