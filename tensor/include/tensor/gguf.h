// GGUF container (v2 and v3): a bounds-checked, memory-mapped reader and a writer.
// Spec: https://github.com/ggml-org/ggml/blob/master/docs/gguf.md. It lives in the tensor layer, the
// lowest, so that both readers of GGUF use it without depending on each other: the tokenizers layer
// (tokenizer.ggml.* metadata) and pie's model loader (tensors, whose data are used in place from the
// mapping, never copied).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "tensor/error.h"

namespace tensor::gguf {

// Metadata value types, numbered as in the file.
enum class ValueType : std::uint32_t {
  kUint8 = 0, kInt8 = 1, kUint16 = 2, kInt16 = 3, kUint32 = 4, kInt32 = 5, kFloat32 = 6, kBool = 7,
  kString = 8, kArray = 9, kUint64 = 10, kInt64 = 11, kFloat64 = 12,
};

struct Value;
// An array's elements, all of one type (nested arrays allowed).
struct Array {
  ValueType element_type = ValueType::kUint8;
  std::vector<Value> items;
};

struct Value {
  ValueType type = ValueType::kUint8;
  std::variant<std::uint64_t, std::int64_t, double, bool, std::string, Array> data;

  // Typed accessors: throw FormatError naming `key` when the value does not have a compatible type.
  // Integers convert between widths when the value fits.
  std::uint64_t as_uint(std::string_view key) const;
  std::int64_t as_int(std::string_view key) const;
  double as_float(std::string_view key) const;
  bool as_bool(std::string_view key) const;
  const std::string& as_string(std::string_view key) const;
  const Array& as_array(std::string_view key) const;
};

struct TensorInfo {
  std::string name;
  std::vector<std::uint64_t> dims;  // ne[0] first (innermost), as GGUF stores them
  std::uint32_t type = 0;           // ggml_type id (0 f32, 1 f16, 8 q8_0, 30 bf16, ...)
  std::uint64_t offset = 0;         // from the start of the data section, aligned
  std::uint64_t n_bytes = 0;        // computed from type and dims; 0 for a type this reader does not know
};

class File {
 public:
  // Maps and parses the header, metadata and tensor infos. Throws IoError (missing, unreadable) or
  // FormatError (bad magic, unsupported version, truncated, counts or lengths beyond the file, duplicate
  // keys, tensor data outside the file), each naming the file and the offset or key at fault.
  static File open(const std::filesystem::path& path);
  // Parses an in-memory image (copied); same checks. Used by tests and the fuzzer.
  static File parse(std::span<const std::uint8_t> bytes, std::string name = "<memory>");

  std::uint32_t version() const;
  std::size_t alignment() const;
  const std::map<std::string, Value, std::less<>>& metadata() const;
  // nullptr when absent.
  const Value* find(std::string_view key) const;
  // Throws FormatError naming the key when absent.
  const Value& at(std::string_view key) const;
  const std::vector<TensorInfo>& tensors() const;
  const TensorInfo* find_tensor(std::string_view name) const;
  // File offset where the tensor data section starts (after the infos, aligned).
  std::uint64_t data_offset() const;
  // The bytes of a tensor inside the mapping (valid while any copy of this File lives).
  std::span<const std::uint8_t> tensor_data(const TensorInfo& info) const;
  const std::string& name() const;

  struct Impl;

 private:
  explicit File(std::shared_ptr<const Impl> impl);
  std::shared_ptr<const Impl> impl_;
};

// Builds a GGUF v3 file: metadata in insertion order, then tensor infos, then aligned tensor data.
class Writer {
 public:
  // Throws InputError when `alignment` is not a power of two; one other than 32 is written as
  // general.alignment.
  explicit Writer(std::size_t alignment = 32);
  // Replaces an existing key, keeping its position. Throws InputError on an empty key.
  void set(std::string key, Value value);
  // `data` must hold exactly the bytes of a tensor of that type and shape; throws InputError otherwise
  // (and on an unknown type, a duplicate name, more than 4 dims). The writer is unchanged on error.
  void add_tensor(std::string name, std::vector<std::uint64_t> dims, std::uint32_t type,
                  std::vector<std::uint8_t> data);
  // Throws InputError naming the key when a value does not fit its type (300 as uint8, an array item of
  // another type) or general.alignment disagrees with the writer's alignment.
  std::vector<std::uint8_t> to_bytes() const;
  // Writes atomically (temporary file, then rename). Throws IoError.
  void write(const std::filesystem::path& path) const;

 private:
  std::size_t alignment_;
  std::vector<std::pair<std::string, Value>> metadata_;
  struct PendingTensor {
    std::string name;
    std::vector<std::uint64_t> dims;
    std::uint32_t type;
    std::vector<std::uint8_t> data;
  };
  std::vector<PendingTensor> tensors_;
};

// Convenience constructors for metadata values.
Value make_string(std::string s);
Value make_uint32(std::uint32_t v);
Value make_int32(std::int32_t v);
Value make_float32(float v);
Value make_bool(bool v);
Value make_array(ValueType element_type, std::vector<Value> items);
// Any integer type (kUint8..kUint64 / kInt8..kInt64); the Writer throws InputError when it does not fit.
Value make_uint(ValueType type, std::uint64_t v);
Value make_int(ValueType type, std::int64_t v);
Value make_float64(double v);

// "uint32", "string", ... ("invalid" for a number outside the enum).
std::string_view value_type_name(ValueType type);
// ggml type name ("q8_0", "bf16"; "unknown" past the table) and block size in elements (0 when the
// type is unknown or was removed from GGUF files).
std::string_view ggml_type_name(std::uint32_t type);
std::uint32_t ggml_block_size(std::uint32_t type);

// Size in bytes of a tensor of ggml type `type` with `n_elements` elements (a multiple of the block
// size); 0 when the type is unknown. Throws FormatError when n_elements is not a whole number of blocks.
std::uint64_t tensor_bytes(std::uint32_t type, std::uint64_t n_elements);

}  // namespace tensor::gguf
