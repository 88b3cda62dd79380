// The forward pass against transformers: for each committed test model (llama with llama3 RoPE scaling,
// mistral with a sliding window shorter than the prompt, qwen2 with q/k/v biases, qwen3 with q/k norms and
// head_dim != hidden / heads), the logits of the prompt's last 16 positions match transformers' within
// 1e-4 relative error (max |ours - theirs| / max |theirs| over those logits) and the 32 greedy tokens
// after the prompt are the same, with f32 and f16 KV caches, on one thread and on a pool.
#include <gtest/gtest.h>
#include <tensor/thread_pool.h>

#include "pie/model.h"
#include "pie/runner.h"
#include "runner_test_util.h"

namespace pie::testing {
namespace {

constexpr double kLogitTolerance = 1e-4;

class GoldenTest : public ::testing::TestWithParam<std::string> {};

void check_model(const std::string& name, tensor::ThreadPool* pool, tensor::DType kv_dtype) {
  const Golden g = load_golden(name);
  ModelRunner runner(load_hf_model(test_model_dir(name)), pool);
  KvCache kv = make_kv(runner, 16, kv_dtype);

  Seq s;
  s.id = kv.create();
  s.tokens = g.prompt;
  auto logits = run_step(runner, kv, {{&s, static_cast<std::int32_t>(g.prompt.size())}});
  const double tol = kv_dtype == tensor::DType::f16 ? 1e-2 : kLogitTolerance;
  for (std::size_t i = 0; i < g.logit_positions.size(); ++i) {
    const auto& ours = logits[0][static_cast<std::size_t>(g.logit_positions[i])];
    EXPECT_LE(relative_error(ours, g.logits[i]), tol)
        << name << " position " << g.logit_positions[i] << " kv " << tensor::dtype_name(kv_dtype);
  }
  kv.release(s.id);
  if (kv_dtype == tensor::DType::f32) {
    EXPECT_EQ(greedy(runner, kv, g.prompt, static_cast<std::int32_t>(g.greedy.size())), g.greedy) << name;
  }
}

TEST_P(GoldenTest, LogitsAndGreedyMatchTransformers) {
  check_model(GetParam(), nullptr, tensor::DType::f32);
}

TEST_P(GoldenTest, OnThreadPool) {
  tensor::ThreadPool pool(3);
  check_model(GetParam(), &pool, tensor::DType::f32);
}

TEST_P(GoldenTest, F16KvCache) {
  check_model(GetParam(), nullptr, tensor::DType::f16);
}

INSTANTIATE_TEST_SUITE_P(Models, GoldenTest, ::testing::Values("llama", "mistral", "qwen2", "qwen3"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace pie::testing
