// Reading safetensors files (private to pie/src/model): the 8-byte little-endian header length, the JSON
// header {name: {dtype, shape, data_offsets: [begin, end)}, "__metadata__": {...}}, and the data after it,
// memory-mapped. Every offset, size and shape is checked against the file before a view is handed out.
// A sharded checkpoint is a set of such files named by model.safetensors.index.json's weight_map.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tensor/dtype.h"
#include "tensor/tensor.h"

namespace pie::detail {

struct SafetensorsTensor {
  std::string name;
  tensor::DType dtype = tensor::DType::f32;  // F32, F16 or BF16 (others are rejected at open)
  std::vector<std::int64_t> shape;            // as written (PyTorch order: [n_out, n_in] for Linear)
  const std::byte* data = nullptr;            // into the mapping
  std::size_t n_bytes = 0;
  std::filesystem::path file;                 // for messages
  std::int64_t n_elements() const;
};

class SafetensorsFile {
 public:
  // Maps and parses `path`. Throws ModelError naming the file and the tensor / field at fault: a file
  // shorter than its header, a header that is not a JSON object, an unknown dtype, a shape
  // whose byte size differs from data_offsets, offsets past the end of the file or overlapping the header.
  explicit SafetensorsFile(const std::filesystem::path& path);

  const std::filesystem::path& path() const { return path_; }
  const std::map<std::string, SafetensorsTensor>& tensors() const { return tensors_; }
  // Tensors of types that are not weights (integer buffers, F64, F8): name -> dtype as written.
  const std::map<std::string, std::string>& unsupported() const { return unsupported_; }
  // The U8 tensors (also listed in unsupported()): bitsandbytes' packed weights and quantization state.
  // Their dtype field means nothing; n_bytes is the element count.
  const std::map<std::string, SafetensorsTensor>& bytes() const { return bytes_; }
  // The mapping (keeps the views alive).
  const tensor::Buffer& buffer() const { return buffer_; }

 private:
  std::filesystem::path path_;
  tensor::Buffer buffer_;
  std::map<std::string, SafetensorsTensor> tensors_;
  std::map<std::string, std::string> unsupported_;
  std::map<std::string, SafetensorsTensor> bytes_;
};

// All tensors of a Hugging Face folder: model.safetensors, or the shards that
// model.safetensors.index.json's weight_map names (each shard opened once; a tensor the index places in a
// shard that lacks it is an error). Throws ModelError.
class SafetensorsSet {
 public:
  explicit SafetensorsSet(const std::filesystem::path& folder);

  // nullptr when absent.
  const SafetensorsTensor* find(const std::string& name) const;
  // Throws ModelError naming the folder and the tensor when absent, or the file and its dtype when it is
  // one of the unsupported ones.
  const SafetensorsTensor& get(const std::string& name) const;
  // A U8 tensor (SafetensorsFile::bytes), or nullptr when no file holds one of that name.
  const SafetensorsTensor* find_bytes(const std::string& name) const;
  std::vector<std::string> names() const;
  // The mappings, as storage a Model keeps alive.
  std::vector<std::shared_ptr<const void>> storage() const;
  std::uint64_t total_bytes() const;

 private:
  std::filesystem::path folder_;
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::map<std::string, const SafetensorsTensor*> index_;
};

}  // namespace pie::detail
