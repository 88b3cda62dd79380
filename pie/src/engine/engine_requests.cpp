// A request's life on the engine: submit() (validation, grammar, samples, queue; on the caller's thread),
// admission into the loop, events, the end of a sample and of its request, cancellations, and n > 1's fork.
#include <fmt/format.h>

#include <random>

#include "engine_impl.h"
#include "request_check.h"

namespace pie {

using detail::Clock;
using detail::kPromptLogprobsChunk;
using detail::Request;
using detail::Sample;

std::shared_ptr<RequestStream> Engine::submit(GenerateRequest request) {
  Impl& m = *impl_;
  detail::check_request(request, *m.model, m.context_length);
  auto r = std::make_unique<Request>();
  r->loras = m.lora_registry->resolve(request.loras);
  if (request.grammar) {
    r->grammar = m.grammars->compile(*request.grammar, request.grammar_special_tokens, request.abandoned);
  }
  r->seed = request.sampling.seed ? *request.sampling.seed : std::random_device{}() * 0x9E3779B97F4A7C15ULL ^
                                                                  std::random_device{}();
  if (request.id.empty()) request.id = fmt::format("req-{}", m.next_id.fetch_add(1));
  r->req = std::move(request);
  r->speculative = r->req.speculative.value_or(m.options.speculative);
  if (r->speculative.mode != DraftMode::off && !m.drafter_for(r->speculative.mode)) {
    throw RequestError(fmt::format("[speculative] mode \"{}\" needs {}, and the engine has none",
                                   draft_mode_name(r->speculative.mode),
                                   r->speculative.mode == DraftMode::draft ? "a draft model (--spec draft=PATH)"
                                                                           : "a custom drafter"),
                       "speculative");
  }
  r->usage.prompt_tokens = static_cast<std::int32_t>(r->req.prompt.size());
  if (r->req.prompt_logprobs) r->prompt_logprobs.resize(r->req.prompt.size() - 1);
  r->channel = std::make_shared<detail::RequestChannel>(r->req.id, m.signal);
  r->samples.resize(static_cast<std::size_t>(r->req.n));
  for (std::int32_t i = 0; i < r->req.n; ++i) {
    Sample& s = r->samples[static_cast<std::size_t>(i)];
    s.request = r.get();
    s.index = i;
    s.sampler.emplace(r->req.sampling, r->seed + static_cast<std::uint64_t>(i));
    s.draft_key = m.next_draft_key.fetch_add(1);
    if (r->speculative.k > 0) s.draft_length = DraftLength(r->speculative.k, /*fixed=*/true);
    s.detok.emplace(*m.model->tokenizer, tokenizers::DecodeOptions{.skip_special = true});
    if (!r->req.stop.empty()) s.stops.emplace(r->req.stop);
  }
  if (r->grammar) r->samples[0].matcher.emplace(*r->grammar);
  auto stream = std::make_shared<detail::ChannelStream>(r->channel);
  {
    std::lock_guard<std::mutex> lock(m.signal->mutex);
    if (!m.accepting) throw CapacityError("[engine] shutting down: no new requests");
    const std::int64_t queued = m.n_unadmitted.load();
    if (queued >= m.options.max_queued) {
      throw QueueFullError(fmt::format("[engine] the queue is full ({} requests waiting)", queued));
    }
    m.n_unadmitted.fetch_add(1);
    m.incoming.push_back(std::move(r));
    m.signal->pending = true;
  }
  {
    std::lock_guard<std::mutex> lock(m.stats_mutex);
    ++m.stats.requests;
  }
  m.signal->cv.notify_all();
  return stream;
}
void Engine::Impl::emit(Sample& s, std::vector<std::int32_t> tokens, std::string text,
                        std::vector<SampledToken> logprobs, FinishReason reason, std::string error,
                        std::int32_t n_allowed, std::int32_t end_token) {
  Event e;
  e.index = s.index;
  e.tokens = std::move(tokens);
  e.n_allowed = n_allowed;
  e.end_token = end_token;
  e.text = std::move(text);
  e.logprobs = std::move(logprobs);
  e.finish = reason;
  e.error = std::move(error);
  e.time = Clock::now();
  s.request->channel->push(std::move(e));
}

// Ends a sample: frees its sequence, flushes held-back text (unless a stop string ended it), and when it
// was the request's last, sends the done event.
void Engine::Impl::finish(Sample& s, FinishReason reason, std::string error) {
  if (s.finished) return;
  s.finished = true;
  if (Drafter* d = drafter_for(s.request->speculative.mode)) d->release(s.draft_key);
  if (s.seq) {
    by_seq.erase(*s.seq);
    scheduler->remove(*s.seq);
    s.seq.reset();
  }
  std::string tail;
  if (reason != FinishReason::error && reason != FinishReason::cancelled) {
    if (s.detok) {
      std::string rest = s.detok->finish();
      if (s.stops && !rest.empty()) {
        auto r = s.stops->push(rest);
        tail += r.text;
      } else {
        tail += rest;
      }
    }
    if (s.stops && !s.hit_stop_string) tail += s.stops->flush();
  }
  Request& r = *s.request;
  if (reason == FinishReason::error) r.failed = true;
  emit(s, {}, std::move(tail), {}, reason, std::move(error), s.end_allowed, s.end_token);
  r.usage.completion_tokens += static_cast<std::int32_t>(s.output.size());
  if (++r.n_finished == static_cast<std::int32_t>(r.samples.size())) {
    if (!r.admitted) {
      r.admitted = true;  // never will be: it leaves the queue
      n_unadmitted.fetch_sub(1);
    }
    Event done;
    done.index = 0;
    done.done = true;
    done.usage = r.usage;
    done.time = Clock::now();
    r.channel->push(std::move(done));
    std::lock_guard<std::mutex> lock(stats_mutex);
    if (r.failed) ++stats.requests_failed;
  }
}

void Engine::Impl::finish_at_end(Sample& s, std::int32_t token, std::int32_t n_allowed) {
  s.end_token = token;
  s.end_allowed = n_allowed;
  finish(s, FinishReason::stop);
}

void Engine::Impl::fail_request(Request& r, const std::string& error) {
  for (Sample& s : r.samples) finish(s, FinishReason::error, error);
}

void Engine::Impl::take_incoming(std::deque<std::unique_ptr<Request>>& batch) {
  for (auto& r : batch) {
    Sample& s0 = r->samples[0];
    // Prompt logprobs need the logits of every prompt position: no cached prefix, bounded chunks.
    SequenceOptions options;
    if (r->req.prompt_logprobs) options = {.reuse_prefix = false, .max_chunk = kPromptLogprobsChunk};
    options.prefix_namespace = r->loras.prefix_namespace;
    s0.seq = scheduler->add(r->req.prompt, options);
    by_seq[*s0.seq] = &s0;
    active.push_back(std::move(r));
  }
  batch.clear();
}

void Engine::Impl::process_cancellations() {
  for (auto& r : active) {
    if (r->n_finished == static_cast<std::int32_t>(r->samples.size())) continue;
    if (cancel_all || r->channel->cancelled()) {
      for (Sample& s : r->samples) finish(s, FinishReason::cancelled);
    }
  }
}

void Engine::Impl::drop_finished() {
  std::erase_if(active, [](const std::unique_ptr<Request>& r) {
    return r->n_finished == static_cast<std::int32_t>(r->samples.size());
  });
}

// n > 1: the other samples start from the prompt's K/V (pages shared) once its prefill is done.
void Engine::Impl::fork_samples(Request& r) {
  r.forked = true;
  Sample& s0 = r.samples[0];
  for (std::size_t i = 1; i < r.samples.size(); ++i) {
    Sample& s = r.samples[i];
    if (s.finished) continue;
    if (s0.matcher) s.matcher = s0.matcher->fork();
    s.seq = scheduler->fork(*s0.seq);
    by_seq[*s.seq] = &s;
  }
}

void Engine::Impl::row_failed(Sample& s, const std::string& error) {
  // Before the fork, the prompt's sequence stands for every sample.
  if (s.request->forked) {
    finish(s, FinishReason::error, error);
  } else {
    fail_request(*s.request, error);
  }
}

}  // namespace pie
