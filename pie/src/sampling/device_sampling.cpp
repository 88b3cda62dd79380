#include "pie/device_sampling.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <unordered_map>

#include "pie/error.h"

namespace pie {

bool device_sampling_covers(const SamplingParams& params, std::int32_t n_vocab) {
  if (params.temperature <= 0.0f) return true;
  return params.top_k <= kDeviceMaxTopK || params.top_k >= n_vocab;
}

void penalty_inputs(const SamplingParams& params, std::span<const std::int32_t> prompt,
                    std::span<const std::int32_t> output, std::int32_t n_vocab, std::vector<std::int32_t>& penalized,
                    std::vector<std::pair<std::int32_t, std::int32_t>>& counts) {
  penalized.clear();
  counts.clear();
  for (std::span<const std::int32_t> ts : {prompt, output}) {
    for (std::size_t i = 0; i < ts.size(); ++i) {
      if (ts[i] < 0 || ts[i] >= n_vocab) {
        const char* what = ts.data() == prompt.data() ? "prompt" : "output";
        throw RequestError("[sampler] " + std::string(what) + "[" + std::to_string(i) + "] = " +
                               std::to_string(ts[i]) + " is outside the vocabulary [0, " + std::to_string(n_vocab) +
                               ")",
                           what);
      }
    }
  }
  if (params.repetition_penalty != 1.0f) {
    penalized.reserve(prompt.size() + output.size());
    penalized.insert(penalized.end(), prompt.begin(), prompt.end());
    penalized.insert(penalized.end(), output.begin(), output.end());
    std::sort(penalized.begin(), penalized.end());
    penalized.erase(std::unique(penalized.begin(), penalized.end()), penalized.end());
  }
  if (params.frequency_penalty != 0.0f || params.presence_penalty != 0.0f) {
    std::unordered_map<std::int32_t, std::size_t> at;  // token -> its entry in counts
    at.reserve(output.size());
    for (const std::int32_t t : output) {
      auto [it, fresh] = at.try_emplace(t, counts.size());
      if (fresh) {
        counts.emplace_back(t, 1);
      } else {
        ++counts[it->second].second;
      }
    }
  }
}

bool mask_allows_nothing(std::span<const std::uint32_t> mask, std::int32_t n_vocab) {
  if (mask.empty()) return false;
  const auto n = static_cast<std::size_t>(n_vocab);
  const std::size_t n_words = std::min(mask.size(), (n + 31) / 32);
  for (std::size_t w = 0; w < n_words; ++w) {
    std::uint32_t bits = mask[w];
    const std::size_t width = std::min<std::size_t>(32, n - w * 32);
    if (width < 32) bits &= (std::uint32_t{1} << width) - 1;
    if (bits != 0) return false;
  }
  return true;
}

void throw_unless_sampled(const DeviceSampleResult& result) {
  switch (result.status) {
    case DeviceSampleResult::Status::ok:
      return;
    case DeviceSampleResult::Status::bad_logit: {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%g", static_cast<double>(result.bad_value));
      throw Error("[sampler] logit of token " + std::to_string(result.bad_token) + " is " + buf);
    }
    case DeviceSampleResult::Status::no_token:
      throw RequestError("[sampler] no token can be sampled: every allowed token has logit -inf");
  }
  throw Error("[sampler] device sampling returned an unknown status " +
              std::to_string(static_cast<std::int32_t>(result.status)));
}

}  // namespace pie
