// nf4 against bitsandbytes (goldens recorded on its CPU path by tests/kernels/make_nf4_goldens.py): the
// tables, quantization byte for byte (codes, absmax, and the double-quantized absmax: codes, nested absmax,
// offset), dequantization of the double-quantized state bit for bit; and the typed errors.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "shared_data.h"
#include "kernels/error.h"
#include "kernels/matmul.h"
#include "kernels/nf4.h"
#include "kernels/quant.h"
#include "tensor/blocks.h"
#include "tensor/dtype.h"
#include "test_util.h"

namespace {

using tensor::DType;

std::vector<unsigned char> from_base64(const std::string& s) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::vector<unsigned char> out;
  std::uint32_t acc = 0;
  int bits = 0;
  for (char c : s) {
    const int v = value(c);
    if (v < 0) continue;  // '=' padding
    acc = (acc << 6) | static_cast<std::uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<unsigned char>((acc >> bits) & 0xFF));
    }
  }
  return out;
}

template <typename T>
std::vector<T> array_of(const nlohmann::json& j) {
  const std::vector<unsigned char> b = from_base64(j.get<std::string>());
  std::vector<T> out(b.size() / sizeof(T));
  std::memcpy(out.data(), b.data(), out.size() * sizeof(T));
  return out;
}

std::vector<std::uint32_t> bits(const std::vector<float>& v) {
  std::vector<std::uint32_t> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = std::bit_cast<std::uint32_t>(v[i]);
  return out;
}

nlohmann::json load_goldens() {
  std::ifstream in(orchard::testing::source_dir() / "tests/kernels/goldens/bnb_nf4.json");
  if (!in) throw std::runtime_error("tests/kernels/goldens/bnb_nf4.json is missing");
  return nlohmann::json::parse(in);
}

// make_nf4_goldens.py's test_tensor, operation for operation in float32.
std::vector<float> test_tensor(std::int64_t rows, std::int64_t cols) {
  const std::int64_t n = rows * cols;
  std::vector<float> x(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    std::uint32_t h = static_cast<std::uint32_t>(static_cast<std::uint64_t>(i) * 2654435761ull);
    h ^= h >> 15;
    h = static_cast<std::uint32_t>(static_cast<std::uint64_t>(h) * 2246822519ull);
    h ^= h >> 13;
    const int u = static_cast<int>(h & 1023) + static_cast<int>((h >> 10) & 1023) + static_cast<int>((h >> 20) & 1023) - 1534;
    const float scale = 0.001f * (1.0f + static_cast<float>((i / cols) % 7));
    x[i] = static_cast<float>(u) * scale;
    if (i % 97 == 0) x[i] = x[i] * 9.0f;
  }
  std::fill(x.begin() + 5 * 64, x.begin() + 6 * 64, 0.0f);
  std::fill(x.begin() + 9 * 64, x.begin() + 10 * 64, 0.25f);
  const std::array<float, 16>& l = kernels::nf4_levels();
  float* b = x.data() + 13 * 64;
  std::fill(b, b + 64, 0.0f);
  b[0] = 1.0f;
  for (int k = 0; k < 15; ++k) {
    const float mid = (l[k] + l[k + 1]) / 2.0f;
    b[1 + k] = mid;
    b[16 + k] = std::nextafter(mid, 2.0f);
  }
  return x;
}

class Nf4Golden : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { goldens_ = new nlohmann::json(load_goldens()); }
  static void TearDownTestSuite() {
    delete goldens_;
    goldens_ = nullptr;
  }
  static const nlohmann::json& g() { return *goldens_; }
  static std::int64_t n() { return g()["rows"].get<std::int64_t>() * g()["cols"].get<std::int64_t>(); }
  static nlohmann::json* goldens_;
};
nlohmann::json* Nf4Golden::goldens_ = nullptr;

TEST_F(Nf4Golden, TablesAreBitsandbytes) {
  const std::vector<float> levels = array_of<float>(g()["levels"]);
  const std::vector<float> map = array_of<float>(g()["dynamic_map"]);
  EXPECT_EQ(bits(levels), bits({kernels::nf4_levels().begin(), kernels::nf4_levels().end()}));
  EXPECT_EQ(bits(map), bits({kernels::nf4_dynamic_map().begin(), kernels::nf4_dynamic_map().end()}));
  EXPECT_EQ(bits(array_of<float>(g()["nested_quant_map"])), bits(map));
}

TEST_F(Nf4Golden, QuantizationIsByteIdenticalToBitsandbytes) {
  const std::vector<float> x = test_tensor(g()["rows"], g()["cols"]);
  // Row by row (Orchard's rows are whole blocks, so bitsandbytes' flat blocks are the same blocks).
  const std::int64_t cols = g()["cols"];
  const std::size_t row = tensor::row_bytes(DType::nf4, cols);
  std::vector<unsigned char> blocks(row * static_cast<std::size_t>(g()["rows"].get<std::int64_t>()), 0xEE);
  for (std::int64_t r = 0; r < g()["rows"].get<std::int64_t>(); ++r) {
    kernels::quantize_row(DType::nf4, x.data() + r * cols, blocks.data() + static_cast<std::size_t>(r) * row, cols);
  }
  std::vector<std::uint8_t> packed(static_cast<std::size_t>(n() / 2));
  std::vector<float> absmax(static_cast<std::size_t>(n() / 64));
  kernels::nf4_bnb_from_blocks(blocks.data(), n(), packed.data(), absmax.data());
  const std::vector<std::uint8_t> want_packed = array_of<std::uint8_t>(g()["packed"]);
  ASSERT_EQ(packed.size(), want_packed.size());
  for (std::size_t i = 0; i < packed.size(); ++i) {
    ASSERT_EQ(packed[i], want_packed[i]) << "byte " << i << " (block " << i / 32 << ")";
  }
  EXPECT_EQ(bits(absmax), bits(array_of<float>(g()["absmax"])));

  // Double quantization of those absmax.
  const kernels::Nf4NestedAbsmax nested = kernels::nf4_compress_absmax(absmax);
  EXPECT_EQ(std::bit_cast<std::uint32_t>(nested.offset), bits(array_of<float>(g()["offset"]))[0]);
  EXPECT_EQ(bits(nested.nested_absmax), bits(array_of<float>(g()["nested_absmax"])));
  EXPECT_EQ(nested.codes, array_of<std::uint8_t>(g()["nested_codes"]));
}

TEST_F(Nf4Golden, DequantizationOfTheDoubleQuantizedStateIsBitExact) {
  const std::vector<std::uint8_t> codes = array_of<std::uint8_t>(g()["nested_codes"]);
  std::vector<float> absmax(codes.size(), std::nanf(""));
  kernels::nf4_decompress_absmax(codes, array_of<float>(g()["nested_absmax"]), array_of<float>(g()["nested_quant_map"]),
                                 array_of<float>(g()["offset"])[0], g()["nested_blocksize"], absmax);
  std::vector<unsigned char> blocks(tensor::row_bytes(DType::nf4, n()));
  kernels::nf4_blocks_from_bnb(array_of<std::uint8_t>(g()["packed"]).data(), absmax.data(), n(), blocks.data());
  std::vector<float> y(static_cast<std::size_t>(n()), std::nanf(""));
  kernels::dequantize_row(DType::nf4, blocks.data(), y.data(), n());
  const std::vector<std::uint32_t> want = bits(array_of<float>(g()["dequantized"])), got = bits(y);
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], want[i]) << "element " << i;
}

TEST(Nf4, LayoutRoundTripsAndCodesFollowBucketize) {
  // The first element in the high nibble: blocks -> bitsandbytes' layout -> blocks is the identity.
  std::vector<float> x(128);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 16) - 7.5f;
  std::vector<unsigned char> blocks(tensor::row_bytes(DType::nf4, 128)), again(blocks.size());
  kernels::quantize_row_ref(DType::nf4, x.data(), blocks.data(), 128);
  const auto* b = reinterpret_cast<const tensor::BlockNf4*>(blocks.data());
  EXPECT_EQ(b[0].absmax, 7.5f);
  EXPECT_EQ(b[0].qs[0] >> 4, 0);  // -7.5 / 7.5 = -1: level 0, the first element
  std::vector<std::uint8_t> packed(64);
  std::vector<float> absmax(2);
  kernels::nf4_bnb_from_blocks(blocks.data(), 128, packed.data(), absmax.data());
  kernels::nf4_blocks_from_bnb(packed.data(), absmax.data(), 128, again.data());
  EXPECT_EQ(blocks, again);
  EXPECT_EQ(kernels::nf4_code(-1.0f), 0);
  EXPECT_EQ(kernels::nf4_code(0.0f), 7);
  EXPECT_EQ(kernels::nf4_code(1.0f), 15);
}

// The AVX2 and AVX-512 products emulate the reference's 16 lanes: the same bits on every ISA, including
// blocks of zeros, the extreme codes and absmax of both signs' extremes.
TEST(Nf4, ProductsAreBitIdenticalToTheReferenceOnEveryIsa) {
  for (std::int64_t n : {64, 128, 576, 2048}) {
    for (std::uint32_t seed = 1; seed <= 3; ++seed) {
      std::vector<float> w = kernels::testing::random_floats(n, seed, 0.05f);
      if (seed == 2) std::fill(w.begin(), w.begin() + 64, 0.0f);
      if (seed == 3) {
        for (std::int64_t i = 0; i < n; ++i) w[i] = (i % 3 == 0) ? -1e3f : (i % 3 == 1 ? 1e3f : 1e-3f);
      }
      const std::vector<float> x = kernels::testing::random_floats(n, seed + 50);
      std::vector<unsigned char> q(tensor::row_bytes(DType::nf4, n));
      kernels::quantize_row_ref(DType::nf4, w.data(), q.data(), n);
      const float want = kernels::vec_dot_ref(DType::nf4, n, q.data(), x.data());
      double exact = 0;
      std::vector<float> wd(n);
      kernels::dequantize_row_ref(DType::nf4, q.data(), wd.data(), n);
      double scale = 0;
      for (std::int64_t i = 0; i < n; ++i) {
        exact += static_cast<double>(wd[i]) * x[i];
        scale += std::fabs(static_cast<double>(wd[i]) * x[i]);
      }
      EXPECT_LT(std::fabs(want - exact), 1e-5 * scale + 1e-30) << "n " << n << " seed " << seed;
      for (kernels::Isa isa : kernels::available_isas()) {
        const float got = kernels::vec_dot(DType::nf4, n, q.data(), x.data(), isa);
        EXPECT_EQ(std::bit_cast<std::uint32_t>(got), std::bit_cast<std::uint32_t>(want))
            << kernels::isa_name(isa) << " n " << n << " seed " << seed << ": " << got << " vs " << want;
      }
    }
  }
}

TEST(Nf4, ErrorsAreTyped) {
  std::vector<float> x(100);
  std::vector<unsigned char> y(4096);
  EXPECT_THROW(kernels::quantize_row_ref(DType::nf4, x.data(), y.data(), 100), kernels::ShapeError);
  EXPECT_THROW(kernels::nf4_blocks_from_bnb(y.data(), x.data(), 65, y.data()), kernels::ShapeError);
  EXPECT_THROW(kernels::nf4_bnb_from_blocks(y.data(), 63, y.data(), x.data()), kernels::ShapeError);
  EXPECT_THROW(kernels::nf4_compress_absmax({}), kernels::ShapeError);
  for (float bad : {std::nanf(""), std::numeric_limits<float>::infinity(), -1.0f}) {
    const std::vector<float> absmax = {1.0f, bad, 2.0f};
    EXPECT_THROW(kernels::nf4_compress_absmax(absmax), kernels::ShapeError) << bad;
  }
  const std::vector<std::uint8_t> codes(300);
  std::vector<float> nested(2), map(256), out(300);
  EXPECT_NO_THROW(kernels::nf4_decompress_absmax(codes, nested, map, 0.0f, 256, out));
  EXPECT_THROW(kernels::nf4_decompress_absmax(codes, std::vector<float>(1), map, 0.0f, 256, out), kernels::ShapeError);
  EXPECT_THROW(kernels::nf4_decompress_absmax(codes, nested, std::vector<float>(16), 0.0f, 256, out), kernels::ShapeError);
  EXPECT_THROW(kernels::nf4_decompress_absmax(codes, nested, map, 0.0f, 0, out), kernels::ShapeError);
  std::vector<float> short_out(299);
  EXPECT_THROW(kernels::nf4_decompress_absmax(codes, nested, map, 0.0f, 256, short_out), kernels::ShapeError);
}

}  // namespace
