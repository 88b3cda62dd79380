// The CPU backend's upload repacks the layers' q4_1 projections into the layout of the CPU's fastest
// kernels (kernels::preferred_layout) and its products read them as such: on the default model, each
// projection of a layer through a repacking backend matches the same projection through one that keeps the
// file's layout (ORCHARD_CPU_REPACK=0), the repacked weights are buffers of the upload's own, and an upload
// outlives its backend.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <memory>
#include <random>
#include <vector>

#include "default_model.h"
#include "kernels/matmul.h"
#include "pie/backend.h"
#include "pie/model.h"

namespace pie::testing {
namespace {

std::unique_ptr<Backend> cpu_backend(bool repack) {
  if (repack) {
    unsetenv("ORCHARD_CPU_REPACK");
  } else {
    setenv("ORCHARD_CPU_REPACK", "0", 1);
  }
  auto b = make_cpu_backend(2);
  unsetenv("ORCHARD_CPU_REPACK");
  return b;
}

TEST(CpuWeightLayout, RepackedProjectionsMatchThePlainOnes) {
  ORCHARD_REQUIRE_DEFAULT_MODEL();
  const std::shared_ptr<const Model> model = load_model(orchard::testing::default_model_path());
  ASSERT_EQ(model->weights.layers.at(0).wq.dtype(), tensor::DType::q4_1);
  const bool repacks = kernels::preferred_layout(tensor::DType::q4_1) != kernels::WeightLayout::plain;
  auto plain_backend = cpu_backend(false);
  auto fast_backend = cpu_backend(true);
  const auto plain = plain_backend->upload(model);
  auto fast = fast_backend->upload(model);
  // The plain upload views the model's bytes; the repacking one has buffers of its own for the layers'
  // projections only (the embedding stays where it is).
  EXPECT_EQ(plain->layers.at(0).wq.data(), model->weights.layers.at(0).wq.data());
  EXPECT_EQ(fast->token_embd.data(), model->weights.token_embd.data());
  EXPECT_EQ(fast->layers.at(0).attn_norm.data(), model->weights.layers.at(0).attn_norm.data());
  if (repacks) {
    EXPECT_NE(fast->layers.at(0).w_down.data(), model->weights.layers.at(0).w_down.data());
  } else {
    EXPECT_EQ(fast->layers.at(0).w_down.data(), model->weights.layers.at(0).w_down.data());
  }
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const std::size_t last = model->weights.layers.size() - 1;
  for (const std::size_t layer : {std::size_t{0}, last}) {
    const LayerWeights& a = plain->layers.at(layer);
    const LayerWeights& b = fast->layers.at(layer);
    const std::pair<const Weight*, const Weight*> pairs[] = {{&a.wq, &b.wq}, {&a.wk, &b.wk}, {&a.wv, &b.wv},
                                                             {&a.wo, &b.wo}, {&a.w_gate, &b.w_gate},
                                                             {&a.w_up, &b.w_up}, {&a.w_down, &b.w_down}};
    for (const auto& [wa, wb] : pairs) {
      const std::int64_t n_out = wa->dim(0), n_in = wa->dim(1);
      for (const std::int64_t n_rows : {1, 3}) {
        std::vector<float> x(static_cast<std::size_t>(n_rows * n_in));
        for (float& v : x) v = dist(rng);
        std::vector<float> ya(static_cast<std::size_t>(n_rows * n_out), std::nanf(""));
        std::vector<float> yb = ya;
        const Rows in{x.data(), n_rows, n_in};
        Projection pa, pb;
        pa.weight = wa;
        pa.out = {ya.data(), n_rows, n_out};
        pb.weight = wb;
        pb.out = {yb.data(), n_rows, n_out};
        plain_backend->project(in, {&pa, 1});
        fast_backend->project(in, {&pb, 1});
        double scale = 0, err = 0;
        for (std::size_t i = 0; i < ya.size(); ++i) {
          scale = std::max(scale, static_cast<double>(std::abs(ya[i])));
          err = std::max(err, static_cast<double>(std::abs(ya[i] - yb[i])));  // NaN fails below
        }
        ASSERT_GT(scale, 0.0);
        ASSERT_LT(err / scale, 1e-4) << "layer " << layer << " [" << n_out << ", " << n_in << "] rows " << n_rows;
        for (const float v : yb) ASSERT_TRUE(std::isfinite(v));
      }
    }
  }
  // The upload keeps its buffers after its backend is gone, and lets them go after it.
  fast_backend.reset();
  EXPECT_EQ(fast->layers.at(0).wq.dim(1), model->weights.layers.at(0).wq.dim(1));
  fast.reset();
}

}  // namespace
}  // namespace pie::testing
