// Every error path of ModelRunner: inconsistent batches (pie::Error naming the field, the logits left
// unwritten), a KV cache of the wrong shape, and models the runner cannot run (ModelError).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <limits>

#include "pie/error.h"
#include "pie/model.h"
#include "pie/runner.h"
#include "runner_test_util.h"

namespace pie::testing {
namespace {

using ::testing::HasSubstr;

// A valid two-sequence batch (a 20-token prefill and a decode row at position 4) that each test breaks.
struct BatchFixture {
  std::shared_ptr<const Model> model = load_hf_model(test_model_dir("llama"));
  ModelRunner runner{model, nullptr};
  KvCache kv = make_kv(runner, 8);
  std::vector<std::int32_t> tokens, qo{0, 20, 21}, lens{20, 5}, page_indptr{0, 2, 3}, pages{3, 1, 6}, rows{19, 20};
  std::vector<float> logits;
  BatchFixture() {
    for (int i = 0; i < 21; ++i) tokens.push_back(i * 7 % 256);
    logits.assign(2 * 256, std::numeric_limits<float>::quiet_NaN());
  }
  ForwardBatch batch() const { return {tokens, qo, lens, page_indptr, pages, rows}; }
  void expect_error(const std::string& needle) {
    try {
      runner.forward(batch(), kv, logits);
      ADD_FAILURE() << "no error, expected one containing '" << needle << "'";
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr(needle));
    }
    for (float x : logits) ASSERT_TRUE(std::isnan(x)) << "logits written before failing";
  }
};

TEST(RunnerErrorTest, ValidBatchRuns) {
  BatchFixture f;
  f.runner.forward(f.batch(), f.kv, f.logits);
  for (float x : f.logits) EXPECT_TRUE(std::isfinite(x));
}

TEST(RunnerErrorTest, EmptyQoIndptr) {
  BatchFixture f;
  f.qo.clear();
  f.expect_error("qo_indptr is empty");
}

TEST(RunnerErrorTest, SeqLensSize) {
  BatchFixture f;
  f.lens.push_back(3);
  f.expect_error("seq_lens has 3 entries for 2 sequences");
}

TEST(RunnerErrorTest, PageIndptrSize) {
  BatchFixture f;
  f.page_indptr.pop_back();
  f.expect_error("page_indptr has 2 entries for 2 sequences");
}

TEST(RunnerErrorTest, IndptrStarts) {
  BatchFixture f;
  f.qo[0] = 1;
  f.expect_error("qo_indptr[0] is 1");
  BatchFixture g;
  g.page_indptr[0] = 1;
  g.expect_error("page_indptr[0] is 1");
}

TEST(RunnerErrorTest, QoBackwards) {
  BatchFixture f;
  f.qo = {0, 2, 1};
  f.expect_error("sequence 1: qo_indptr goes backwards (2 then 1)");
}

TEST(RunnerErrorTest, MoreQueriesThanTokens) {
  BatchFixture f;
  f.lens[0] = 19;
  f.expect_error("sequence 0: 20 query tokens but seq_lens is 19");
}

TEST(RunnerErrorTest, PageTableDoesNotMatchLength) {
  BatchFixture f;
  f.lens[1] = 17;  // needs 2 pages, owns 1
  f.expect_error("sequence 1: 17 tokens need 2 pages, the page table gives 1");
}

TEST(RunnerErrorTest, TokensDisagreeWithQoIndptr) {
  BatchFixture f;
  f.tokens.push_back(1);
  f.expect_error("qo_indptr ends at 21 but the batch has 22 tokens");
}

TEST(RunnerErrorTest, PageIndicesTooShort) {
  BatchFixture f;
  f.pages.pop_back();
  f.expect_error("page_indptr ends at 3 but page_indices has 2 entries");
}

TEST(RunnerErrorTest, PageOutOfRange) {
  BatchFixture f;
  f.pages[2] = 8;
  f.expect_error("sequence 1: page table entry 0 is page 8, outside [0, 8)");
  BatchFixture g;
  g.pages[1] = -1;
  g.expect_error("sequence 0: page table entry 1 is page -1");
}

TEST(RunnerErrorTest, TokenOutOfRange) {
  BatchFixture f;
  f.tokens[5] = 256;
  f.expect_error("token 5 is id 256, outside [0, 256)");
  BatchFixture g;
  g.tokens[20] = -3;
  g.expect_error("token 20 is id -3");
}

TEST(RunnerErrorTest, LogitRowOutOfRange) {
  BatchFixture f;
  f.rows[1] = 21;
  f.expect_error("logit_rows[1] is 21, outside the batch's 21 tokens");
}

TEST(RunnerErrorTest, LogitsTooSmall) {
  BatchFixture f;
  f.logits.pop_back();
  f.expect_error("logits holds 511 floats; 2 rows x 256 vocab need 512");
}

TEST(RunnerErrorTest, LogitsKeptOnABackendThatSamplesOnTheHost) {
  BatchFixture f;
  try {
    f.runner.begin(f.batch(), f.kv, f.logits, /*logits_to_host=*/false);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("the cpu backend does not sample on the device"));
  }
  for (float x : f.logits) ASSERT_TRUE(std::isnan(x)) << "logits written";
}

TEST(RunnerErrorTest, KvCacheOfAnotherShape) {
  BatchFixture f;
  KvCacheConfig c = f.runner.kv_config(8);
  c.n_layer = 3;
  KvCache other(c);
  try {
    f.runner.forward(f.batch(), other, f.logits);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("the KV cache holds 3 layers x 2 KV heads x head dim 12; the model needs 2 x 2 x 12"));
  }
}

// Models the runner refuses: each is the llama test model with one thing broken.
void expect_model_error(const std::function<void(Model&)>& breakit, const std::string& needle) {
  auto m = std::make_shared<Model>(*load_hf_model(test_model_dir("llama")));
  breakit(*m);
  try {
    ModelRunner runner(m, nullptr);
    ADD_FAILURE() << "no error, expected one containing '" << needle << "'";
  } catch (const ModelError& e) {
    EXPECT_THAT(e.what(), HasSubstr(needle));
  }
}

TEST(RunnerErrorTest, UnrunnableModels) {
  try {
    ModelRunner runner(nullptr, nullptr);
    ADD_FAILURE() << "no error";
  } catch (const ModelError& e) {
    EXPECT_THAT(e.what(), HasSubstr("no model"));
  }
  expect_model_error([](Model& m) { m.weights.layers[1].wk = {}; }, "layer 1: wk is missing");
  expect_model_error([](Model& m) { m.weights.layers[0].w_up = m.weights.layers[0].w_up.slice(0, 0, 95); },
                     "layer 0: w_up is [95, 48] f32, expected [96, 48]");
  expect_model_error(
      [](Model& m) {
        const Weight& w = m.weights.output_norm;
        m.weights.output_norm = weight_view(w.data(), w.nbytes(), tensor::DType::f16, 0, 48);
      },
      "output_norm is [48] f16, expected f32");
  expect_model_error([](Model& m) { m.weights.layers.pop_back(); },
                     "the model has 1 layers of weights, its config says 2");
  expect_model_error([](Model& m) { m.config.qk_norm = true; }, "layer 0: q_norm is missing");
}

}  // namespace
}  // namespace pie::testing
