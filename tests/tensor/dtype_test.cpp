#include <gtest/gtest.h>

#include "tensor/blocks.h"
#include "tensor/dtype.h"
#include "tensor/error.h"

namespace {

using tensor::DType;

TEST(DType, GgmlIdsBlockSizesAndBytesMatchGgml) {
  struct Want {
    DType t;
    std::uint32_t id;
    std::int64_t block;
    std::size_t bytes;
  };
  // ggml.h enum ggml_type and ggml-common.h block sizes.
  const Want want[] = {{DType::f32, 0, 1, 4},      {DType::f16, 1, 1, 2},      {DType::bf16, 30, 1, 2},
                       {DType::q4_0, 2, 32, 18},   {DType::q4_1, 3, 32, 20},   {DType::q5_0, 6, 32, 22},
                       {DType::q5_1, 7, 32, 24},   {DType::q8_0, 8, 32, 34},   {DType::q2_K, 10, 256, 84},
                       {DType::q3_K, 11, 256, 110}, {DType::q4_K, 12, 256, 144}, {DType::q5_K, 13, 256, 176},
                       {DType::q6_K, 14, 256, 210}, {DType::q8_K, 15, 256, 292},
                       {DType::nf4, tensor::kGgmlTypeNf4, 64, 36}};
  ASSERT_EQ(tensor::all_dtypes().size(), std::size(want));
  for (const Want& w : want) {
    EXPECT_EQ(tensor::dtype_info(w.t).ggml_type, w.id) << tensor::dtype_name(w.t);
    EXPECT_EQ(tensor::block_size(w.t), w.block) << tensor::dtype_name(w.t);
    EXPECT_EQ(tensor::block_bytes(w.t), w.bytes) << tensor::dtype_name(w.t);
    EXPECT_EQ(tensor::dtype_from_ggml(w.id), w.t);
    EXPECT_EQ(tensor::dtype_from_name(tensor::dtype_name(w.t)), w.t);
  }
  EXPECT_EQ(sizeof(tensor::BlockQ4_K), tensor::block_bytes(DType::q4_K));
}

TEST(DType, RowBytes) {
  EXPECT_EQ(tensor::row_bytes(DType::q4_K, 4096), 16u * 144u);
  EXPECT_EQ(tensor::row_bytes(DType::f16, 7), 14u);
  EXPECT_THROW(tensor::row_bytes(DType::q4_0, 33), tensor::ShapeError);
  EXPECT_THROW(tensor::row_bytes(DType::f32, -1), tensor::ShapeError);
}

TEST(DType, UnknownIdsAndNamesThrow) {
  EXPECT_FALSE(tensor::dtype_from_ggml(9).has_value());  // Q8_1: not a storage type here
  EXPECT_FALSE(tensor::dtype_from_ggml(16).has_value());  // IQ2_XXS
  try {
    tensor::dtype_from_ggml_checked(9999);
    FAIL();
  } catch (const tensor::DTypeError& e) {
    EXPECT_NE(std::string(e.what()).find("9999"), std::string::npos);
  }
  EXPECT_EQ(tensor::dtype_from_name("Q4_K"), DType::q4_K);
  EXPECT_THROW(tensor::dtype_from_name("q4_2"), tensor::DTypeError);
}

}  // namespace
