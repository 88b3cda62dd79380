// GGUF v2/v3 reader (memory-mapped, every length and count checked against the bytes that remain before
// anything is allocated) and writer. Layout, per the spec (all little-endian):
//   magic "GGUF" | u32 version | u64 n_tensors | u64 n_kv | kv pairs | tensor infos | pad | tensor data
//   kv      = string key | u32 value type | value        (array = u32 element type | u64 count | items)
//   string  = u64 length | bytes (no terminator)
//   tensor  = string name | u32 n_dims | u64 dims[n_dims] | u32 ggml type | u64 offset (from data start)
#include "tensor/gguf.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <set>
#include <system_error>
#include <unordered_map>

#include "tensor/dtype.h"

namespace tensor::gguf {

namespace {

static_assert(std::endian::native == std::endian::little, "the GGUF reader assumes a little-endian host");

constexpr std::uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr std::size_t kDefaultAlignment = 32;
constexpr std::uint32_t kMaxDims = 4;         // GGML_MAX_DIMS
constexpr int kMaxArrayDepth = 32;           // nesting deeper than this is corrupt, not a real file

struct GgmlTypeTraits {
  const char* name;
  std::uint32_t block_size;  // elements per block; 0 = unknown / removed type
  std::uint32_t type_size;   // bytes per block
};

// Indexed by ggml_type id. Block layouts from ggml-common.h (QK_K = 256).
constexpr std::array<GgmlTypeTraits, 42> kGgmlTypes = {{
    {"f32", 1, 4},        // 0
    {"f16", 1, 2},        // 1
    {"q4_0", 32, 18},     // 2
    {"q4_1", 32, 20},     // 3
    {"q4_2", 0, 0},       // 4 (removed)
    {"q4_3", 0, 0},       // 5 (removed)
    {"q5_0", 32, 22},     // 6
    {"q5_1", 32, 24},     // 7
    {"q8_0", 32, 34},     // 8
    {"q8_1", 32, 36},     // 9
    {"q2_K", 256, 84},    // 10
    {"q3_K", 256, 110},   // 11
    {"q4_K", 256, 144},   // 12
    {"q5_K", 256, 176},   // 13
    {"q6_K", 256, 210},   // 14
    {"q8_K", 256, 292},   // 15
    {"iq2_xxs", 256, 66}, // 16
    {"iq2_xs", 256, 74},  // 17
    {"iq3_xxs", 256, 98}, // 18
    {"iq1_s", 256, 50},   // 19
    {"iq4_nl", 32, 18},   // 20
    {"iq3_s", 256, 110},  // 21
    {"iq2_s", 256, 82},   // 22
    {"iq4_xs", 256, 136}, // 23
    {"i8", 1, 1},         // 24
    {"i16", 1, 2},        // 25
    {"i32", 1, 4},        // 26
    {"i64", 1, 8},        // 27
    {"f64", 1, 8},        // 28
    {"iq1_m", 256, 56},   // 29
    {"bf16", 1, 2},       // 30
    {"q4_0_4_4", 0, 0},   // 31 (removed from GGUF files)
    {"q4_0_4_8", 0, 0},   // 32 (removed)
    {"q4_0_8_8", 0, 0},   // 33 (removed)
    {"tq1_0", 256, 54},   // 34
    {"tq2_0", 256, 66},   // 35
    {"iq4_nl_4_4", 0, 0}, // 36 (removed)
    {"iq4_nl_4_8", 0, 0}, // 37 (removed)
    {"iq4_nl_8_8", 0, 0}, // 38 (removed)
    {"mxfp4", 32, 17},    // 39
    {"nvfp4", 64, 36},    // 40
    {"q1_0", 128, 18},    // 41
}};

// Orchard's own type id (tensor/dtype.h kGgmlTypeNf4): bitsandbytes' NF4 in 36-byte blocks of 64.
constexpr GgmlTypeTraits kNf4Traits = {"nf4", 64, 36};

const GgmlTypeTraits* ggml_traits(std::uint32_t type) {
  if (type == kGgmlTypeNf4) return &kNf4Traits;
  if (type >= kGgmlTypes.size() || kGgmlTypes[type].block_size == 0) return nullptr;
  return &kGgmlTypes[type];
}

// Bytes an element of a fixed-size metadata type occupies; 0 for string and array.
std::size_t fixed_size(ValueType t) {
  switch (t) {
    case ValueType::kUint8: case ValueType::kInt8: case ValueType::kBool: return 1;
    case ValueType::kUint16: case ValueType::kInt16: return 2;
    case ValueType::kUint32: case ValueType::kInt32: case ValueType::kFloat32: return 4;
    case ValueType::kUint64: case ValueType::kInt64: case ValueType::kFloat64: return 8;
    case ValueType::kString: case ValueType::kArray: return 0;
  }
  return 0;
}

bool valid_value_type(std::uint32_t t) { return t <= static_cast<std::uint32_t>(ValueType::kFloat64); }

bool is_unsigned(ValueType t) {
  return t == ValueType::kUint8 || t == ValueType::kUint16 || t == ValueType::kUint32 ||
         t == ValueType::kUint64;
}
bool is_signed(ValueType t) {
  return t == ValueType::kInt8 || t == ValueType::kInt16 || t == ValueType::kInt32 ||
         t == ValueType::kInt64;
}
bool is_float(ValueType t) { return t == ValueType::kFloat32 || t == ValueType::kFloat64; }

std::string describe(const Value& v) {
  switch (v.type) {
    case ValueType::kString: {
      const auto* s = std::get_if<std::string>(&v.data);
      if (s == nullptr) return "string";
      return s->size() <= 40 ? fmt::format("string \"{}\"", *s)
                             : fmt::format("string \"{}...\"", s->substr(0, 40));
    }
    case ValueType::kArray: {
      const auto* a = std::get_if<Array>(&v.data);
      return a == nullptr ? "array"
                          : fmt::format("array of {} {}", a->items.size(),
                                        value_type_name(a->element_type));
    }
    default: break;
  }
  return std::visit(
      [&](const auto& x) -> std::string {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::uint64_t> || std::is_same_v<T, std::int64_t> ||
                      std::is_same_v<T, double>) {
          return fmt::format("{} {}", value_type_name(v.type), x);
        } else if constexpr (std::is_same_v<T, bool>) {
          return fmt::format("{} {}", value_type_name(v.type), x ? "true" : "false");
        } else {
          return std::string(value_type_name(v.type));
        }
      },
      v.data);
}

[[noreturn]] void wrong_type(std::string_view key, const Value& v, std::string_view wanted) {
  throw FormatError(fmt::format("[gguf] key '{}': expected {}, got {}", key, wanted, describe(v)));
}

// ---------------------------------------------------------------------------------------------------
// Reading

// The bytes of the file: a read-only mapping, or an owned copy for parse().
struct Storage {
  const std::uint8_t* data = nullptr;
  std::size_t size = 0;
  void* mapping = nullptr;  // munmap'ed on destruction when not null
  std::vector<std::uint8_t> copy;

  Storage() = default;
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  ~Storage() {
    if (mapping != nullptr) ::munmap(mapping, size);
  }
};

class Cursor {
 public:
  Cursor(const std::uint8_t* data, std::size_t size, const std::string& name)
      : data_(data), size_(size), name_(name) {}

  std::size_t pos() const { return pos_; }
  std::size_t remaining() const { return size_ - pos_; }

  [[noreturn]] void fail(std::size_t at, const std::string& what) const {
    throw FormatError(fmt::format("[gguf] {} offset {}: {}", name_, at, what));
  }

  void need(std::size_t n, std::string_view what) const {
    if (n > remaining()) {
      fail(pos_, fmt::format("{} needs {} bytes but the file ends after {} (truncated)", what, n,
                             remaining()));
    }
  }

  template <typename T>
  T read(std::string_view what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  std::string read_string(std::string_view what) {
    const std::size_t at = pos_;
    const auto length = read<std::uint64_t>(what);
    if (length > remaining()) {
      fail(at, fmt::format("{} length {} runs past the end of the file ({} bytes left)", what, length,
                           remaining()));
    }
    std::string s(reinterpret_cast<const char*>(data_ + pos_), static_cast<std::size_t>(length));
    pos_ += static_cast<std::size_t>(length);
    return s;
  }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  const std::string& name_;
  std::size_t pos_ = 0;
};

Value read_scalar(Cursor& c, ValueType t) {
  Value v;
  v.type = t;
  switch (t) {
    case ValueType::kUint8: v.data = std::uint64_t{c.read<std::uint8_t>("uint8 value")}; break;
    case ValueType::kInt8: v.data = std::int64_t{c.read<std::int8_t>("int8 value")}; break;
    case ValueType::kUint16: v.data = std::uint64_t{c.read<std::uint16_t>("uint16 value")}; break;
    case ValueType::kInt16: v.data = std::int64_t{c.read<std::int16_t>("int16 value")}; break;
    case ValueType::kUint32: v.data = std::uint64_t{c.read<std::uint32_t>("uint32 value")}; break;
    case ValueType::kInt32: v.data = std::int64_t{c.read<std::int32_t>("int32 value")}; break;
    case ValueType::kUint64: v.data = c.read<std::uint64_t>("uint64 value"); break;
    case ValueType::kInt64: v.data = c.read<std::int64_t>("int64 value"); break;
    case ValueType::kFloat32: v.data = double{c.read<float>("float32 value")}; break;
    case ValueType::kFloat64: v.data = c.read<double>("float64 value"); break;
    case ValueType::kBool: {
      const std::size_t at = c.pos();
      const auto b = c.read<std::uint8_t>("bool value");
      if (b > 1) c.fail(at, fmt::format("bool value {} is neither 0 nor 1", b));
      v.data = b == 1;
      break;
    }
    case ValueType::kString: v.data = c.read_string("string value"); break;
    case ValueType::kArray: break;  // handled by read_value
  }
  return v;
}

Value read_value(Cursor& c, ValueType t, int depth) {
  if (t != ValueType::kArray) return read_scalar(c, t);
  const std::size_t at = c.pos();
  if (depth >= kMaxArrayDepth) c.fail(at, fmt::format("arrays nested deeper than {}", kMaxArrayDepth));
  const auto raw_element = c.read<std::uint32_t>("array element type");
  if (!valid_value_type(raw_element)) {
    c.fail(at, fmt::format("array element type {} is not a GGUF value type (0..12)", raw_element));
  }
  const auto element = static_cast<ValueType>(raw_element);
  const std::size_t count_at = c.pos();
  const auto count = c.read<std::uint64_t>("array length");
  // Smallest encoding of one element: its fixed size, 8 bytes of string length, 12 bytes of array header.
  const std::size_t min_element = element == ValueType::kString  ? 8
                                  : element == ValueType::kArray ? 12
                                                                 : fixed_size(element);
  if (count > c.remaining() / min_element) {
    c.fail(count_at, fmt::format("array length {} of {} runs past the end of the file ({} bytes left)",
                                 count, value_type_name(element), c.remaining()));
  }
  Value v;
  v.type = ValueType::kArray;
  Array array;
  array.element_type = element;
  array.items.reserve(static_cast<std::size_t>(count));
  for (std::uint64_t i = 0; i < count; ++i) array.items.push_back(read_value(c, element, depth + 1));
  v.data = std::move(array);
  return v;
}

std::uint64_t align_up(std::uint64_t x, std::uint64_t alignment) {
  return (x + alignment - 1) / alignment * alignment;
}

}  // namespace

// ---------------------------------------------------------------------------------------------------

struct File::Impl {
  std::string name;
  std::unique_ptr<Storage> storage;
  std::uint32_t version = 0;
  std::size_t alignment = kDefaultAlignment;
  std::map<std::string, Value, std::less<>> metadata;
  std::vector<TensorInfo> tensors;
  std::unordered_map<std::string, std::size_t> tensor_index;
  std::uint64_t data_offset = 0;  // start of the tensor data section in the file
};

namespace {

void parse_into(File::Impl& impl) {
  const Storage& st = *impl.storage;
  Cursor c(st.data, st.size, impl.name);

  if (st.size < 4) c.fail(0, fmt::format("file of {} bytes is too short for a GGUF header", st.size));
  const auto magic = c.read<std::uint32_t>("magic");
  if (magic != kMagic) {
    std::string shown;
    for (int i = 0; i < 4; ++i) {
      const char ch = static_cast<char>(st.data[i]);
      shown += (ch >= 0x20 && ch < 0x7f) ? std::string(1, ch) : fmt::format("\\x{:02x}", st.data[i]);
    }
    c.fail(0, fmt::format("bad magic \"{}\" (expected \"GGUF\"): not a GGUF file", shown));
  }
  const auto version = c.read<std::uint32_t>("version");
  if (version == 1) {
    c.fail(4, "GGUF version 1 is not supported (32-bit counts; convert the file to v2 or v3)");
  }
  if (version != 2 && version != 3) {
    const bool swapped = version == 0x02000000 || version == 0x03000000;
    c.fail(4, fmt::format("unsupported GGUF version {}{}", version,
                          swapped ? " (a big-endian file? only little-endian GGUF is read)" : ""));
  }
  impl.version = version;
  const std::size_t n_tensors_at = c.pos();
  const auto n_tensors = c.read<std::uint64_t>("tensor count");
  const std::size_t n_kv_at = c.pos();
  const auto n_kv = c.read<std::uint64_t>("metadata count");
  // Each kv pair takes at least 12 bytes (key length + type), each tensor info at least 24.
  if (n_kv > c.remaining() / 12) {
    c.fail(n_kv_at, fmt::format("metadata count {} runs past the end of the file ({} bytes left)", n_kv,
                                c.remaining()));
  }
  if (n_tensors > c.remaining() / 24) {
    c.fail(n_tensors_at, fmt::format("tensor count {} runs past the end of the file ({} bytes left)",
                                     n_tensors, c.remaining()));
  }

  for (std::uint64_t i = 0; i < n_kv; ++i) {
    const std::size_t key_at = c.pos();
    std::string key = c.read_string("metadata key");
    if (key.empty()) c.fail(key_at, fmt::format("metadata key {} is empty", i));
    if (impl.metadata.contains(key)) c.fail(key_at, fmt::format("duplicate metadata key '{}'", key));
    const std::size_t type_at = c.pos();
    const auto raw_type = c.read<std::uint32_t>("value type");
    if (!valid_value_type(raw_type)) {
      c.fail(type_at, fmt::format("key '{}': value type {} is not a GGUF value type (0..12)", key,
                                  raw_type));
    }
    Value value = read_value(c, static_cast<ValueType>(raw_type), 0);
    impl.metadata.emplace(std::move(key), std::move(value));
  }

  if (auto it = impl.metadata.find("general.alignment"); it != impl.metadata.end()) {
    const Value& v = it->second;
    if (v.type != ValueType::kUint32) {
      c.fail(c.pos(), fmt::format("key 'general.alignment' must be a uint32, got {}", describe(v)));
    }
    const auto a = std::get<std::uint64_t>(v.data);
    if (a == 0 || !std::has_single_bit(a)) {
      c.fail(c.pos(), fmt::format("key 'general.alignment' = {} is not a power of two", a));
    }
    impl.alignment = static_cast<std::size_t>(a);
  }

  impl.tensors.reserve(static_cast<std::size_t>(n_tensors));
  for (std::uint64_t i = 0; i < n_tensors; ++i) {
    const std::size_t at = c.pos();
    TensorInfo info;
    info.name = c.read_string("tensor name");
    if (impl.tensor_index.contains(info.name)) {
      c.fail(at, fmt::format("duplicate tensor name '{}'", info.name));
    }
    const auto n_dims = c.read<std::uint32_t>("tensor dimension count");
    if (n_dims > kMaxDims) {
      c.fail(at, fmt::format("tensor '{}' has {} dimensions (at most {})", info.name, n_dims, kMaxDims));
    }
    std::uint64_t n_elements = 1;
    bool overflow = false;
    for (std::uint32_t d = 0; d < n_dims; ++d) {
      const auto dim = c.read<std::uint64_t>("tensor dimension");
      info.dims.push_back(dim);
      if (dim != 0 && n_elements > std::numeric_limits<std::int64_t>::max() / dim) overflow = true;
      n_elements *= dim;
    }
    if (overflow) {
      c.fail(at, fmt::format("tensor '{}' element count overflows (dims {})", info.name,
                             fmt::join(info.dims, "x")));
    }
    info.type = c.read<std::uint32_t>("tensor type");
    info.offset = c.read<std::uint64_t>("tensor offset");
    if (const GgmlTypeTraits* t = ggml_traits(info.type)) {
      if (!info.dims.empty() && info.dims[0] % t->block_size != 0) {
        c.fail(at, fmt::format("tensor '{}' of type {}: first dimension {} is not a multiple of the "
                               "block size {}",
                               info.name, t->name, info.dims[0], t->block_size));
      }
      const std::uint64_t n_blocks = n_elements / t->block_size;
      if (n_blocks > std::numeric_limits<std::uint64_t>::max() / t->type_size) {
        c.fail(at, fmt::format("tensor '{}' byte size overflows", info.name));
      }
      info.n_bytes = n_blocks * t->type_size;
    }
    if (info.offset % impl.alignment != 0) {
      c.fail(at, fmt::format("tensor '{}' offset {} is not a multiple of the alignment {}", info.name,
                             info.offset, impl.alignment));
    }
    impl.tensor_index.emplace(info.name, impl.tensors.size());
    impl.tensors.push_back(std::move(info));
  }

  impl.data_offset = align_up(c.pos(), impl.alignment);
  const std::uint64_t data_size = st.size >= impl.data_offset ? st.size - impl.data_offset : 0;
  for (const TensorInfo& t : impl.tensors) {
    if (t.n_bytes == 0) continue;
    if (t.offset > data_size || t.n_bytes > data_size - t.offset) {
      throw FormatError(fmt::format(
          "[gguf] {} tensor '{}': data [{}, {}) of the data section (at file offset {}) runs past the "
          "end of the file ({} data bytes)",
          impl.name, t.name, t.offset, t.offset + t.n_bytes, impl.data_offset, data_size));
    }
  }
}

}  // namespace

File::File(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

File File::open(const std::filesystem::path& path) {
  auto impl = std::make_shared<Impl>();
  impl->name = path.string();
  impl->storage = std::make_unique<Storage>();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    throw IoError(fmt::format("[gguf] cannot open {}: {}", impl->name, std::strerror(errno)));
  }
  struct stat sb {};
  if (::fstat(fd, &sb) != 0) {
    const int err = errno;
    ::close(fd);
    throw IoError(fmt::format("[gguf] cannot stat {}: {}", impl->name, std::strerror(err)));
  }
  if (!S_ISREG(sb.st_mode)) {
    ::close(fd);
    throw IoError(fmt::format("[gguf] {} is not a regular file", impl->name));
  }
  const auto size = static_cast<std::size_t>(sb.st_size);
  if (size > 0) {
    void* m = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      throw IoError(fmt::format("[gguf] cannot map {}: {}", impl->name, std::strerror(err)));
    }
    impl->storage->mapping = m;
    impl->storage->data = static_cast<const std::uint8_t*>(m);
    impl->storage->size = size;
  }
  ::close(fd);
  parse_into(*impl);
  return File(std::move(impl));
}

File File::parse(std::span<const std::uint8_t> bytes, std::string name) {
  auto impl = std::make_shared<Impl>();
  impl->name = std::move(name);
  impl->storage = std::make_unique<Storage>();
  impl->storage->copy.assign(bytes.begin(), bytes.end());
  impl->storage->data = impl->storage->copy.data();
  impl->storage->size = impl->storage->copy.size();
  parse_into(*impl);
  return File(std::move(impl));
}

std::uint32_t File::version() const { return impl_->version; }
std::size_t File::alignment() const { return impl_->alignment; }
const std::map<std::string, Value, std::less<>>& File::metadata() const { return impl_->metadata; }

const Value* File::find(std::string_view key) const {
  auto it = impl_->metadata.find(key);
  return it == impl_->metadata.end() ? nullptr : &it->second;
}

const Value& File::at(std::string_view key) const {
  if (const Value* v = find(key)) return *v;
  throw FormatError(fmt::format("[gguf] {}: required key '{}' is missing", impl_->name, key));
}

const std::vector<TensorInfo>& File::tensors() const { return impl_->tensors; }

const TensorInfo* File::find_tensor(std::string_view name) const {
  auto it = impl_->tensor_index.find(std::string(name));
  return it == impl_->tensor_index.end() ? nullptr : &impl_->tensors[it->second];
}

std::span<const std::uint8_t> File::tensor_data(const TensorInfo& info) const {
  const Storage& st = *impl_->storage;
  const std::uint64_t start = impl_->data_offset + info.offset;
  if (info.n_bytes == 0) return {};
  if (start > st.size || info.n_bytes > st.size - start) {
    throw FormatError(fmt::format("[gguf] {} tensor '{}': data runs past the end of the file",
                                  impl_->name, info.name));
  }
  return {st.data + start, static_cast<std::size_t>(info.n_bytes)};
}

std::uint64_t File::data_offset() const { return impl_->data_offset; }

const std::string& File::name() const { return impl_->name; }

// ---------------------------------------------------------------------------------------------------
// Value accessors

std::uint64_t Value::as_uint(std::string_view key) const {
  if (const auto* u = std::get_if<std::uint64_t>(&data); u != nullptr && is_unsigned(type)) return *u;
  if (const auto* i = std::get_if<std::int64_t>(&data); i != nullptr && is_signed(type) && *i >= 0) {
    return static_cast<std::uint64_t>(*i);
  }
  wrong_type(key, *this, "a non-negative integer");
}

std::int64_t Value::as_int(std::string_view key) const {
  if (const auto* i = std::get_if<std::int64_t>(&data); i != nullptr && is_signed(type)) return *i;
  if (const auto* u = std::get_if<std::uint64_t>(&data);
      u != nullptr && is_unsigned(type) && *u <= static_cast<std::uint64_t>(INT64_MAX)) {
    return static_cast<std::int64_t>(*u);
  }
  wrong_type(key, *this, "an integer that fits int64");
}

double Value::as_float(std::string_view key) const {
  if (const auto* d = std::get_if<double>(&data); d != nullptr && is_float(type)) return *d;
  if (const auto* i = std::get_if<std::int64_t>(&data); i != nullptr && is_signed(type)) {
    return static_cast<double>(*i);
  }
  if (const auto* u = std::get_if<std::uint64_t>(&data); u != nullptr && is_unsigned(type)) {
    return static_cast<double>(*u);
  }
  wrong_type(key, *this, "a number");
}

bool Value::as_bool(std::string_view key) const {
  if (const auto* b = std::get_if<bool>(&data); b != nullptr && type == ValueType::kBool) return *b;
  wrong_type(key, *this, "a bool");
}

const std::string& Value::as_string(std::string_view key) const {
  if (const auto* s = std::get_if<std::string>(&data); s != nullptr && type == ValueType::kString) {
    return *s;
  }
  wrong_type(key, *this, "a string");
}

const Array& Value::as_array(std::string_view key) const {
  if (const auto* a = std::get_if<Array>(&data); a != nullptr && type == ValueType::kArray) return *a;
  wrong_type(key, *this, "an array");
}

// ---------------------------------------------------------------------------------------------------
// Writer

namespace {

template <typename T>
void put(std::vector<std::uint8_t>& out, T v) {
  const auto at = out.size();
  out.resize(at + sizeof(T));
  std::memcpy(out.data() + at, &v, sizeof(T));
}

void put_string(std::vector<std::uint8_t>& out, std::string_view s) {
  put<std::uint64_t>(out, s.size());
  out.insert(out.end(), s.begin(), s.end());
}

[[noreturn]] void bad_value(std::string_view key, const std::string& what) {
  throw InputError(fmt::format("[gguf writer] key '{}': {}", key, what));
}

// The integer a Value holds, as a wide signed/unsigned pair, for range checks.
template <typename T>
T int_for(std::string_view key, const Value& v) {
  if (const auto* u = std::get_if<std::uint64_t>(&v.data)) {
    if (*u > static_cast<std::uint64_t>(std::numeric_limits<T>::max())) {
      bad_value(key, fmt::format("{} does not fit {}", *u, value_type_name(v.type)));
    }
    return static_cast<T>(*u);
  }
  if (const auto* i = std::get_if<std::int64_t>(&v.data)) {
    if (*i < static_cast<std::int64_t>(std::numeric_limits<T>::min()) ||
        (*i > 0 && static_cast<std::uint64_t>(*i) > static_cast<std::uint64_t>(std::numeric_limits<T>::max()))) {
      bad_value(key, fmt::format("{} does not fit {}", *i, value_type_name(v.type)));
    }
    return static_cast<T>(*i);
  }
  bad_value(key, fmt::format("a {} value must hold an integer", value_type_name(v.type)));
}

double float_for(std::string_view key, const Value& v) {
  if (const auto* d = std::get_if<double>(&v.data)) return *d;
  if (const auto* i = std::get_if<std::int64_t>(&v.data)) return static_cast<double>(*i);
  if (const auto* u = std::get_if<std::uint64_t>(&v.data)) return static_cast<double>(*u);
  bad_value(key, fmt::format("a {} value must hold a number", value_type_name(v.type)));
}

void put_value(std::vector<std::uint8_t>& out, std::string_view key, const Value& v, int depth) {
  switch (v.type) {
    case ValueType::kUint8: put(out, int_for<std::uint8_t>(key, v)); break;
    case ValueType::kInt8: put(out, int_for<std::int8_t>(key, v)); break;
    case ValueType::kUint16: put(out, int_for<std::uint16_t>(key, v)); break;
    case ValueType::kInt16: put(out, int_for<std::int16_t>(key, v)); break;
    case ValueType::kUint32: put(out, int_for<std::uint32_t>(key, v)); break;
    case ValueType::kInt32: put(out, int_for<std::int32_t>(key, v)); break;
    case ValueType::kUint64: put(out, int_for<std::uint64_t>(key, v)); break;
    case ValueType::kInt64: put(out, int_for<std::int64_t>(key, v)); break;
    case ValueType::kFloat32: put(out, static_cast<float>(float_for(key, v))); break;
    case ValueType::kFloat64: put(out, float_for(key, v)); break;
    case ValueType::kBool: {
      const auto* b = std::get_if<bool>(&v.data);
      if (b == nullptr) bad_value(key, "a bool value must hold a bool");
      put<std::uint8_t>(out, *b ? 1 : 0);
      break;
    }
    case ValueType::kString: {
      const auto* s = std::get_if<std::string>(&v.data);
      if (s == nullptr) bad_value(key, "a string value must hold a string");
      put_string(out, *s);
      break;
    }
    case ValueType::kArray: {
      const auto* a = std::get_if<Array>(&v.data);
      if (a == nullptr) bad_value(key, "an array value must hold an Array");
      if (depth >= kMaxArrayDepth) bad_value(key, fmt::format("arrays nested deeper than {}", kMaxArrayDepth));
      if (!valid_value_type(static_cast<std::uint32_t>(a->element_type))) {
        bad_value(key, fmt::format("array element type {} is not a GGUF value type",
                                   static_cast<std::uint32_t>(a->element_type)));
      }
      put<std::uint32_t>(out, static_cast<std::uint32_t>(a->element_type));
      put<std::uint64_t>(out, a->items.size());
      for (std::size_t i = 0; i < a->items.size(); ++i) {
        if (a->items[i].type != a->element_type) {
          bad_value(key, fmt::format("array item {} is a {}, the array holds {}", i,
                                     value_type_name(a->items[i].type),
                                     value_type_name(a->element_type)));
        }
        put_value(out, key, a->items[i], depth + 1);
      }
      break;
    }
    default:
      bad_value(key, fmt::format("value type {} is not a GGUF value type",
                                 static_cast<std::uint32_t>(v.type)));
  }
}

}  // namespace

Writer::Writer(std::size_t alignment) : alignment_(alignment) {
  if (alignment == 0 || !std::has_single_bit(alignment) ||
      alignment > std::numeric_limits<std::uint32_t>::max()) {
    throw InputError(fmt::format("[gguf writer] alignment {} is not a power of two", alignment));
  }
}

void Writer::set(std::string key, Value value) {
  if (key.empty()) throw InputError("[gguf writer] metadata key is empty");
  for (auto& [k, v] : metadata_) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  metadata_.emplace_back(std::move(key), std::move(value));
}

void Writer::add_tensor(std::string name, std::vector<std::uint64_t> dims, std::uint32_t type,
                        std::vector<std::uint8_t> data) {
  for (const PendingTensor& t : tensors_) {
    if (t.name == name) throw InputError(fmt::format("[gguf writer] duplicate tensor '{}'", name));
  }
  if (dims.size() > kMaxDims) {
    throw InputError(fmt::format("[gguf writer] tensor '{}' has {} dimensions (at most {})", name,
                                 dims.size(), kMaxDims));
  }
  const GgmlTypeTraits* t = ggml_traits(type);
  if (t == nullptr) {
    throw InputError(fmt::format("[gguf writer] tensor '{}': unknown ggml type {}", name, type));
  }
  std::uint64_t n = 1;
  for (std::uint64_t d : dims) {
    if (d != 0 && n > std::numeric_limits<std::int64_t>::max() / d) {
      throw InputError(fmt::format("[gguf writer] tensor '{}': element count overflows", name));
    }
    n *= d;
  }
  if (!dims.empty() && dims[0] % t->block_size != 0) {
    throw InputError(fmt::format("[gguf writer] tensor '{}' of type {}: first dimension {} is not a "
                                 "multiple of the block size {}",
                                 name, t->name, dims[0], t->block_size));
  }
  const std::uint64_t expected = tensor_bytes(type, n);
  if (data.size() != expected) {
    throw InputError(fmt::format("[gguf writer] tensor '{}': {} bytes of data, a {} tensor of {} "
                                 "elements takes {}",
                                 name, data.size(), t->name, n, expected));
  }
  tensors_.push_back({std::move(name), std::move(dims), type, std::move(data)});
}

std::vector<std::uint8_t> Writer::to_bytes() const {
  // general.alignment, when set, must agree with the writer's alignment; when the alignment is not the
  // default it is written so that readers find it.
  std::vector<std::pair<std::string, Value>> metadata = metadata_;
  auto it = std::find_if(metadata.begin(), metadata.end(),
                         [](const auto& kv) { return kv.first == "general.alignment"; });
  if (it != metadata.end()) {
    if (it->second.type != ValueType::kUint32 ||
        int_for<std::uint32_t>("general.alignment", it->second) != alignment_) {
      throw InputError(fmt::format("[gguf writer] key 'general.alignment' ({}) disagrees with the "
                                   "writer's alignment {}",
                                   describe(it->second), alignment_));
    }
  } else if (alignment_ != kDefaultAlignment) {
    metadata.emplace_back("general.alignment", make_uint32(static_cast<std::uint32_t>(alignment_)));
  }

  std::vector<std::uint8_t> out;
  put<std::uint32_t>(out, kMagic);
  put<std::uint32_t>(out, 3);
  put<std::uint64_t>(out, tensors_.size());
  put<std::uint64_t>(out, metadata.size());
  for (const auto& [key, value] : metadata) {
    put_string(out, key);
    put<std::uint32_t>(out, static_cast<std::uint32_t>(value.type));
    put_value(out, key, value, 0);
  }
  std::uint64_t offset = 0;
  for (const PendingTensor& t : tensors_) {
    put_string(out, t.name);
    put<std::uint32_t>(out, static_cast<std::uint32_t>(t.dims.size()));
    for (std::uint64_t d : t.dims) put<std::uint64_t>(out, d);
    put<std::uint32_t>(out, t.type);
    put<std::uint64_t>(out, offset);
    offset = align_up(offset + t.data.size(), alignment_);
  }
  if (!tensors_.empty()) {
    out.resize(align_up(out.size(), alignment_), 0);
    for (const PendingTensor& t : tensors_) {
      out.insert(out.end(), t.data.begin(), t.data.end());
      out.resize(align_up(out.size(), alignment_), 0);
    }
  }
  return out;
}

void Writer::write(const std::filesystem::path& path) const {
  const std::vector<std::uint8_t> bytes = to_bytes();
  std::filesystem::path tmp = path;
  tmp += fmt::format(".tmp.{}", ::getpid());
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) throw IoError(fmt::format("[gguf writer] cannot create {}", tmp.string()));
    f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    f.flush();
    if (!f) {
      std::error_code ec;
      std::filesystem::remove(tmp, ec);
      throw IoError(fmt::format("[gguf writer] cannot write {}", tmp.string()));
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
    throw IoError(fmt::format("[gguf writer] cannot rename {} to {}: {}", tmp.string(), path.string(),
                                ec.message()));
  }
}

// ---------------------------------------------------------------------------------------------------

Value make_string(std::string s) { return Value{ValueType::kString, std::move(s)}; }
Value make_uint32(std::uint32_t v) { return Value{ValueType::kUint32, std::uint64_t{v}}; }
Value make_int32(std::int32_t v) { return Value{ValueType::kInt32, std::int64_t{v}}; }
Value make_float32(float v) { return Value{ValueType::kFloat32, double{v}}; }
Value make_bool(bool v) { return Value{ValueType::kBool, v}; }
Value make_array(ValueType element_type, std::vector<Value> items) {
  return Value{ValueType::kArray, Array{element_type, std::move(items)}};
}
Value make_uint(ValueType type, std::uint64_t v) { return Value{type, v}; }
Value make_int(ValueType type, std::int64_t v) { return Value{type, v}; }
Value make_float64(double v) { return Value{ValueType::kFloat64, v}; }

std::uint64_t tensor_bytes(std::uint32_t type, std::uint64_t n_elements) {
  const GgmlTypeTraits* t = ggml_traits(type);
  if (t == nullptr) return 0;
  if (n_elements % t->block_size != 0) {
    throw FormatError(fmt::format("[gguf] {} elements of type {} are not a whole number of {}-element "
                                  "blocks",
                                  n_elements, t->name, t->block_size));
  }
  const std::uint64_t n_blocks = n_elements / t->block_size;
  if (n_blocks > std::numeric_limits<std::uint64_t>::max() / t->type_size) {
    throw FormatError(fmt::format("[gguf] {} elements of type {}: byte size overflows", n_elements,
                                  t->name));
  }
  return n_blocks * t->type_size;
}

std::string_view ggml_type_name(std::uint32_t type) {
  if (type == kGgmlTypeNf4) return kNf4Traits.name;
  if (type >= kGgmlTypes.size()) return "unknown";
  return kGgmlTypes[type].name;
}

std::uint32_t ggml_block_size(std::uint32_t type) {
  const GgmlTypeTraits* t = ggml_traits(type);
  return t == nullptr ? 0 : t->block_size;
}

std::string_view value_type_name(ValueType type) {
  switch (type) {
    case ValueType::kUint8: return "uint8";
    case ValueType::kInt8: return "int8";
    case ValueType::kUint16: return "uint16";
    case ValueType::kInt16: return "int16";
    case ValueType::kUint32: return "uint32";
    case ValueType::kInt32: return "int32";
    case ValueType::kFloat32: return "float32";
    case ValueType::kBool: return "bool";
    case ValueType::kString: return "string";
    case ValueType::kArray: return "array";
    case ValueType::kUint64: return "uint64";
    case ValueType::kInt64: return "int64";
    case ValueType::kFloat64: return "float64";
  }
  return "invalid";
}

}  // namespace tensor::gguf
