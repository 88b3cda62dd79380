// GGUF container: writer -> reader round trips, the real vocab files, files written by gguf-py, and every
// way a corrupt file must fail (a FormatError naming the problem, never a crash or a huge allocation).
#include "tensor/gguf.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "shared_data.h"

namespace gguf = tensor::gguf;
using gguf::ValueType;
using ::testing::HasSubstr;

namespace {

using Bytes = std::vector<std::uint8_t>;

// Expects `fn` to throw FormatError whose message contains every one of `parts`.
template <typename Fn>
void expect_format_error(Fn&& fn, std::initializer_list<std::string> parts) {
  try {
    fn();
    ADD_FAILURE() << "expected a FormatError";
  } catch (const tensor::FormatError& e) {
    for (const std::string& p : parts) EXPECT_THAT(e.what(), HasSubstr(p));
  }
}

void expect_parse_error(const Bytes& bytes, std::initializer_list<std::string> parts) {
  expect_format_error([&] { gguf::File::parse(bytes, "bad.gguf"); }, parts);
}

// Little-endian builder for hand-made (and deliberately broken) files.
struct Builder {
  Bytes b;
  template <typename T>
  Builder& put(T v) {
    const auto at = b.size();
    b.resize(at + sizeof(T));
    std::memcpy(b.data() + at, &v, sizeof(T));
    return *this;
  }
  Builder& str(std::string_view s) {
    put<std::uint64_t>(s.size());
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
  Builder& header(std::uint64_t n_tensors, std::uint64_t n_kv, std::uint32_t version = 3) {
    b.insert(b.end(), {'G', 'G', 'U', 'F'});
    put<std::uint32_t>(version);
    put<std::uint64_t>(n_tensors);
    put<std::uint64_t>(n_kv);
    return *this;
  }
  Builder& kv_u32(std::string_view key, std::uint32_t v) {
    str(key);
    put<std::uint32_t>(static_cast<std::uint32_t>(ValueType::kUint32));
    return put(v);
  }
  Builder& fill(std::size_t n) {
    b.resize(b.size() + n, 0);
    return *this;
  }
  Builder& pad(std::size_t alignment) {
    b.resize((b.size() + alignment - 1) / alignment * alignment, 0);
    return *this;
  }
};

std::string fmt_hex(std::uint8_t byte) {
  static constexpr char kDigits[] = "0123456789abcdef";
  return {kDigits[byte >> 4], kDigits[byte & 15]};
}

gguf::Value u(ValueType t, std::uint64_t v) { return gguf::make_uint(t, v); }
gguf::Value i(ValueType t, std::int64_t v) { return gguf::make_int(t, v); }

// A writer with one value of every metadata type (and arrays of each), plus tensors.
gguf::Writer full_writer(std::size_t alignment = 32) {
  gguf::Writer w(alignment);
  w.set("general.architecture", gguf::make_string("test"));
  w.set("v.u8", u(ValueType::kUint8, 255));
  w.set("v.i8", i(ValueType::kInt8, -128));
  w.set("v.u16", u(ValueType::kUint16, 65535));
  w.set("v.i16", i(ValueType::kInt16, -32768));
  w.set("v.u32", gguf::make_uint32(4294967295u));
  w.set("v.i32", gguf::make_int32(-2147483647 - 1));
  w.set("v.u64", u(ValueType::kUint64, 18446744073709551615ull));
  w.set("v.i64", i(ValueType::kInt64, -9223372036854775807ll - 1));
  w.set("v.f32", gguf::make_float32(1.5f));
  w.set("v.f64", gguf::make_float64(-2.25e300));
  w.set("v.bool", gguf::make_bool(true));
  w.set("v.str", gguf::make_string(std::string("h\xC3\xA9llo\0x", 8)));
  w.set("v.empty", gguf::make_string(""));
  w.set("a.u8", gguf::make_array(ValueType::kUint8, {u(ValueType::kUint8, 1), u(ValueType::kUint8, 2)}));
  w.set("a.i8", gguf::make_array(ValueType::kInt8, {i(ValueType::kInt8, -1)}));
  w.set("a.u16", gguf::make_array(ValueType::kUint16, {u(ValueType::kUint16, 7)}));
  w.set("a.i16", gguf::make_array(ValueType::kInt16, {i(ValueType::kInt16, -7)}));
  w.set("a.u32", gguf::make_array(ValueType::kUint32, {gguf::make_uint32(9), gguf::make_uint32(10)}));
  w.set("a.i32", gguf::make_array(ValueType::kInt32, {gguf::make_int32(-9)}));
  w.set("a.u64", gguf::make_array(ValueType::kUint64, {u(ValueType::kUint64, 1ull << 40)}));
  w.set("a.i64", gguf::make_array(ValueType::kInt64, {i(ValueType::kInt64, -(1ll << 40))}));
  w.set("a.f32", gguf::make_array(ValueType::kFloat32, {gguf::make_float32(0.25f)}));
  w.set("a.f64", gguf::make_array(ValueType::kFloat64, {gguf::make_float64(0.1)}));
  w.set("a.bool", gguf::make_array(ValueType::kBool, {gguf::make_bool(false), gguf::make_bool(true)}));
  w.set("a.str", gguf::make_array(ValueType::kString, {gguf::make_string("x"), gguf::make_string("")}));
  w.set("a.empty", gguf::make_array(ValueType::kInt32, {}));
  w.set("a.nested",
        gguf::make_array(ValueType::kArray,
                         {gguf::make_array(ValueType::kString, {gguf::make_string("p")}),
                          gguf::make_array(ValueType::kString, {})}));
  std::mt19937 rng(7);
  // Every known ggml type, two rows of two blocks.
  for (std::uint32_t type = 0; type < 64; ++type) {
    const std::uint32_t block = gguf::ggml_block_size(type);
    if (block == 0) continue;
    const std::vector<std::uint64_t> dims = {2ull * block, 2};
    Bytes data(gguf::tensor_bytes(type, 4ull * block));
    for (auto& x : data) x = static_cast<std::uint8_t>(rng());
    w.add_tensor(std::string("t.") + std::string(gguf::ggml_type_name(type)), dims, type, data);
  }
  return w;
}

}  // namespace

TEST(Gguf, TensorBytes) {
  EXPECT_EQ(gguf::tensor_bytes(0, 10), 40u);
  EXPECT_EQ(gguf::tensor_bytes(1, 10), 20u);
  EXPECT_EQ(gguf::tensor_bytes(2, 64), 36u);     // q4_0
  EXPECT_EQ(gguf::tensor_bytes(8, 32), 34u);     // q8_0
  EXPECT_EQ(gguf::tensor_bytes(10, 256), 84u);   // q2_K
  EXPECT_EQ(gguf::tensor_bytes(11, 256), 110u);  // q3_K
  EXPECT_EQ(gguf::tensor_bytes(12, 512), 288u);  // q4_K
  EXPECT_EQ(gguf::tensor_bytes(13, 256), 176u);  // q5_K
  EXPECT_EQ(gguf::tensor_bytes(14, 256), 210u);  // q6_K
  EXPECT_EQ(gguf::tensor_bytes(15, 256), 292u);  // q8_K
  EXPECT_EQ(gguf::tensor_bytes(23, 256), 136u);  // iq4_xs
  EXPECT_EQ(gguf::tensor_bytes(30, 3), 6u);      // bf16
  EXPECT_EQ(gguf::tensor_bytes(28, 3), 24u);     // f64
  EXPECT_EQ(gguf::tensor_bytes(4, 32), 0u);      // removed q4_2: unknown
  EXPECT_EQ(gguf::tensor_bytes(1000, 32), 0u);
  expect_format_error([] { gguf::tensor_bytes(2, 33); }, {"33", "q4_0", "32"});
  EXPECT_EQ(gguf::ggml_type_name(12), "q4_K");
}

TEST(Gguf, RoundTripEveryType) {
  for (std::size_t alignment : {32u, 64u, 1u, 4096u}) {
    SCOPED_TRACE(alignment);
    const gguf::Writer w = full_writer(alignment);
    const Bytes bytes = w.to_bytes();
    const gguf::File f = gguf::File::parse(bytes, "rt.gguf");
    EXPECT_EQ(f.version(), 3u);
    EXPECT_EQ(f.alignment(), alignment);
    EXPECT_EQ(f.name(), "rt.gguf");
    EXPECT_EQ(f.at("general.architecture").as_string("k"), "test");
    EXPECT_EQ(f.at("v.u8").as_uint("k"), 255u);
    EXPECT_EQ(f.at("v.u8").type, ValueType::kUint8);
    EXPECT_EQ(f.at("v.i8").as_int("k"), -128);
    EXPECT_EQ(f.at("v.u16").as_uint("k"), 65535u);
    EXPECT_EQ(f.at("v.i16").as_int("k"), -32768);
    EXPECT_EQ(f.at("v.u32").as_uint("k"), 4294967295u);
    EXPECT_EQ(f.at("v.i32").as_int("k"), -2147483647 - 1);
    EXPECT_EQ(f.at("v.u64").as_uint("k"), 18446744073709551615ull);
    EXPECT_EQ(f.at("v.i64").as_int("k"), -9223372036854775807ll - 1);
    EXPECT_EQ(f.at("v.f32").as_float("k"), 1.5);
    EXPECT_EQ(f.at("v.f32").type, ValueType::kFloat32);
    EXPECT_EQ(f.at("v.f64").as_float("k"), -2.25e300);
    EXPECT_TRUE(f.at("v.bool").as_bool("k"));
    EXPECT_EQ(f.at("v.str").as_string("k"), std::string("h\xC3\xA9llo\0x", 8));
    EXPECT_EQ(f.at("v.empty").as_string("k"), "");
    EXPECT_EQ(f.at("a.u8").as_array("k").items.size(), 2u);
    EXPECT_EQ(f.at("a.u8").as_array("k").items[1].as_uint("k"), 2u);
    EXPECT_EQ(f.at("a.i8").as_array("k").items[0].as_int("k"), -1);
    EXPECT_EQ(f.at("a.u16").as_array("k").items[0].as_uint("k"), 7u);
    EXPECT_EQ(f.at("a.i16").as_array("k").items[0].as_int("k"), -7);
    EXPECT_EQ(f.at("a.u32").as_array("k").items[1].as_uint("k"), 10u);
    EXPECT_EQ(f.at("a.i32").as_array("k").items[0].as_int("k"), -9);
    EXPECT_EQ(f.at("a.u64").as_array("k").items[0].as_uint("k"), 1ull << 40);
    EXPECT_EQ(f.at("a.i64").as_array("k").items[0].as_int("k"), -(1ll << 40));
    EXPECT_EQ(f.at("a.f32").as_array("k").items[0].as_float("k"), 0.25);
    EXPECT_EQ(f.at("a.f64").as_array("k").items[0].as_float("k"), 0.1);
    EXPECT_FALSE(f.at("a.bool").as_array("k").items[0].as_bool("k"));
    EXPECT_EQ(f.at("a.str").as_array("k").items[0].as_string("k"), "x");
    EXPECT_EQ(f.at("a.str").as_array("k").element_type, ValueType::kString);
    EXPECT_TRUE(f.at("a.empty").as_array("k").items.empty());
    EXPECT_EQ(f.at("a.empty").as_array("k").element_type, ValueType::kInt32);
    const gguf::Array& nested = f.at("a.nested").as_array("k");
    ASSERT_EQ(nested.items.size(), 2u);
    EXPECT_EQ(nested.element_type, ValueType::kArray);
    EXPECT_EQ(nested.items[0].as_array("k").items[0].as_string("k"), "p");
    EXPECT_TRUE(nested.items[1].as_array("k").items.empty());
    EXPECT_EQ(f.find("missing"), nullptr);

    // Tensors: every known type, its bytes exactly as written, aligned in the file.
    std::mt19937 rng(7);
    std::size_t n_types = 0;
    for (std::uint32_t type = 0; type < 64; ++type) {
      const std::uint32_t block = gguf::ggml_block_size(type);
      if (block == 0) continue;
      ++n_types;
      const std::string name = std::string("t.") + std::string(gguf::ggml_type_name(type));
      Bytes expected(gguf::tensor_bytes(type, 4ull * block));
      for (auto& x : expected) x = static_cast<std::uint8_t>(rng());
      const gguf::TensorInfo* t = f.find_tensor(name);
      ASSERT_NE(t, nullptr) << name;
      EXPECT_EQ(t->type, type);
      EXPECT_EQ(t->dims, (std::vector<std::uint64_t>{2ull * block, 2}));
      EXPECT_EQ(t->n_bytes, expected.size());
      EXPECT_EQ(t->offset % alignment, 0u);
      EXPECT_EQ((f.data_offset() + t->offset) % alignment, 0u);
      const auto data = f.tensor_data(*t);
      EXPECT_EQ(Bytes(data.begin(), data.end()), expected) << name;
    }
    EXPECT_EQ(f.tensors().size(), n_types);
    EXPECT_GE(n_types, 33u);
  }
}

TEST(Gguf, WriterReplacesKeyInPlaceAndWritesFiles) {
  gguf::Writer w;
  w.set("a", gguf::make_uint32(1));
  w.set("b", gguf::make_uint32(2));
  w.set("a", gguf::make_string("one"));
  const auto dir = std::filesystem::temp_directory_path() / ("orchard_gguf_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto path = dir / "w.gguf";
  w.write(path);
  const gguf::File f = gguf::File::open(path);
  ASSERT_EQ(f.metadata().size(), 2u);
  EXPECT_EQ(f.at("a").as_string("a"), "one");
  EXPECT_EQ(f.name(), path.string());
  // Key order in the file is insertion order: "a" is still first.
  const Bytes bytes = w.to_bytes();
  EXPECT_EQ(std::string(bytes.begin() + 32, bytes.begin() + 33), "a");
  std::filesystem::remove_all(dir);
}

TEST(Gguf, WriterRejectsBadInput) {
  gguf::Writer w;
  EXPECT_THROW(w.add_tensor("x", {3}, 0, Bytes(8)), tensor::InputError);       // 12 bytes needed
  EXPECT_THROW(w.add_tensor("x", {16}, 2, Bytes(18)), tensor::InputError);     // not a whole block
  EXPECT_THROW(w.add_tensor("x", {4}, 4, Bytes(4)), tensor::InputError);       // removed type
  w.add_tensor("x", {2}, 0, Bytes(8));
  EXPECT_THROW(w.add_tensor("x", {2}, 0, Bytes(8)), tensor::InputError);       // duplicate
  EXPECT_THROW(gguf::Writer(48), tensor::InputError);
  gguf::Writer v;
  v.set("k", u(ValueType::kUint8, 256));
  EXPECT_THROW(v.to_bytes(), tensor::InputError);
  gguf::Writer a;
  a.set("k", gguf::make_array(ValueType::kInt32, {gguf::make_string("s")}));
  EXPECT_THROW(a.to_bytes(), tensor::InputError);
  gguf::Writer al(64);
  al.set("general.alignment", gguf::make_uint32(32));
  EXPECT_THROW(al.to_bytes(), tensor::InputError);
}

TEST(Gguf, ValueAccessorsCheckTypes) {
  gguf::Writer w;
  w.set("neg", gguf::make_int32(-5));
  w.set("big", u(ValueType::kUint64, 1ull << 63));
  w.set("s", gguf::make_string("text"));
  const Bytes bytes = w.to_bytes();
  const gguf::File f = gguf::File::parse(bytes);
  expect_format_error([&] { f.at("neg").as_uint("neg"); }, {"key 'neg'", "int32 -5"});
  expect_format_error([&] { f.at("big").as_int("big"); }, {"key 'big'"});
  expect_format_error([&] { f.at("s").as_bool("s"); }, {"key 's'", "\"text\""});
  expect_format_error([&] { f.at("s").as_array("s"); }, {"key 's'"});
  expect_format_error([&] { f.at("neg").as_string("neg"); }, {"key 'neg'"});
  expect_format_error([&] { f.at("absent"); }, {"absent", "missing"});
  EXPECT_EQ(f.at("neg").as_float("neg"), -5.0);
  EXPECT_EQ(f.at("big").as_uint("big"), 1ull << 63);
}

TEST(Gguf, OpenErrors) {
  EXPECT_THROW(gguf::File::open("/nonexistent/file.gguf"), tensor::IoError);
  EXPECT_THROW(gguf::File::open(std::filesystem::temp_directory_path()), tensor::IoError);
  try {
    gguf::File::open("/nonexistent/file.gguf");
  } catch (const tensor::IoError& e) {
    EXPECT_THAT(e.what(), HasSubstr("/nonexistent/file.gguf"));
  }
}

TEST(Gguf, WrongMagicAndVersion) {
  expect_parse_error({}, {"bad.gguf", "too short"});
  expect_parse_error({'G', 'G'}, {"too short"});
  Builder notgguf;
  notgguf.b = {'{', '"', 'a', '"', ':', '1', '}'};
  expect_parse_error(notgguf.b, {"bad.gguf offset 0", "bad magic", "not a GGUF file"});
  expect_parse_error(Builder().header(0, 0, 1).b, {"offset 4", "version 1 is not supported"});
  expect_parse_error(Builder().header(0, 0, 4).b, {"offset 4", "unsupported GGUF version 4"});
  expect_parse_error(Builder().header(0, 0, 0x03000000).b, {"big-endian"});
  EXPECT_EQ(gguf::File::parse(Builder().header(0, 0, 2).b).version(), 2u);
  EXPECT_EQ(gguf::File::parse(Builder().header(0, 0, 3).b).metadata().size(), 0u);
}

TEST(Gguf, CorruptCountsAndLengths) {
  // Counts far beyond what the file can hold are refused before anything is allocated.
  expect_parse_error(Builder().header(0, ~0ull).b, {"offset 16", "metadata count"});
  expect_parse_error(Builder().header(~0ull >> 1, 0).b, {"offset 8", "tensor count"});
  // A key whose length runs past the end.
  expect_parse_error(Builder().header(0, 1).put<std::uint64_t>(9999999).fill(16).b,
                     {"offset 24", "metadata key length 9999999 runs past the end of the file"});
  expect_parse_error(Builder().header(0, 1).put<std::uint64_t>(~0ull).fill(16).b, {"runs past the end"});
  // A string value whose length runs past the end.
  expect_parse_error(Builder().header(0, 1).str("k").put<std::uint32_t>(8).put<std::uint64_t>(1ull << 62).b,
                     {"string value length", "runs past the end"});
  // An array length beyond the file (each element needs its bytes).
  expect_parse_error(Builder()
                         .header(0, 1)
                         .str("k")
                         .put<std::uint32_t>(9)
                         .put<std::uint32_t>(6)
                         .put<std::uint64_t>(1ull << 61)
                         .b,
                     {"array length 2305843009213693952", "float32", "runs past the end"});
  expect_parse_error(Builder()
                         .header(0, 1)
                         .str("k")
                         .put<std::uint32_t>(9)
                         .put<std::uint32_t>(8)
                         .put<std::uint64_t>(3)
                         .put<std::uint64_t>(0)
                         .b,
                     {"array length 3", "string"});
  // Bad value types, bad bools, arrays nested without end.
  expect_parse_error(Builder().header(0, 1).str("k").put<std::uint32_t>(13).b,
                     {"key 'k'", "value type 13"});
  expect_parse_error(Builder().header(0, 1).str("k").put<std::uint32_t>(9).put<std::uint32_t>(77).b,
                     {"array element type 77"});
  expect_parse_error(Builder().header(0, 1).str("k").put<std::uint32_t>(7).put<std::uint8_t>(2).b,
                     {"bool value 2"});
  Builder deep;
  deep.header(0, 1).str("k").put<std::uint32_t>(9);
  for (int d = 0; d < 100; ++d) deep.put<std::uint32_t>(9).put<std::uint64_t>(1);
  deep.put<std::uint32_t>(0).put<std::uint64_t>(0);
  expect_parse_error(deep.b, {"nested deeper"});
  expect_parse_error(Builder().header(0, 1).str("").put<std::uint32_t>(0).put<std::uint8_t>(0).b,
                     {"key 0 is empty"});
}

TEST(Gguf, DuplicateKeysAndTensors) {
  expect_parse_error(Builder().header(0, 2).kv_u32("a.b", 1).kv_u32("a.b", 2).b,
                     {"duplicate metadata key 'a.b'"});
  Builder t;
  t.header(2, 0);
  for (int k = 0; k < 2; ++k) {
    t.str("w").put<std::uint32_t>(1).put<std::uint64_t>(1).put<std::uint32_t>(0).put<std::uint64_t>(0);
  }
  expect_parse_error(t.b, {"duplicate tensor name 'w'"});
}

TEST(Gguf, AlignmentKey) {
  expect_parse_error(Builder().header(0, 1).kv_u32("general.alignment", 0).b, {"not a power of two"});
  expect_parse_error(Builder().header(0, 1).kv_u32("general.alignment", 48).b, {"48", "power of two"});
  Builder wrong_type;
  wrong_type.header(0, 1).str("general.alignment").put<std::uint32_t>(8).str("32");
  expect_parse_error(wrong_type.b, {"general.alignment", "uint32"});
  EXPECT_EQ(gguf::File::parse(Builder().header(0, 1).kv_u32("general.alignment", 256).b).alignment(),
            256u);
}

TEST(Gguf, TensorInfoErrors) {
  auto one_tensor = [](std::uint32_t n_dims, std::vector<std::uint64_t> dims, std::uint32_t type,
                       std::uint64_t offset, std::size_t data_bytes) {
    Builder t;
    t.header(1, 0).str("w").put(n_dims);
    for (auto d : dims) t.put(d);
    t.put(type).put(offset).pad(32);
    t.b.resize(t.b.size() + data_bytes, 0);
    return t.b;
  };
  // Well formed: 4 f32 = 16 bytes.
  const gguf::File ok = gguf::File::parse(one_tensor(1, {4}, 0, 0, 16));
  EXPECT_EQ(ok.tensors().at(0).n_bytes, 16u);
  EXPECT_EQ(ok.tensor_data(ok.tensors().at(0)).size(), 16u);
  // Data out of bounds: one byte short, or an offset past the end.
  expect_parse_error(one_tensor(1, {4}, 0, 0, 15), {"tensor 'w'", "runs past the end"});
  expect_parse_error(one_tensor(1, {4}, 0, 1ull << 40, 16), {"tensor 'w'", "runs past the end"});
  expect_parse_error(one_tensor(1, {4}, 0, ~0ull - 31, 16), {"tensor 'w'"});
  // Misaligned offset, too many dims, element count overflow, partial blocks.
  expect_parse_error(one_tensor(1, {4}, 0, 4, 64), {"offset 4 is not a multiple of the alignment 32"});
  expect_parse_error(one_tensor(5, {1, 1, 1, 1, 1}, 0, 0, 4), {"5 dimensions"});
  expect_parse_error(one_tensor(2, {1ull << 40, 1ull << 40}, 0, 0, 4), {"overflows"});
  expect_parse_error(one_tensor(1, {33}, 8, 0, 64), {"q8_0", "33", "block size 32"});
  // Unknown type: n_bytes 0, file still parses.
  const gguf::File unknown = gguf::File::parse(one_tensor(1, {4}, 4, 0, 0));
  EXPECT_EQ(unknown.tensors().at(0).n_bytes, 0u);
  // Dims truncated.
  Builder cut;
  cut.header(1, 0).str("a-longer-tensor-name").put<std::uint32_t>(3).put<std::uint64_t>(4);
  expect_parse_error(cut.b, {"tensor dimension", "truncated"});
}

TEST(Gguf, TruncatedAtEveryCutPoint) {
  gguf::Writer w = full_writer();
  const Bytes bytes = w.to_bytes();
  // Every prefix shorter than the whole file is refused. (The last tensor's padding is not needed, so
  // only prefixes that cut real content must fail.)
  const gguf::File whole = gguf::File::parse(bytes);
  std::uint64_t end = 0;
  for (const auto& t : whole.tensors()) end = std::max(end, whole.data_offset() + t.offset + t.n_bytes);
  // Every cut through the header, metadata and tensor infos; every 61st through the tensor data.
  for (std::size_t cut = 0; cut < end; cut += cut < whole.data_offset() ? 1 : 61) {
    Bytes prefix(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(cut));
    try {
      gguf::File::parse(prefix, "cut.gguf");
      ADD_FAILURE() << "prefix of " << cut << " bytes parsed";
    } catch (const tensor::FormatError& e) {
      ASSERT_THAT(e.what(), HasSubstr("cut.gguf")) << cut;
    }
  }
}

TEST(Gguf, RandomCorruptionNeverCrashes) {
  const Bytes base = full_writer().to_bytes();
  std::mt19937 rng(42);
  int n_ok = 0, n_err = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    Bytes b = base;
    const int n_flips = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < n_flips; ++k) b[rng() % 2048 % b.size()] = static_cast<std::uint8_t>(rng());
    try {
      gguf::File::parse(b);
      ++n_ok;
    } catch (const tensor::FormatError&) {
      ++n_err;
    }
  }
  EXPECT_EQ(n_ok + n_err, 3000);
}

TEST(Gguf, RealVocabFilesParse) {
  ORCHARD_REQUIRE_SHARED_DATA("tokenizers/llama.cpp");
  struct Case {
    const char* file;
    const char* model;
    std::size_t n_tokens;
  };
  const Case cases[] = {
      {"ggml-vocab-llama-spm.gguf", "llama", 32000},   {"ggml-vocab-phi-3.gguf", "llama", 32064},
      {"ggml-vocab-gpt-2.gguf", "gpt2", 50257},        {"ggml-vocab-falcon.gguf", "gpt2", 65024},
      {"ggml-vocab-deepseek-coder.gguf", "gpt2", 32256}, {"ggml-vocab-bert-bge.gguf", "bert", 30522},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.file);
    const auto path = orchard::testing::shared_data(std::string("tokenizers/llama.cpp/") + c.file);
    const gguf::File f = gguf::File::open(path);
    EXPECT_GE(f.version(), 2u);
    EXPECT_EQ(f.at("tokenizer.ggml.model").as_string("tokenizer.ggml.model"), c.model);
    const auto& tokens = f.at("tokenizer.ggml.tokens").as_array("tokenizer.ggml.tokens");
    EXPECT_EQ(tokens.element_type, ValueType::kString);
    EXPECT_EQ(tokens.items.size(), c.n_tokens);
    if (const auto* types = f.find("tokenizer.ggml.token_type")) {
      EXPECT_EQ(types->as_array("tokenizer.ggml.token_type").items.size(), c.n_tokens);
    }
    // The same bytes through parse() give the same result.
    std::ifstream in(path, std::ios::binary);
    const Bytes bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const gguf::File g = gguf::File::parse(bytes);
    EXPECT_EQ(g.metadata().size(), f.metadata().size());
    // Cut points through the real file: each refused with a FormatError.
    for (std::size_t cut = 0; cut + 1 < bytes.size(); cut += bytes.size() / 13 + 1) {
      EXPECT_THROW(gguf::File::parse(std::span(bytes).first(cut)), tensor::FormatError) << cut;
    }
  }
}

// A file written by gguf-py (llama.cpp's Python writer): every metadata type, tensors of every type.
TEST(GgufPy, ReadsFilesWrittenByGgufPy) {
  const auto python = orchard::testing::source_dir() / ".venv/bin/python";
  if (!std::filesystem::exists(python)) GTEST_SKIP() << "no Python venv at " << python;
  const auto script = orchard::testing::source_dir() / "tests/tensor/gguf_py_writer.py";
  const auto dir = std::filesystem::temp_directory_path() / ("orchard_ggufpy_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto out_gguf = dir / "py.gguf";
  const auto out_json = dir / "py.json";
  const std::string cmd = "'" + python.string() + "' '" + script.string() + "' '" + out_gguf.string() +
                          "' '" + out_json.string() + "'";
  const int status = std::system(cmd.c_str());
  if (WIFEXITED(status) && WEXITSTATUS(status) == 77) GTEST_SKIP() << "gguf-py not importable in the venv";
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << cmd;

  const gguf::File f = gguf::File::open(out_gguf);
  std::ifstream in(out_json);
  const nlohmann::json expected = nlohmann::json::parse(in);
  EXPECT_EQ(f.version(), expected["version"].get<std::uint32_t>());
  EXPECT_EQ(f.alignment(), expected["alignment"].get<std::size_t>());
  EXPECT_EQ(f.metadata().size(), expected["metadata"].size());

  std::function<void(const gguf::Value&, ValueType, const nlohmann::json&, const std::string&)> check;
  check = [&](const gguf::Value& v, ValueType type, const nlohmann::json& want, const std::string& key) {
    ASSERT_EQ(v.type, type) << key;
    switch (type) {
      case ValueType::kUint8: case ValueType::kUint16: case ValueType::kUint32: case ValueType::kUint64:
        EXPECT_EQ(v.as_uint(key), want.get<std::uint64_t>()) << key;
        break;
      case ValueType::kInt8: case ValueType::kInt16: case ValueType::kInt32: case ValueType::kInt64:
        EXPECT_EQ(v.as_int(key), want.get<std::int64_t>()) << key;
        break;
      case ValueType::kFloat32: case ValueType::kFloat64:
        EXPECT_EQ(v.as_float(key), want.get<double>()) << key;
        break;
      case ValueType::kBool: EXPECT_EQ(v.as_bool(key), want.get<bool>()) << key; break;
      case ValueType::kString: EXPECT_EQ(v.as_string(key), want.get<std::string>()) << key; break;
      case ValueType::kArray: {
        const gguf::Array& a = v.as_array(key);
        ASSERT_EQ(a.items.size(), want.size()) << key;
        for (std::size_t k = 0; k < a.items.size(); ++k) {
          // Nested arrays hold int32 arrays (gguf-py's inference for Python ints).
          const ValueType inner = a.element_type;
          if (inner == ValueType::kArray) {
            const gguf::Array& sub = a.items[k].as_array(key);
            ASSERT_EQ(sub.items.size(), want[k].size()) << key;
            for (std::size_t m = 0; m < sub.items.size(); ++m) {
              check(sub.items[m], sub.element_type, want[k][m], key);
            }
          } else {
            check(a.items[k], inner, want[k], key);
          }
        }
        break;
      }
    }
  };
  for (const auto& [key, want] : expected["metadata"].items()) {
    SCOPED_TRACE(key);
    const gguf::Value* v = f.find(key);
    ASSERT_NE(v, nullptr) << key;
    check(*v, static_cast<ValueType>(want["type"].get<std::uint32_t>()), want["value"], key);
    if (want.contains("element_type")) {
      EXPECT_EQ(static_cast<std::uint32_t>(v->as_array(key).element_type),
                want["element_type"].get<std::uint32_t>());
    }
  }

  ASSERT_EQ(f.tensors().size(), expected["tensors"].size());
  for (const auto& t : expected["tensors"]) {
    const std::string name = t["name"].get<std::string>();
    SCOPED_TRACE(name);
    const gguf::TensorInfo* info = f.find_tensor(name);
    ASSERT_NE(info, nullptr);
    EXPECT_EQ(info->type, t["type"].get<std::uint32_t>());
    EXPECT_EQ(info->dims, t["dims"].get<std::vector<std::uint64_t>>());
    const std::string hex = t["hex"].get<std::string>();
    ASSERT_EQ(info->n_bytes, hex.size() / 2);
    const auto data = f.tensor_data(*info);
    std::string got;
    for (std::uint8_t byte : data) got += fmt_hex(byte);
    EXPECT_EQ(got, hex);
  }
  std::filesystem::remove_all(dir);
}
