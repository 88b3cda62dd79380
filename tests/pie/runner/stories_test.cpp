// A real pretrained model end to end: stories260K (llama2.c checkpoint, head dim 8, GQA 8:4, GPT-J RoPE)
// run greedily for 200 tokens from BOS by ModelRunner over a KvCache gives, decoded, exactly the text
// llama2.c's reference implementation prints.
#include <gtest/gtest.h>
#include <tensor/thread_pool.h>

#include <fstream>
#include <sstream>

#include "pie/model.h"
#include "pie/runner.h"
#include "runner_test_util.h"
#include "shared_data.h"

namespace pie::testing {
namespace {

std::string greedy_text(tensor::ThreadPool* pool, tensor::DType kv_dtype) {
  const auto model = load_llama2c_model(orchard::testing::shared_data("models/stories260K/stories260K.bin"));
  EXPECT_NE(model->tokenizer, nullptr);
  ModelRunner runner(model, pool);
  KvCache kv = make_kv(runner, 16, kv_dtype);
  // llama2.c: BOS (1) at position 0, then 200 greedy steps; a sampled BOS ends the text.
  const std::vector<std::int32_t> generated = greedy(runner, kv, {1}, 200);
  std::vector<std::int32_t> ids;
  for (std::int32_t id : generated) {
    if (id == 1) break;
    ids.push_back(id);
  }
  return model->tokenizer->decode(ids);
}

std::string expected() {
  std::ifstream in(orchard::testing::shared_data("models/stories260K/expected-greedy-200.txt"), std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(StoriesTest, Greedy200MatchesReference) {
  ORCHARD_REQUIRE_SHARED_DATA("models/stories260K/stories260K.bin");
  EXPECT_EQ(greedy_text(nullptr, tensor::DType::f32), expected());
}

TEST(StoriesTest, Greedy200OnThreadPool) {
  ORCHARD_REQUIRE_SHARED_DATA("models/stories260K/stories260K.bin");
  tensor::ThreadPool pool(2);
  EXPECT_EQ(greedy_text(&pool, tensor::DType::f32), expected());
}

}  // namespace
}  // namespace pie::testing
