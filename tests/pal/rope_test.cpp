// RoPE: the reference and the fast version against goldens computed independently in numpy from the
// transformers formulas (make_rope_goldens.py -> rope_goldens.json), the fast version against the
// reference over sweeps, the table cache, and the error paths.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <pal/error.h>
#include <pal/rope.h>
#include <tensor/thread_pool.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "shared_data.h"

namespace {

pal::RopeConfig config_from_json(const nlohmann::json& j) {
  pal::RopeConfig c;
  c.head_dim = j.at("head_dim");
  c.rotary_dim = j.at("rotary_dim");
  c.theta = j.at("theta");
  c.layout = j.at("layout") == "neox" ? pal::RopeLayout::neox : pal::RopeLayout::gptj;
  const std::string s = j.at("scaling");
  c.scaling = s == "none"          ? pal::RopeScaling::none
              : s == "linear"      ? pal::RopeScaling::linear
              : s == "ntk"         ? pal::RopeScaling::ntk
              : s == "dynamic_ntk" ? pal::RopeScaling::dynamic_ntk
              : s == "yarn"        ? pal::RopeScaling::yarn
                                   : pal::RopeScaling::llama3;
  c.factor = j.value("factor", 1.0);
  c.original_max_position = j.value("original_max_position", 0);
  c.seq_len = j.value("seq_len", 0);
  c.yarn_beta_fast = j.value("yarn_beta_fast", 32.0);
  c.yarn_beta_slow = j.value("yarn_beta_slow", 1.0);
  c.yarn_attention_factor = j.value("yarn_attention_factor", 0.0);
  c.yarn_truncate = j.value("yarn_truncate", true);
  c.llama3_low_freq_factor = j.value("llama3_low_freq_factor", 1.0);
  c.llama3_high_freq_factor = j.value("llama3_high_freq_factor", 4.0);
  return c;
}

nlohmann::json load_goldens() {
  const auto path = orchard::testing::source_dir() / "tests/pal/rope_goldens.json";
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path.string());
  return nlohmann::json::parse(in);
}

// max |got - want| / max |want| over a vector.
double vec_error(const std::vector<double>& want, const float* got) {
  double scale = 1e-30, worst = 0.0;
  for (double w : want) scale = std::max(scale, std::fabs(w));
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (std::isnan(got[i])) return INFINITY;
    worst = std::max(worst, std::fabs(got[i] - want[i]));
  }
  return worst / scale;
}

TEST(RopeTest, InvFreqAndAttentionFactorMatchTransformersFormulas) {
  const nlohmann::json goldens = load_goldens();
  ASSERT_GE(goldens.size(), 10u);
  for (const auto& g : goldens) {
    const pal::RopeConfig c = config_from_json(g.at("config"));
    const std::string name = g.at("config").at("name");
    const std::vector<double> want = g.at("inv_freq");
    const std::vector<double> got = pal::rope_inv_freq(c);
    ASSERT_EQ(got.size(), want.size()) << name;
    for (std::size_t i = 0; i < want.size(); ++i) {
      EXPECT_NEAR(got[i], want[i], 1e-12 * std::fabs(want[i])) << name << " pair " << i;
    }
    EXPECT_NEAR(pal::rope_attention_factor(c), g.at("attention_factor").get<double>(), 1e-12) << name;
  }
}

TEST(RopeTest, RefAndFastMatchGoldens) {
  const nlohmann::json goldens = load_goldens();
  for (const auto& g : goldens) {
    const pal::RopeConfig c = config_from_json(g.at("config"));
    const std::string name = g.at("config").at("name");
    const std::vector<double> x = g.at("x");
    const std::vector<std::int32_t> positions = g.at("positions");
    for (std::size_t i = 0; i < positions.size(); ++i) {
      const std::vector<double> want = g.at("rotated")[i];
      std::vector<float> ref(x.begin(), x.end()), fast(x.begin(), x.end());
      pal::rope_ref(c, &positions[i], ref.data(), 1, 1);
      // The fast path's table covers every position up to the largest asked for: keep it small in unit
      // tests (131071 would build 131072 rows of cos/sin per configuration).
      if (positions[i] < 5000) pal::rope(c, &positions[i], fast.data(), 1, 1);
      // Angles up to 1.3e5 rad: cos/sin in double then rounded to f32 give ~1e-7; 2e-6 leaves room.
      EXPECT_LE(vec_error(want, ref.data()), 2e-6) << name << " ref, position " << positions[i];
      if (positions[i] < 5000) {
        EXPECT_LE(vec_error(want, fast.data()), 2e-6) << name << " fast, position " << positions[i];
      }
    }
  }
}

TEST(RopeTest, FastMatchesReferenceOverSweep) {
  tensor::ThreadPool pool(2);
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> dist(-3.0f, 3.0f);
  std::uniform_int_distribution<std::int32_t> pos_dist(0, 3000);
  int n_case = 0;
  for (int head_dim : {64, 80, 96, 128, 256}) {
    for (pal::RopeLayout layout : {pal::RopeLayout::neox, pal::RopeLayout::gptj}) {
      for (pal::RopeScaling scaling : {pal::RopeScaling::none, pal::RopeScaling::linear, pal::RopeScaling::ntk,
                                       pal::RopeScaling::dynamic_ntk, pal::RopeScaling::yarn,
                                       pal::RopeScaling::llama3}) {
        pal::RopeConfig c;
        c.head_dim = head_dim;
        c.rotary_dim = (n_case % 3 == 0) ? head_dim / 2 : head_dim;  // partial rotary every third case
        c.layout = layout;
        c.scaling = scaling;
        c.theta = (n_case % 2) ? 10000.0 : 500000.0;
        c.factor = 4.0;
        c.original_max_position = 4096;
        c.seq_len = 9000;
        const std::int64_t n_tokens = 1 + n_case % 37;
        const std::int32_t n_heads = 1 + n_case % 5;
        std::vector<std::int32_t> positions(static_cast<std::size_t>(n_tokens));
        for (auto& p : positions) p = pos_dist(rng);
        std::vector<float> x(static_cast<std::size_t>(n_tokens * n_heads * head_dim));
        for (float& v : x) v = dist(rng);
        // NaN guards after the rows: a write past the last row shows.
        constexpr int kGuard = 16;
        std::vector<float> ref = x, fast = x;
        fast.resize(x.size() + kGuard, std::numeric_limits<float>::quiet_NaN());
        pal::rope_ref(c, positions.data(), ref.data(), n_tokens, n_heads);
        pal::rope(c, positions.data(), fast.data(), n_tokens, n_heads, n_case % 2 ? &pool : nullptr);
        for (int g = 0; g < kGuard; ++g) ASSERT_TRUE(std::isnan(fast[x.size() + g])) << "write past the end";
        for (std::size_t i = 0; i < x.size(); i += head_dim) {
          double scale = 1e-30, worst = 0.0;
          for (int d = 0; d < head_dim; ++d) scale = std::max(scale, std::fabs(double(ref[i + d])));
          for (int d = 0; d < head_dim; ++d) worst = std::max(worst, std::fabs(double(fast[i + d]) - ref[i + d]));
          ASSERT_LE(worst / scale, 1e-5) << "case " << n_case << " row " << i / head_dim;
          for (int d = c.rotary_dim; d < head_dim; ++d) ASSERT_EQ(fast[i + d], x[i + d]) << "pass-through dim";
        }
        ++n_case;
      }
    }
  }
}

TEST(RopeTest, TableIsCachedAndGrows) {
  pal::RopeConfig c;
  c.head_dim = 64;
  c.rotary_dim = 64;
  c.theta = 12345.0;
  auto a = pal::rope_table(c, 100);
  auto b = pal::rope_table(c, 50);
  EXPECT_EQ(a.get(), b.get());
  auto grown = pal::rope_table(c, 150);
  EXPECT_GE(grown->n_positions(), 200);  // doubled
  EXPECT_EQ(pal::rope_table(c, 180).get(), grown.get());
  c.theta = 54321.0;
  EXPECT_NE(pal::rope_table(c, 100).get(), grown.get());
}

TEST(RopeErrorTest, BadConfigs) {
  auto expect = [](pal::RopeConfig c, const std::string& needle) {
    try {
      pal::rope_inv_freq(c);
      ADD_FAILURE() << "no error; expected " << needle;
    } catch (const pal::Error& e) {
      EXPECT_THAT(e.what(), ::testing::HasSubstr(needle));
    }
  };
  pal::RopeConfig c;
  c.head_dim = 64;
  c.rotary_dim = 63;
  expect(c, "rotary_dim 63 must be even and in [2, head_dim 64]");
  c.rotary_dim = 128;
  expect(c, "rotary_dim 128 must be even");
  c.rotary_dim = 64;
  c.theta = 0.0;
  expect(c, "theta 0 must be > 0");
  c.theta = 10000.0;
  c.scaling = pal::RopeScaling::linear;
  c.factor = -1.0;
  expect(c, "linear scaling: factor -1 must be > 0");
  c.factor = 2.0;
  c.scaling = pal::RopeScaling::yarn;
  expect(c, "yarn scaling: original_max_position 0 must be positive");
  c.scaling = pal::RopeScaling::llama3;
  c.original_max_position = 8192;
  c.llama3_low_freq_factor = 4.0;
  c.llama3_high_freq_factor = 1.0;
  expect(c, "llama3 scaling: need 0 < low_freq_factor 4 < high_freq_factor 1");
  c.scaling = pal::RopeScaling::ntk;
  c.rotary_dim = 2;
  expect(c, "ntk scaling: rotary_dim 2 must be >= 4");
}

TEST(RopeErrorTest, PositionsOutOfRange) {
  pal::RopeConfig c;
  c.head_dim = 64;
  c.rotary_dim = 64;
  const pal::RopeTable table(c, 10);
  std::vector<float> x(64, 1.0f);
  const std::vector<float> before = x;
  std::int32_t pos = 10;
  EXPECT_THROW(
      {
        try {
          pal::rope(table, &pos, x.data(), 1, 1);
        } catch (const pal::Error& e) {
          EXPECT_THAT(e.what(), ::testing::HasSubstr("token 0: position 10 outside the table's [0, 10)"));
          throw;
        }
      },
      pal::Error);
  pos = -1;
  EXPECT_THROW(pal::rope(table, &pos, x.data(), 1, 1), pal::Error);
  EXPECT_THROW(pal::rope(c, &pos, x.data(), 1, 1), pal::Error);
  EXPECT_THROW(pal::rope_ref(c, &pos, x.data(), 1, 1), pal::Error);
  EXPECT_EQ(x, before);
  EXPECT_THROW(pal::RopeTable(c, 0), pal::Error);
}

}  // namespace
