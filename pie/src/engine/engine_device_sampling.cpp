// Device sampling (EngineOptions::device_sampling): a step whose rows all qualify leaves its logits where
// the backend computed them and samples them there (Backend::sample_rows), each row at its own sampler's
// next draw, so the tokens are the host path's; only what the host must check first (penalties' inputs,
// a mask that allows nothing) is done here.
#include <fmt/format.h>

#include "engine_impl.h"
#include "pie/device_sampling.h"

namespace pie {

using detail::count_allowed;

bool Engine::Impl::device_samples(const Sample& s) const {
  const Request& r = *s.request;
  if (!s.sampler || !device_sampling_covers(s.sampler->params(), n_vocab)) return false;
  // Steps that do more than sample this row stay on the host: the prompt's logprobs go out before its
  // first token, and a first row with n > 1 forks the other samples from its logits.
  if (r.req.prompt_logprobs && !r.prompt_logprobs_sent) return false;
  return !(s.index == 0 && !r.forked && r.samples.size() > 1);
}

void Engine::Impl::sample_rows_on_device(std::span<Sample* const> row_samples,
                                         std::span<const std::size_t> sample_logits,
                                         std::span<const std::uint32_t> masks,
                                         std::span<const std::string> mask_errors) {
  const std::size_t words = (static_cast<std::size_t>(n_vocab) + 31) / 32;
  std::vector<DeviceSampleRow> rows;
  std::vector<Sample*> samples;
  std::vector<std::span<const std::uint32_t>> row_masks;
  std::vector<std::vector<std::int32_t>> penalized(row_samples.size());
  std::vector<std::vector<std::pair<std::int32_t, std::int32_t>>> counts(row_samples.size());
  for (std::size_t row = 0; row < row_samples.size(); ++row) {
    Sample& s = *row_samples[row];
    if (s.finished) continue;
    if (!mask_errors[row].empty()) {
      row_failed(s, "grammar mask failed: " + mask_errors[row]);
      continue;
    }
    std::span<const std::uint32_t> mask;
    if (s.matcher) {
      mask = masks.subspan(row * words, words);
    } else if (s.request->req.ignore_eos) {
      mask = no_eos_mask;
    }
    const SamplingParams& params = s.sampler->params();
    try {
      // What Sampler::sample checks before its draw, in its order.
      penalty_inputs(params, s.request->req.prompt, s.output, n_vocab, penalized[row], counts[row]);
      if (mask_allows_nothing(mask, n_vocab)) throw RequestError("[sampler] the constraint's mask allows no token");
    } catch (const std::exception& e) {
      finish(s, FinishReason::error, fmt::format("sampling failed: {}", e.what()));
      continue;
    }
    DeviceSampleRow d;
    d.logits_row = static_cast<std::int32_t>(sample_logits[row]);
    d.params = &params;
    d.mask = mask;
    d.penalized = penalized[row];
    d.counts = counts[row];
    d.u = s.sampler->next_draw();
    rows.push_back(d);
    samples.push_back(&s);
    row_masks.push_back(mask);
  }
  std::vector<DeviceSampleResult> results(rows.size());
  try {
    runner->backend().sample_rows(rows, results);
  } catch (const std::exception& e) {
    for (Sample* s : samples) {
      if (!s->finished) row_failed(*s, fmt::format("sampling failed: {}", e.what()));
    }
    return;
  }
  {
    std::lock_guard<std::mutex> lock(stats_mutex);
    stats.device_sampled_rows += rows.size();
  }
  for (std::size_t i = 0; i < samples.size(); ++i) {
    Sample& s = *samples[i];
    if (s.finished) continue;  // its request failed with an earlier row
    try {
      throw_unless_sampled(results[i]);
    } catch (const std::exception& e) {
      finish(s, FinishReason::error, fmt::format("sampling failed: {}", e.what()));
      continue;
    }
    RowOutput out;
    out.n_allowed = s.matcher ? count_allowed(row_masks[i], n_vocab) : -1;
    bool ended = false;
    const bool going = take_sampled(s, std::move(results[i].sampled), out, ended);
    if (!ended) close_row(s, out, going);
  }
}

}  // namespace pie
