// Device sampling (EngineOptions::device_sampling): a step whose rows all qualify leaves its logits where
// the backend computed them and samples them there (Backend::sample_rows), each row at its own sampler's
// draw, so the tokens are the host path's; only what the host must check first (penalties' inputs, a mask
// that allows nothing) is done here.
//
// A drafted row's verification is sampling too (Sampler::verify keeps a guess iff it is the token sample()
// draws at that position with the stream's draw), so its positions are rows of the same call: position i
// with the draft's tokens before it as output (penalties), its own mask, and the draw the stream would give
// it (Sampler::draw_ahead: forced positions take none). verify_row then walks the results as it walks the
// host's logits and moves the stream past the positions it reached, so the text and the seed's stream are
// the host path's, whatever was kept.
#include <fmt/format.h>

#include <exception>

#include "engine_impl.h"
#include "pie/device_sampling.h"

namespace pie {

using detail::count_allowed;
using detail::DraftedRow;
using detail::DraftKind;
using detail::StepRows;

bool Engine::Impl::device_samples(const Sample& s) const {
  const Request& r = *s.request;
  if (!s.sampler || !device_sampling_covers(s.sampler->params(), n_vocab)) return false;
  // Steps that do more than sample this row stay on the host: the prompt's logprobs go out before its
  // first token, and a first row with n > 1 forks the other samples from its logits.
  if (r.req.prompt_logprobs && !r.prompt_logprobs_sent) return false;
  return !(s.index == 0 && !r.forked && r.samples.size() > 1);
}

namespace {

// A row for the device, and the penalty inputs its spans point into (kept alive until sample_rows returns).
struct PendingRow {
  std::vector<std::int32_t> penalized;
  std::vector<std::pair<std::int32_t, std::int32_t>> counts;
};

}  // namespace

void Engine::Impl::sample_on_device(const StepRows& rows) {
  const auto vocab = static_cast<std::size_t>(n_vocab);
  const std::size_t words = (vocab + 31) / 32;
  std::vector<DeviceSampleRow> device_rows;
  std::deque<PendingRow> inputs;  // a deque: the rows' spans stay valid as it grows
  std::vector<Sample*> row_owners;  // the sample of each device row, to fail them together
  // The host's part of a row: its mask, its penalty inputs and what Sampler::sample checks before its draw,
  // in its order. Returns the row's index among device_rows; an error (as the host's sampler throws it) is
  // left in `error` instead.
  const auto add_row = [&](Sample& s, std::size_t logits_row, std::span<const std::uint32_t> mask,
                           std::span<const std::int32_t> output, double u, std::exception_ptr& error) {
    const SamplingParams& params = s.sampler->params();
    PendingRow& in = inputs.emplace_back();
    try {
      penalty_inputs(params, s.request->req.prompt, output, n_vocab, in.penalized, in.counts);
      if (mask_allows_nothing(mask, n_vocab)) throw RequestError("[sampler] the constraint's mask allows no token");
    } catch (const std::exception&) {
      error = std::current_exception();
      return std::size_t{0};
    }
    DeviceSampleRow d;
    d.logits_row = static_cast<std::int32_t>(logits_row);
    d.params = &params;
    d.mask = mask;
    d.penalized = in.penalized;
    d.counts = in.counts;
    d.u = u;
    device_rows.push_back(d);
    row_owners.push_back(&s);
    return device_rows.size() - 1;
  };

  // Plain rows: one draw each, taken now (the row is sampled whatever happens to the others).
  struct PlainRow {
    Sample* s;
    std::span<const std::uint32_t> mask;
    std::size_t index;
    std::exception_ptr error;
  };
  std::vector<PlainRow> plain;
  for (std::size_t row = 0; row < rows.samples.size(); ++row) {
    Sample& s = *rows.samples[row];
    if (s.finished) continue;
    if (!rows.mask_errors[row].empty()) {
      row_failed(s, "grammar mask failed: " + rows.mask_errors[row]);
      continue;
    }
    const std::span<const std::uint32_t> mask = plain_mask(s, rows, row);
    PlainRow p{&s, mask, 0, nullptr};
    p.index = add_row(s, rows.logits_rows[row], mask, s.output, s.sampler->next_draw(), p.error);
    if (p.error) {
      try {
        std::rethrow_exception(p.error);
      } catch (const std::exception& e) {
        finish(s, FinishReason::error, fmt::format("sampling failed: {}", e.what()));
      }
      continue;
    }
    plain.push_back(p);
  }

  // Drafted rows: a device row per verified position, at the draws ahead of the stream (taken as verify_row
  // reaches them).
  struct Position {
    std::size_t index = 0;
    std::exception_ptr error;
  };
  struct Drafted {
    const DraftedRow* d;
    std::size_t at;  // its index among the step's drafted rows
    std::span<const std::uint32_t> masks;
    std::vector<Position> positions;  // [d->n]; forced positions have none
  };
  std::vector<Drafted> drafted;
  for (std::size_t i = 0; i < rows.drafted.size(); ++i) {
    const DraftedRow& d = rows.drafted[i];
    Sample& s = *d.sample;
    if (s.finished) continue;
    Drafted v{&d, i, {}, std::vector<Position>(d.n)};
    if (rows.draft_mask_errors[i].empty()) {  // else verify_row is not reached: the error is the row's
      const bool per_position = s.matcher.has_value();
      v.masks = drafted_masks(s, rows, d);
      std::vector<std::int32_t> output = s.output;  // the output at position p: the draft's tokens before it
      std::size_t n_draws = 0;
      for (std::size_t p = 0; p < d.n; ++p) {
        if (p > 0) output.push_back(s.draft[p - 1]);
        if (p < s.draft.size() && s.draft_kinds[p] == DraftKind::forced) continue;
        const std::span<const std::uint32_t> mask = per_position ? v.masks.subspan(p * words, words) : v.masks;
        v.positions[p].index =
            add_row(s, d.first_logits + p, mask, output, s.sampler->draw_ahead(n_draws++), v.positions[p].error);
      }
    }
    drafted.push_back(std::move(v));
  }

  std::vector<DeviceSampleResult> results(device_rows.size());
  try {
    if (!device_rows.empty()) runner->backend().sample_rows(device_rows, results);
  } catch (const std::exception& e) {
    for (Sample* s : row_owners) {
      if (!s->finished) row_failed(*s, fmt::format("sampling failed: {}", e.what()));
    }
    return;
  }
  {
    std::lock_guard<std::mutex> lock(stats_mutex);
    stats.device_sampled_rows += device_rows.size();
  }

  for (PlainRow& p : plain) {
    Sample& s = *p.s;
    if (s.finished) continue;  // its request failed with an earlier row
    try {
      throw_unless_sampled(results[p.index]);
    } catch (const std::exception& e) {
      finish(s, FinishReason::error, fmt::format("sampling failed: {}", e.what()));
      continue;
    }
    RowOutput out;
    out.n_allowed = s.matcher ? count_allowed(p.mask, n_vocab) : -1;
    bool ended = false;
    const bool going = take_sampled(s, std::move(results[p.index].sampled), out, ended);
    if (!ended) close_row(s, out, going);
  }

  for (const Drafted& v : drafted) {
    Sample& s = *v.d->sample;
    if (s.finished) continue;
    if (!rows.draft_mask_errors[v.at].empty()) {
      finish(s, FinishReason::error, "grammar mask failed: " + rows.draft_mask_errors[v.at]);
      continue;
    }
    verify_row(s, v.d->first_position, v.masks, [&](std::size_t p, std::span<const std::uint32_t>, std::int32_t) {
      s.sampler->next_draw();  // the draw the device took for this position
      const Position& pos = v.positions[p];
      if (pos.error) std::rethrow_exception(pos.error);
      throw_unless_sampled(results[pos.index]);
      return std::move(results[pos.index].sampled);
    });
  }
}

}  // namespace pie
