#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "tensor/error.h"
#include "tensor/tensor.h"

namespace {

using tensor::DType;
using tensor::Shape;
using tensor::Tensor;

TEST(Tensor, DenseStridesAndBytes) {
  const Tensor t = Tensor::empty(DType::q4_K, Shape{3, 512});
  EXPECT_EQ(t.nbytes(), 3u * 2u * 144u);
  EXPECT_EQ(t.strides().bytes[1], 144);
  EXPECT_EQ(t.strides().bytes[0], 288);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.n_rows(), 3);
  EXPECT_EQ(t.row(2) - t.row(0), 576);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(t.data()) % 64, 0u);
  EXPECT_THROW(t.row(3), tensor::ShapeError);
}

TEST(Tensor, ViewsSlicesAndReshapes) {
  Tensor t = Tensor::empty(DType::f32, Shape{4, 6});
  for (int i = 0; i < 24; ++i) t.data_as<float>()[i] = static_cast<float>(i);
  const Tensor rows = t.slice(0, 1, 3);
  EXPECT_EQ(rows.shape(), (Shape{2, 6}));
  EXPECT_EQ(rows.data_as<float>()[0], 6.0f);
  const Tensor cols = t.slice(1, 2, 4);
  EXPECT_FALSE(cols.is_contiguous());
  EXPECT_EQ(reinterpret_cast<float*>(cols.row(1))[1], 9.0f);
  EXPECT_THROW(cols.reshape(Shape{4, 2}), tensor::ShapeError);
  EXPECT_EQ(t.reshape(Shape{2, 12}).shape()[1], 12);
  EXPECT_THROW(t.reshape(Shape{5, 5}), tensor::ShapeError);
  EXPECT_THROW(t.slice(1, 3, 7), tensor::ShapeError);
  const Tensor q = Tensor::empty(DType::q8_0, Shape{2, 64});
  EXPECT_THROW(q.slice(1, 16, 64), tensor::ShapeError);
  EXPECT_EQ(q.slice(1, 32, 64).data() - q.data(), 34);
}

TEST(Tensor, ViewOutsideTheBufferThrows) {
  const tensor::Buffer b = tensor::Buffer::allocate(100);
  EXPECT_NO_THROW(Tensor::view(b, 0, DType::f32, Shape{25}));
  EXPECT_THROW(Tensor::view(b, 4, DType::f32, Shape{25}), tensor::ShapeError);
  EXPECT_THROW(Tensor::view(b, 0, DType::q4_0, Shape{33}), tensor::ShapeError);
  EXPECT_THROW(Shape({1, 2, 3, 4, 5}), tensor::ShapeError);
  EXPECT_THROW(Shape({-1}), tensor::ShapeError);
  EXPECT_THROW(tensor::Buffer::allocate(16, tensor::Device::cuda), tensor::IoError);
  EXPECT_THROW(tensor::Buffer::allocate(16, tensor::Device::cpu, 12), tensor::IoError);
}

TEST(Tensor, MappedFilesAreUsedInPlace) {
  const auto path = std::filesystem::temp_directory_path() / "orchard_tensor_map_test.bin";
  {
    std::ofstream out(path, std::ios::binary);
    for (int i = 0; i < 256; ++i) out.put(static_cast<char>(i));
  }
  const tensor::Buffer b = tensor::Buffer::map_file(path);
  EXPECT_TRUE(b.is_mapped());
  EXPECT_FALSE(b.writable());
  EXPECT_EQ(b.size(), 256u);
  const Tensor t = Tensor::view(b, 32, DType::q8_0, Shape{2, 32});  // 68 bytes from offset 32
  EXPECT_EQ(static_cast<unsigned char>(t.data()[0]), 32);
  EXPECT_EQ(t.data(), b.data() + 32);  // a view, not a copy
  std::filesystem::remove(path);
  try {
    tensor::Buffer::map_file(path);
    FAIL();
  } catch (const tensor::IoError& e) {
    EXPECT_NE(std::string(e.what()).find("orchard_tensor_map_test.bin"), std::string::npos);
  }
}

}  // namespace
