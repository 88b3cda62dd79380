// The Backend seam's composed operations on the CPU: add_rms_norm's default (add, then rms_norm) gives what
// the two calls give, bit for bit, and the fault-injecting wrapper (a ForwardingBackend) hands add_rms_norm
// to the backend it wraps (so a backend's fused version is what runs under it), not to the default
// composition.
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <random>
#include <vector>

#include "pie/backend.h"
#include "pie/forwarding_backend.h"
#include "pie/model.h"

namespace pie::testing {
namespace {

std::vector<float> random_floats(std::size_t n, std::mt19937& rng, float scale) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

Weight vector_weight(std::vector<float>& w) {
  const auto n = static_cast<std::int64_t>(w.size());
  return weight_view(w.data(), w.size() * sizeof(float), tensor::DType::f32, 1, n).reshape({n});
}

TEST(BackendOps, AddRmsNormDefaultIsAddThenRmsNorm) {
  std::mt19937 rng(std::random_device{}());
  auto cpu = make_cpu_backend(2);
  for (const std::int64_t n_cols : {576, 301}) {
    const std::int64_t n_rows = 5;
    const auto n = static_cast<std::size_t>(n_rows * n_cols);
    const std::vector<float> acc0 = random_floats(n, rng, 2.0f), x = random_floats(n, rng, 1.0f);
    std::vector<float> w = random_floats(static_cast<std::size_t>(n_cols), rng, 1.0f);
    const Weight weight = vector_weight(w);
    std::vector<float> acc = acc0, out(n, std::nanf("")), want_acc = acc0, want(n, std::nanf(""));
    std::vector<float> xs = x;
    cpu->add_rms_norm({acc.data(), n_rows, n_cols}, {xs.data(), n_rows, n_cols}, weight, 1e-5f,
                      {out.data(), n_rows, n_cols});
    cpu->add({want_acc.data(), n_rows, n_cols}, {xs.data(), n_rows, n_cols});
    cpu->rms_norm({want_acc.data(), n_rows, n_cols}, weight, 1e-5f, {want.data(), n_rows, n_cols});
    for (std::size_t i = 0; i < n; ++i) {
      ASSERT_EQ(acc[i], want_acc[i]) << n_cols << " columns: the sum, element " << i;
      ASSERT_EQ(out[i], want[i]) << n_cols << " columns: the norm, element " << i;
    }
  }
}

// A CPU backend that counts the add_rms_norm calls it receives (and still computes them).
class CountingBackend final : public ForwardingBackend {
 public:
  CountingBackend() : ForwardingBackend(make_cpu_backend(1)) {}
  int fused_calls = 0;
  void add_rms_norm(const Rows& acc, const Rows& x, const Weight& w, float eps, const Rows& out) override {
    ++fused_calls;
    inner().add_rms_norm(acc, x, w, eps, out);
  }
};

TEST(BackendOps, FaultInjectionForwardsAddRmsNorm) {
  ASSERT_EQ(setenv("ORCHARD_INJECT_STEP_FAULTS", "1000", 1), 0);
  auto owned = std::make_unique<CountingBackend>();
  CountingBackend* inner = owned.get();
  std::unique_ptr<Backend> wrapped = with_injected_faults(std::move(owned));
  unsetenv("ORCHARD_INJECT_STEP_FAULTS");
  ASSERT_NE(wrapped.get(), static_cast<Backend*>(inner)) << "the variable set: a wrapper";
  std::vector<float> acc = {1, 2, 3, 4}, x = {4, 3, 2, 1}, w = {1, 1, 1, 1}, out(4, std::nanf(""));
  wrapped->add_rms_norm({acc.data(), 1, 4}, {x.data(), 1, 4}, vector_weight(w), 1e-6f, {out.data(), 1, 4});
  EXPECT_EQ(inner->fused_calls, 1);
  for (float v : acc) EXPECT_EQ(v, 5.0f);
  for (float v : out) EXPECT_NEAR(v, 1.0f, 1e-5f);
}

}  // namespace
}  // namespace pie::testing
