// One step of the engine's loop: the scheduler's plan laid out as a batch, the forward pass with the
// grammar masks filled meanwhile, then each row's logits sampled (or verified, engine_speculation.cpp; or
// sampled on the device, engine_device_sampling.cpp) and its tokens pushed into its sample: grammar,
// jump-forward's forced tokens, detokenizer, stop strings, limits, the event.
#include <fmt/format.h>

#include "engine_impl.h"
#include "forced_text.h"

namespace pie {

using detail::Clock;
using detail::count_allowed;
using detail::DraftKind;
using detail::DraftedRow;
using detail::PromptRow;
using detail::seconds_since;
using detail::StepRows;
using detail::spell;

// Appends one token: grammar, detokenizer, stop strings, limits. Returns false when the sample ended (with
// out.reason set).
bool Engine::Impl::push_token(Sample& s, std::int32_t token, RowOutput& out) {
  const GenerateRequest& q = s.request->req;
  const std::int32_t limit = std::min(q.max_tokens, context_length - static_cast<std::int32_t>(q.prompt.size()));
  s.output.push_back(token);
  out.added.push_back(token);
  std::string piece = s.detok->push(token);
  if (s.stops) {
    auto res = s.stops->push(piece);
    out.text += res.text;
    if (res.stopped) {
      s.hit_stop_string = true;
      out.reason = FinishReason::stop;
      return false;
    }
  } else {
    out.text += piece;
  }
  if (s.matcher && s.matcher->must_stop()) {
    out.reason = FinishReason::stop;
    return false;
  }
  if (static_cast<std::int32_t>(s.output.size()) >= limit) {
    out.reason = FinishReason::length;
    return false;
  }
  return true;
}

// A sampled (or verified) token: the end of the sample when it is an end-of-sequence token the grammar
// allows (then the sample is finished here, with what `out` holds), else accepted by the grammar and
// pushed. Returns whether the sample goes on; `ended` tells that it was finished here.
bool Engine::Impl::take_sampled(Sample& s, SampledToken sampled, RowOutput& out, bool& ended) {
  const GenerateRequest& q = s.request->req;
  const std::int32_t token = sampled.token;
  ended = false;
  if (is_eos(token) && (s.matcher ? s.matcher->can_stop() : !q.ignore_eos)) {
    // The end-of-sequence token is not part of the output.
    if (q.sampling.logprobs) out.logprobs.push_back(std::move(sampled));
    count_generated(out.added.size(), 0);
    if (!out.added.empty() || !out.logprobs.empty() || !out.text.empty()) {
      emit(s, std::move(out.added), std::move(out.text), std::move(out.logprobs), FinishReason::none);
    }
    finish_at_end(s, token, out.n_allowed);
    ended = true;
    return false;
  }
  if (s.matcher && !s.matcher->accept_token(token)) {
    finish(s, FinishReason::error,
           fmt::format("the grammar rejected token {} that its own mask allowed (a dead end)", token));
    ended = true;
    return false;
  }
  if (q.sampling.logprobs) out.logprobs.push_back(std::move(sampled));
  return push_token(s, token, out);
}

// After a row's sampled tokens: the forced continuation (jump-forward: tokens that lie entirely inside the
// text the grammar forces are appended without sampling; the last one is kept back for sampling when the
// output can still go on, since it could merge with what follows), the context limit, the scheduler, the
// event, and the end of the sample when it ended.
void Engine::Impl::close_row(Sample& s, RowOutput& out, bool going, std::size_t n_known) {
  const auto prompt_len = static_cast<std::int32_t>(s.request->req.prompt.size());
  const std::size_t sampled = out.added.size();
  std::int32_t n_forced = 0;
  if (going && s.matcher) {
    try {
      const std::string forced = s.matcher->forced_continuation();
      if (!forced.empty()) {
        const std::vector<std::int32_t> ids = spell(*model->tokenizer, s.matcher->grammar().vocabulary(), forced);
        for (std::size_t i = 0; i < ids.size() && going; ++i) {
          if (!s.matcher->accept_token(ids[i])) break;
          if (i + 1 == ids.size() && !s.matcher->must_stop()) {
            s.matcher->rollback(1);
            break;
          }
          ++n_forced;
          going = push_token(s, ids[i], out);
        }
      }
    } catch (const std::exception& e) {
      finish(s, FinishReason::error, fmt::format("forced continuation failed: {}", e.what()));
      return;
    }
  }
  count_generated(sampled + static_cast<std::size_t>(n_forced), n_forced);
  if (going && prompt_len + static_cast<std::int32_t>(s.output.size()) >= context_length) {
    out.reason = FinishReason::length;
    going = false;
  }
  if (going && out.added.size() > n_known) {
    scheduler->append(*s.seq, std::span<const std::int32_t>(out.added).subspan(n_known));
  } else if (going) {
    // A kept draft token before forced text that gave no token of its own (the one it spells is kept back
    // for sampling): its K/V is computed, but the next token needs its logits, so it is computed again.
    const std::int32_t last = s.output.back();
    scheduler->truncate(*s.seq, static_cast<std::int32_t>(scheduler->tokens(*s.seq).size()) - 1);
    scheduler->append(*s.seq, std::span<const std::int32_t>(&last, 1));
  }
  emit(s, std::move(out.added), std::move(out.text), std::move(out.logprobs), FinishReason::none, {},
       out.n_allowed);
  if (!going) finish(s, out.reason);
}

void Engine::Impl::count_generated(std::size_t n_tokens, std::int32_t n_forced) {
  std::lock_guard<std::mutex> lock(stats_mutex);
  stats.generated_tokens += n_tokens;
  stats.forced_tokens += static_cast<std::uint64_t>(n_forced);
}

// Samples the sample's next token from its logits row, then appends the forced continuation, and emits.
void Engine::Impl::handle_row(Sample& s, std::span<float> logits, std::span<const std::uint32_t> mask) {
  const GenerateRequest& q = s.request->req;
  SampledToken sampled;
  try {
    sampled = s.sampler->sample(logits, mask, q.prompt, s.output);
  } catch (const std::exception& e) {
    finish(s, FinishReason::error, fmt::format("sampling failed: {}", e.what()));
    return;
  }
  RowOutput out;
  out.n_allowed = s.matcher ? count_allowed(mask, n_vocab) : -1;
  bool ended = false;
  const bool going = take_sampled(s, std::move(sampled), out, ended);
  if (!ended) close_row(s, out, going);
}

bool Engine::Impl::step() {
  propose_drafts();
  Step plan = scheduler->schedule();
  // A preempted sequence's draft was dropped; a short budget may have cut one.
  for (auto& [id, sample] : by_seq) {
    if (sample->draft.empty()) continue;
    const std::int32_t left = scheduler->contains(id) ? scheduler->n_draft(id) : 0;  // failed: removed
    sample->draft.resize(static_cast<std::size_t>(left));
    sample->draft_kinds.resize(static_cast<std::size_t>(left));
  }
  for (SequenceId id : plan.failed) {
    auto it = by_seq.find(id);
    if (it == by_seq.end()) continue;
    Sample& s = *it->second;
    by_seq.erase(it);
    s.seq.reset();  // already removed by the scheduler
    const std::string why =
        fmt::format("the sequence needs more KV cache than the engine has ({} pages)", kv->config().n_pages);
    // Before the fork, the prompt's sequence stands for every sample.
    if (s.request->forked) {
      finish(s, FinishReason::error, why);
    } else {
      fail_request(*s.request, why);
    }
  }
  for (const auto& [id, covered] : plan.admitted) {
    auto it = by_seq.find(id);
    if (it == by_seq.end()) continue;
    Request& r = *it->second->request;
    if (!r.admitted) {
      r.admitted = true;
      r.usage.cached_prompt_tokens = covered;
      n_unadmitted.fetch_sub(1);
    }
  }
  if (plan.empty()) return false;

  // The batch. Logit rows, in token order: each chunk's prompt rows (prompt_logprobs), then its sampling
  // row (row_samples[i]'s logits are row sample_logits[i]).
  std::vector<std::int32_t> tokens, qo_indptr{0}, seq_lens, page_indptr{0}, page_indices, logit_rows;
  std::vector<Sample*> row_samples;
  std::vector<std::size_t> sample_logits;
  std::vector<PromptRow> prompt_rows;
  std::vector<DraftedRow> drafted;
  std::vector<LoraGroup> lora_groups;  // rows grouped by (adapter, scale)
  std::size_t n_draft_masks = 0;
  for (const ScheduledChunk& c : plan.chunks) {
    const auto seq_tokens = scheduler->tokens(c.id);
    const auto chunk_first = static_cast<std::int32_t>(tokens.size());
    for (const ScaledLora& l : by_seq.at(c.id)->request->loras.adapters) {
      auto g = std::find_if(lora_groups.begin(), lora_groups.end(), [&](const LoraGroup& x) {
        return x.adapter == l.adapter.get() && x.scale == l.scale;
      });
      if (g == lora_groups.end()) g = lora_groups.insert(lora_groups.end(), LoraGroup{l.adapter.get(), l.scale, {}, {}});
      for (std::int32_t i = 0; i < c.n_tokens; ++i) g->rows.push_back(chunk_first + i);
    }
    tokens.insert(tokens.end(), seq_tokens.begin() + c.begin, seq_tokens.begin() + c.begin + c.n_tokens);
    qo_indptr.push_back(static_cast<std::int32_t>(tokens.size()));
    const std::int32_t len = c.begin + c.n_tokens;
    seq_lens.push_back(len);
    const auto seq_pages = kv->pages(c.kv_seq);
    const std::size_t n_pages = static_cast<std::size_t>((len + kKvPageSize - 1) / kKvPageSize);
    page_indices.insert(page_indices.end(), seq_pages.begin(),
                        seq_pages.begin() + static_cast<std::ptrdiff_t>(std::min(n_pages, seq_pages.size())));
    page_indptr.push_back(static_cast<std::int32_t>(page_indices.size()));
    Sample* sample = by_seq.at(c.id);
    const Request& r = *sample->request;
    if (r.req.prompt_logprobs && !r.prompt_logprobs_sent) {
      // Positions before the prompt's last: the logits at p give the logprob of prompt token p + 1.
      const auto last = static_cast<std::int32_t>(r.req.prompt.size()) - 1;
      const auto first_index = static_cast<std::int32_t>(tokens.size()) - c.n_tokens;
      for (std::int32_t p = c.begin; p < std::min(c.begin + c.n_tokens, last); ++p) {
        prompt_rows.push_back({sample, p, logit_rows.size()});
        logit_rows.push_back(first_index + (p - c.begin));
      }
    }
    if (c.wants_logits && !sample->draft.empty()) {
      // A drafted row: the logits of its token and of each drafted token, one mask per position.
      const std::size_t n = sample->draft.size() + 1;
      const auto first = c.begin + c.n_tokens - static_cast<std::int32_t>(n);
      drafted.push_back({sample, first, logit_rows.size(), n, sample->matcher ? n_draft_masks : 0});
      if (sample->matcher) n_draft_masks += n;
      for (std::size_t i = 0; i < n; ++i) logit_rows.push_back(static_cast<std::int32_t>(tokens.size() - n + i));
    } else if (c.wants_logits) {
      sample_logits.push_back(logit_rows.size());
      logit_rows.push_back(static_cast<std::int32_t>(tokens.size()) - 1);
      row_samples.push_back(sample);
    }
  }
  ForwardBatch batch{tokens, qo_indptr, seq_lens, page_indptr, page_indices, logit_rows, lora_groups};

  // Masks of the constrained rows, filled while the forward pass runs.
  const std::size_t words = (static_cast<std::size_t>(n_vocab) + 31) / 32;
  step_masks.resize(row_samples.size() * words);
  std::span<std::uint32_t> masks(step_masks);
  std::vector<std::size_t> mask_rows;
  for (std::size_t i = 0; i < row_samples.size(); ++i) {
    if (row_samples[i]->matcher) mask_rows.push_back(i);
  }
  std::vector<std::string> mask_errors(row_samples.size());
  // A drafted row's masks: one per position, the matcher walked through the draft and back.
  step_draft_masks.resize(n_draft_masks * words);
  std::span<std::uint32_t> draft_masks(step_draft_masks);
  std::vector<std::size_t> drafted_masks;
  for (std::size_t i = 0; i < drafted.size(); ++i) {
    if (drafted[i].sample->matcher) drafted_masks.push_back(i);
  }
  std::vector<std::string> draft_mask_errors(drafted.size());
  // Every row sampled on the device (plain rows and drafted ones): the logits stay there. Prompt logprobs
  // are computed on the host, from the raw logits.
  const bool device_step =
      device_sampling && prompt_rows.empty() && (!row_samples.empty() || !drafted.empty()) &&
      std::all_of(row_samples.begin(), row_samples.end(), [&](const Sample* s) { return device_samples(*s); }) &&
      std::all_of(drafted.begin(), drafted.end(), [&](const DraftedRow& d) { return device_samples(*d.sample); });
  step_logits.resize(logit_rows.size() * static_cast<std::size_t>(n_vocab));
  std::span<float> logits(step_logits);
  std::string forward_error;
  std::atomic<double> mask_time{0.0};
  bool begun = false;
  try {
    runner->begin(batch, *kv, logits, !device_step);
    begun = true;
  } catch (const std::exception& e) {
    forward_error = e.what();
  }
  mask_pool->parallel_for(mask_rows.size() + drafted_masks.size(), [&](std::size_t i) {
    const auto t0 = Clock::now();
    if (i >= mask_rows.size()) {
      const DraftedRow& d = drafted[drafted_masks[i - mask_rows.size()]];
      pse::Matcher& m = *d.sample->matcher;
      std::size_t walked = 0;
      try {
        for (std::size_t p = 0; p < d.n; ++p) {
          if (p > 0) {
            if (!m.accept_token(d.sample->draft[p - 1])) throw Error("a drafted token the grammar vetted was rejected");
            ++walked;
          }
          // A forced token is appended unverified: no mask needed for it.
          if (p + 1 < d.n && d.sample->draft_kinds[p] == DraftKind::forced) continue;
          m.fill_next_token_bitmask(draft_masks.subspan((d.first_mask + p) * words, words));
        }
      } catch (const std::exception& e) {
        draft_mask_errors[drafted_masks[i - mask_rows.size()]] = e.what();
      }
      if (walked > 0) m.rollback(static_cast<std::int32_t>(walked));
    } else {
      const std::size_t row = mask_rows[i];
      try {
        row_samples[row]->matcher->fill_next_token_bitmask(masks.subspan(row * words, words));
      } catch (const std::exception& e) {
        mask_errors[row] = e.what();
      }
    }
    double cur = mask_time.load();
    while (!mask_time.compare_exchange_weak(cur, cur + seconds_since(t0))) {
    }
  });
  double forward_time = 0;
  if (begun) {
    try {
      runner->wait();
      forward_time = runner->last_step_seconds();
      step_cost.record(static_cast<std::int32_t>(tokens.size()), forward_time,
                       static_cast<std::int32_t>(logit_rows.size()));
    } catch (const std::exception& e) {
      forward_error = e.what();
    }
  }
  {
    std::lock_guard<std::mutex> lock(stats_mutex);
    ++stats.steps;
    stats.forward_seconds += forward_time;
    stats.mask_seconds += mask_time.load();
    for (const ScheduledChunk& c : plan.chunks) {
      // Prompt tokens computed (recomputation after a preemption counts again: it is work done).
      const auto n_prompt = static_cast<std::int32_t>(by_seq.at(c.id)->request->req.prompt.size());
      if (c.begin < n_prompt) stats.prompt_tokens += static_cast<std::uint64_t>(std::min(c.n_tokens, n_prompt - c.begin));
    }
  }
  if (!forward_error.empty()) {
    // Nothing was sampled; every request in the batch fails (the batch was inconsistent, or the device
    // faulted inside the step); the engine goes on with the next step, and the stats keep the fault.
    {
      std::lock_guard<std::mutex> lock(stats_mutex);
      ++stats.forward_failures;
      stats.last_forward_error = forward_error;
    }
    for (Sample* s : row_samples) fail_request(*s->request, "forward pass failed: " + forward_error);
    for (const DraftedRow& d : drafted) fail_request(*d.sample->request, "forward pass failed: " + forward_error);
    for (const ScheduledChunk& c : plan.chunks) {
      auto it = by_seq.find(c.id);
      if (it != by_seq.end()) fail_request(*it->second->request, "forward pass failed: " + forward_error);
    }
    return true;
  }
  scheduler->complete(plan);

  // Prompt logprobs from their rows (on the mask threads: a log-softmax over the vocabulary each).
  std::vector<std::string> prompt_errors(prompt_rows.size());
  mask_pool->parallel_for(prompt_rows.size(), [&](std::size_t i) {
    const PromptRow& pr = prompt_rows[i];
    Request& r = *pr.sample->request;
    const std::span<const float> row(logits.data() + pr.logits_row * static_cast<std::size_t>(n_vocab),
                                     static_cast<std::size_t>(n_vocab));
    try {
      r.prompt_logprobs[static_cast<std::size_t>(pr.position)] =
          token_logprob(row, r.req.prompt[static_cast<std::size_t>(pr.position) + 1], r.req.sampling.top_logprobs);
    } catch (const std::exception& e) {
      prompt_errors[i] = e.what();
    }
  });
  for (std::size_t i = 0; i < prompt_rows.size(); ++i) {
    Request& r = *prompt_rows[i].sample->request;
    if (!prompt_errors[i].empty() && !r.failed) fail_request(r, "prompt logprobs failed: " + prompt_errors[i]);
  }

  const StepRows rows{row_samples, sample_logits, masks, mask_errors, drafted, draft_masks, draft_mask_errors};
  if (device_step) {
    sample_on_device(rows);
  } else {
    sample_on_host(rows, logits);
  }
  return true;
}

std::span<const std::uint32_t> Engine::Impl::plain_mask(const Sample& s, const StepRows& rows, std::size_t row) const {
  const std::size_t words = (static_cast<std::size_t>(n_vocab) + 31) / 32;
  if (s.matcher) return rows.masks.subspan(row * words, words);
  if (s.request->req.ignore_eos) return no_eos_mask;
  return {};
}

std::span<const std::uint32_t> Engine::Impl::drafted_masks(const Sample& s, const StepRows& rows,
                                                           const DraftedRow& d) const {
  const std::size_t words = (static_cast<std::size_t>(n_vocab) + 31) / 32;
  if (s.matcher) return rows.draft_masks.subspan(d.first_mask * words, d.n * words);
  if (s.request->req.ignore_eos) return no_eos_mask;  // the same mask at every position
  return {};
}

// The step's rows sampled from the logits in host memory: plain rows in order (the first row of a request
// with n > 1 forks its other samples from its logits), then drafted rows, each verified position by
// position.
void Engine::Impl::sample_on_host(const StepRows& rows, std::span<float> logits) {
  const auto vocab = static_cast<std::size_t>(n_vocab);
  for (std::size_t row = 0; row < rows.samples.size(); ++row) {
    Sample& s = *rows.samples[row];
    if (s.finished) continue;
    if (!rows.mask_errors[row].empty()) {
      row_failed(s, "grammar mask failed: " + rows.mask_errors[row]);
      continue;
    }
    const std::span<float> row_logits = logits.subspan(rows.logits_rows[row] * vocab, vocab);
    const std::span<const std::uint32_t> mask = plain_mask(s, rows, row);
    Request& r = *s.request;
    if (r.req.prompt_logprobs && !r.prompt_logprobs_sent) {
      // The prompt is whole: its logprobs go out before the first token, and from now on the sequence
      // (and its forks) is scheduled as any other.
      r.prompt_logprobs_sent = true;
      scheduler->set_options(*s.seq, {});
      Event e;
      e.index = 0;
      e.prompt_logprobs = std::move(r.prompt_logprobs);
      e.time = Clock::now();
      r.channel->push(std::move(e));
    }
    if (s.index == 0 && !r.forked && r.samples.size() > 1) {
      // The prompt's logits serve every sample: each takes its own copy.
      fork_samples(r);
      for (std::size_t i = 1; i < r.samples.size(); ++i) {
        Sample& other = r.samples[i];
        if (other.finished || !other.seq || !scheduler->is_running(*other.seq)) continue;
        std::vector<float> copy(row_logits.begin(), row_logits.end());
        handle_row(other, copy, mask);
      }
    }
    handle_row(s, row_logits, mask);
  }

  for (std::size_t i = 0; i < rows.drafted.size(); ++i) {
    const DraftedRow& d = rows.drafted[i];
    Sample& s = *d.sample;
    if (s.finished) continue;
    if (!rows.draft_mask_errors[i].empty()) {
      finish(s, FinishReason::error, "grammar mask failed: " + rows.draft_mask_errors[i]);
      continue;
    }
    const std::span<const std::uint32_t> row_masks = drafted_masks(s, rows, d);
    const std::span<float> row_logits = logits.subspan(d.first_logits * vocab, d.n * vocab);
    const GenerateRequest& q = s.request->req;
    verify_row(s, d.first_position, row_masks,
               [&](std::size_t p, std::span<const std::uint32_t> mask, std::int32_t draft) {
                 const std::span<float> row = row_logits.subspan(p * vocab, vocab);
                 bool accepted = false;
                 return draft >= 0 ? s.sampler->verify(row, mask, q.prompt, s.output, draft, accepted)
                                   : s.sampler->sample(row, mask, q.prompt, s.output);
               });
  }
}

}  // namespace pie
