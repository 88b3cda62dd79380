// The host side of sampling on the device (pie/device_sampling.h): the penalty inputs a row carries, the
// mask check done before the device, the CPU's errors for a device result, which rows the device covers,
// and Sampler::next_draw keeping the request's stream where sample() would.
#include <gtest/gtest.h>

#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "pie/device_sampling.h"
#include "pie/error.h"
#include "pie/sampling.h"

namespace pie {
namespace {

using Counts = std::vector<std::pair<std::int32_t, std::int32_t>>;

TEST(DeviceSamplingInputs, PenalizedTokensAreDistinctAndCountsFollowFirstOccurrence) {
  SamplingParams p;
  p.repetition_penalty = 1.3f;
  p.frequency_penalty = 0.5f;
  const std::vector<std::int32_t> prompt = {7, 3, 7, 9}, output = {9, 4, 4, 2, 4};
  std::vector<std::int32_t> penalized = {99};  // cleared first
  Counts counts = {{99, 1}};
  penalty_inputs(p, prompt, output, 10, penalized, counts);
  EXPECT_EQ(penalized, (std::vector<std::int32_t>{2, 3, 4, 7, 9}));
  EXPECT_EQ(counts, (Counts{{9, 1}, {4, 3}, {2, 1}}));
}

TEST(DeviceSamplingInputs, OnlyThePenaltiesThatAreOnGetInputs) {
  const std::vector<std::int32_t> prompt = {1, 2}, output = {2, 3};
  std::vector<std::int32_t> penalized;
  Counts counts;
  SamplingParams none;
  penalty_inputs(none, prompt, output, 8, penalized, counts);
  EXPECT_TRUE(penalized.empty());
  EXPECT_TRUE(counts.empty());
  SamplingParams presence;
  presence.presence_penalty = -0.5f;
  penalty_inputs(presence, prompt, output, 8, penalized, counts);
  EXPECT_TRUE(penalized.empty());
  EXPECT_EQ(counts, (Counts{{2, 1}, {3, 1}}));
}

TEST(DeviceSamplingInputs, TokensOutsideTheVocabularyAreRequestErrorsNamingThem) {
  SamplingParams p;
  std::vector<std::int32_t> penalized;
  Counts counts;
  try {
    penalty_inputs(p, std::vector<std::int32_t>{1, 12}, {}, 10, penalized, counts);
    FAIL() << "no error";
  } catch (const RequestError& e) {
    EXPECT_NE(std::string(e.what()).find("prompt[1] = 12"), std::string::npos) << e.what();
  }
  try {
    penalty_inputs(p, {}, std::vector<std::int32_t>{-1}, 10, penalized, counts);
    FAIL() << "no error";
  } catch (const RequestError& e) {
    EXPECT_NE(std::string(e.what()).find("output[0] = -1"), std::string::npos) << e.what();
  }
}

TEST(DeviceSamplingInputs, MaskAllowingNothingIgnoresBitsPastTheVocabulary) {
  EXPECT_FALSE(mask_allows_nothing({}, 40));  // no mask
  const std::vector<std::uint32_t> none = {0u, 0u};
  EXPECT_TRUE(mask_allows_nothing(none, 40));
  const std::vector<std::uint32_t> past = {0u, 1u << 9};  // token 41: past a vocabulary of 40
  EXPECT_TRUE(mask_allows_nothing(past, 40));
  const std::vector<std::uint32_t> last = {0u, 1u << 7};  // token 39
  EXPECT_FALSE(mask_allows_nothing(last, 40));
}

TEST(DeviceSamplingResults, ErrorsAreTheCpuSamplersOwn) {
  // The CPU's messages, for the same logits.
  std::vector<float> nan_logits = {0.0f, 1.0f, std::numeric_limits<float>::quiet_NaN()};
  std::string cpu_message;
  try {
    Sampler(SamplingParams{}, 1).sample(nan_logits, {}, {}, {});
  } catch (const Error& e) {
    cpu_message = e.what();
  }
  DeviceSampleResult bad;
  bad.status = DeviceSampleResult::Status::bad_logit;
  bad.bad_token = 2;
  bad.bad_value = std::numeric_limits<float>::quiet_NaN();
  try {
    throw_unless_sampled(bad);
    FAIL() << "no error";
  } catch (const RequestError&) {
    FAIL() << "a broken logit is not the request's fault";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), cpu_message);
  }
  std::vector<float> masked = {-std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()};
  std::string cpu_none;
  try {
    Sampler(SamplingParams{}, 1).sample(masked, {}, {}, {});
  } catch (const RequestError& e) {
    cpu_none = e.what();
  }
  DeviceSampleResult none;
  none.status = DeviceSampleResult::Status::no_token;
  try {
    throw_unless_sampled(none);
    FAIL() << "no error";
  } catch (const RequestError& e) {
    EXPECT_EQ(std::string(e.what()), cpu_none);
  }
  EXPECT_NO_THROW(throw_unless_sampled(DeviceSampleResult{}));
  DeviceSampleResult unknown;
  unknown.status = static_cast<DeviceSampleResult::Status>(7);
  EXPECT_THROW(throw_unless_sampled(unknown), Error);
}

TEST(DeviceSamplingCoverage, GreedyAlwaysSampledRowsUpToTheDevicesTopK) {
  SamplingParams p;
  p.temperature = 0;
  p.top_k = kDeviceMaxTopK + 1;
  EXPECT_TRUE(device_sampling_covers(p, 50'000));
  p.temperature = 0.7f;
  EXPECT_FALSE(device_sampling_covers(p, 50'000));
  EXPECT_TRUE(device_sampling_covers(p, kDeviceMaxTopK + 1));  // top_k the whole vocabulary: off
  p.top_k = kDeviceMaxTopK;
  EXPECT_TRUE(device_sampling_covers(p, 50'000));
  p.top_k = 0;
  EXPECT_TRUE(device_sampling_covers(p, 50'000));
}

// A draw taken for the device leaves the stream where sample() leaves it: the next tokens agree.
TEST(DeviceSamplingDraws, NextDrawAdvancesTheStreamAsSampleDoes) {
  SamplingParams p;
  p.temperature = 1.0f;
  Sampler a(p, 42), b(p, 42), c(p, 43);
  std::mt19937 rng(5);
  std::normal_distribution<float> d(0.0f, 2.0f);
  std::vector<float> logits(300);
  for (float& x : logits) x = d(rng);
  a.next_draw();
  std::vector<float> copy = logits;
  b.sample(copy, {}, {}, {});
  int same_as_other_seed = 0;
  for (int i = 0; i < 200; ++i) {
    for (float& x : logits) x = d(rng);
    std::vector<float> la = logits, lb = logits, lc = logits;
    const std::int32_t ta = a.sample(la, {}, {}, {}).token;
    EXPECT_EQ(ta, b.sample(lb, {}, {}, {}).token) << "draw " << i;
    same_as_other_seed += ta == c.sample(lc, {}, {}, {}).token ? 1 : 0;
  }
  EXPECT_LT(same_as_other_seed, 150);  // the comparison can tell streams apart
}

// sample_at is sample() at a given draw: at the draw the twin stream gives, the same token and logprobs,
// and its own stream untouched.
TEST(DeviceSamplingDraws, SampleAtTheStreamsDrawIsSample) {
  SamplingParams p;
  p.temperature = 0.9f;
  p.top_k = 50;
  p.top_p = 0.9f;
  p.logprobs = true;
  p.top_logprobs = 3;
  Sampler ref(p, 9), twin(p, 9), at(p, 123);
  std::mt19937 rng(8);
  std::normal_distribution<float> d(0.0f, 2.0f);
  std::vector<float> logits(500);
  for (int i = 0; i < 100; ++i) {
    for (float& x : logits) x = d(rng);
    std::vector<float> a = logits, b = logits;
    const SampledToken s = ref.sample(a, {}, {}, {});
    const SampledToken t = at.sample_at(b, {}, {}, {}, twin.next_draw());
    EXPECT_EQ(s.token, t.token) << i;
    EXPECT_EQ(s.logprob, t.logprob) << i;
    ASSERT_EQ(s.top.size(), t.top.size());
  }
  EXPECT_EQ(at.next_draw(), Sampler(p, 123).next_draw());  // 100 sample_at calls drew nothing
  std::vector<float> x = logits;
  for (const double u : {1.0, -0.25, std::numeric_limits<double>::quiet_NaN()}) {
    EXPECT_THROW(at.sample_at(x, {}, {}, {}, u), Error) << u;
  }
}

// draw_ahead(n) is the draw the (n + 1)-th next sample takes, and takes none itself: a drafted row's
// positions sampled on the device at draws taken ahead, the stream then moved past those verified.
TEST(DeviceSamplingDraws, DrawAheadIsALaterDrawAndTakesNone) {
  SamplingParams p;
  p.temperature = 1.0f;
  Sampler ahead(p, 77), stream(p, 77);
  std::vector<double> seen;
  for (std::size_t n = 0; n < 8; ++n) seen.push_back(ahead.draw_ahead(n));
  for (std::size_t n = 0; n < 8; ++n) EXPECT_EQ(seen[n], stream.next_draw()) << n;
  EXPECT_NE(seen[0], seen[1]);
  EXPECT_EQ(ahead.next_draw(), seen[0]);  // the eight look-aheads drew nothing
  EXPECT_EQ(ahead.draw_ahead(0), seen[1]);
  std::vector<float> logits(64, 0.0f), copy = logits;
  Sampler sampled(p, 77);
  sampled.sample(copy, {}, {}, {});
  EXPECT_EQ(sampled.draw_ahead(2), seen[3]);  // after one sample, ahead of the stream's position
}

}  // namespace
}  // namespace pie
