#include "request_check.h"

#include <fmt/format.h>

namespace pie::detail {

void check_request(const GenerateRequest& request, const Model& model, std::int32_t context_length) {
  const std::int32_t n_vocab = model.config.n_vocab;
  if (request.prompt.empty()) throw RequestError("[request] prompt is empty: at least one token is needed", "prompt");
  for (std::size_t i = 0; i < request.prompt.size(); ++i) {
    const std::int32_t t = request.prompt[i];
    if (t < 0 || t >= n_vocab) {
      throw RequestError(fmt::format("[request] prompt[{}]: token id {} is outside [0, {})", i, t, n_vocab), "prompt");
    }
  }
  if (static_cast<std::int64_t>(request.prompt.size()) >= context_length) {
    throw RequestError(fmt::format("[request] prompt has {} tokens; the context holds {} (room for at least one "
                                   "generated token is needed)",
                                   request.prompt.size(), context_length),
                       "prompt");
  }
  if (request.n < 1 || request.n > kMaxSamples) {
    throw RequestError(fmt::format("[request] n must be in [1, {}], got {}", kMaxSamples, request.n), "n");
  }
  if (request.max_tokens < 1) {
    throw RequestError(fmt::format("[request] max_tokens must be at least 1, got {}", request.max_tokens),
                       "max_tokens");
  }
  if (request.stop.size() > kMaxStops) {
    throw RequestError(fmt::format("[request] at most {} stop strings, got {}", kMaxStops, request.stop.size()),
                       "stop");
  }
  for (std::size_t i = 0; i < request.stop.size(); ++i) {
    if (request.stop[i].empty()) throw RequestError(fmt::format("[request] stop[{}] is empty", i), "stop");
  }
  request.sampling.validate(n_vocab);
  if (request.speculative) request.speculative->validate();
}

}  // namespace pie::detail
