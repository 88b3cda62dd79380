// libFuzzer target: tensor::gguf::File::parse on arbitrary bytes. Any input must either parse or
// throw FormatError; a parsed file's metadata and tensor data must be readable without going out of bounds.
// A file that parses is then loaded as a tokenizer (tokenizer.ggml.* metadata), which must either work
// (encode and decode a text) or throw a tokenizers::Error.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "tensor/error.h"
#include "tensor/gguf.h"
#include "tokenizers/tokenizer.h"

namespace gguf = tensor::gguf;

namespace {

std::size_t walk(const gguf::Value& v, std::string_view key) {
  std::size_t n = 1;
  try {
    switch (v.type) {
      case gguf::ValueType::kString: n += v.as_string(key).size(); break;
      case gguf::ValueType::kArray:
        for (const gguf::Value& item : v.as_array(key).items) n += walk(item, key);
        break;
      case gguf::ValueType::kBool: n += v.as_bool(key) ? 1 : 0; break;
      case gguf::ValueType::kFloat32: case gguf::ValueType::kFloat64:
        n += v.as_float(key) > 0 ? 1 : 0;
        break;
      default:
        // One of the two integer accessors may throw for a value out of its range.
        try { n += static_cast<std::size_t>(v.as_uint(key) & 1); } catch (const tensor::FormatError&) {}
        try { n += static_cast<std::size_t>(v.as_int(key) & 1); } catch (const tensor::FormatError&) {}
    }
  } catch (const tensor::FormatError&) {
    __builtin_trap();  // a value's own type accessor must never refuse it
  }
  return n;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const gguf::File f = gguf::File::parse(std::span<const std::uint8_t>(data, size), "fuzz.gguf");
    std::size_t n = 0;
    for (const auto& [key, value] : f.metadata()) n += walk(value, key);
    for (const gguf::TensorInfo& t : f.tensors()) {
      const auto bytes = f.tensor_data(t);
      if (!bytes.empty()) n += bytes.front() + bytes.back();
      if (f.find_tensor(t.name) != &t) __builtin_trap();
    }
    if (f.alignment() == 0) __builtin_trap();
    volatile std::size_t sink = n;
    (void)sink;
  } catch (const tensor::FormatError&) {
    return 0;
  }
  try {
    const auto tok = tokenizers::Tokenizer::parse(std::span<const std::uint8_t>(data, size), "fuzz.gguf");
    tokenizers::EncodeOptions options;
    options.add_bos = true;
    options.parse_special = true;
    const auto ids = tok.encode("Hello world <s> caf\xC3\xA9 12345\n", options);
    (void)tok.decode(ids);
  } catch (const tokenizers::Error&) {
  }
  return 0;
}
