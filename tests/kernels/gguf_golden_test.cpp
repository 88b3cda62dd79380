// Bit-exactness against gguf-py (the `gguf` package's numpy quants, which follow ggml's reference code):
// our quantization of known inputs must equal gguf-py's bytes, and our dequantization of gguf-py's (or
// random) blocks must equal gguf-py's floats, bit for bit. Goldens: tests/kernels/make_quant_goldens.py.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kernels/quant.h"
#include "shared_data.h"
#include "tensor/dtype.h"

namespace {

std::vector<unsigned char> from_hex(const std::string& h) {
  std::vector<unsigned char> out(h.size() / 2);
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<unsigned char>(std::stoi(h.substr(2 * i, 2), nullptr, 16));
  return out;
}

std::vector<float> floats_from_hex(const std::string& h) {
  const std::vector<unsigned char> b = from_hex(h);
  std::vector<float> f(b.size() / 4);
  std::memcpy(f.data(), b.data(), b.size());
  return f;
}

nlohmann::json load_goldens() {
  const auto path = orchard::testing::source_dir() / "tests/kernels/goldens/gguf_quants.json";
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path.string());
  return nlohmann::json::parse(in);
}

class GgufGolden : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { goldens_ = new nlohmann::json(load_goldens()); }
  static void TearDownTestSuite() {
    delete goldens_;
    goldens_ = nullptr;
  }
  static nlohmann::json* goldens_;
};
nlohmann::json* GgufGolden::goldens_ = nullptr;

TEST_F(GgufGolden, QuantizeMatchesGgufPyByteForByte) {
  int checked = 0;
  for (const auto& c : (*goldens_)["cases"]) {
    if (c["kind"] != "quantize") continue;
    const tensor::DType t = tensor::dtype_from_name(c["type"].get<std::string>());
    const std::int64_t n = c["n"];
    const std::vector<float> x = floats_from_hex((*goldens_)["inputs"][c["input"].get<int>()]);
    const std::vector<unsigned char> want = from_hex(c["bytes"]);
    for (kernels::Isa isa : kernels::available_isas()) {
      std::vector<unsigned char> got(tensor::row_bytes(t, n), 0xAB);
      kernels::quantize_row(t, x.data(), got.data(), n, isa);
      ASSERT_EQ(got, want) << c["type"] << " input " << c["input"] << " isa " << kernels::isa_name(isa);
    }
    ++checked;
  }
  EXPECT_EQ(checked, 28);  // 7 types x 4 inputs
}

TEST_F(GgufGolden, DequantizeMatchesGgufPyBitForBit) {
  int checked = 0;
  for (const auto& c : (*goldens_)["cases"]) {
    const tensor::DType t = tensor::dtype_from_name(c["type"].get<std::string>());
    const std::int64_t n = c["n"];
    const std::vector<unsigned char> bytes = from_hex(c["bytes"]);
    const std::vector<float> want = floats_from_hex(c["dequantized"]);
    std::vector<float> got(static_cast<std::size_t>(n));
    kernels::dequantize_row(t, bytes.data(), got.data(), n);
    ASSERT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * sizeof(float)))
        << c["kind"] << " " << c["type"];
    ++checked;
  }
  EXPECT_EQ(checked, 38);
}

}  // namespace
