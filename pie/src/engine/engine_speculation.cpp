// Speculative decoding in the engine: before a step, each decoding row that speculates gets its draft (the
// text its grammar forces, as decoding would take it, then its drafter's guesses, as many as the measured
// step costs and its acceptance pay for); after it, the row's positions are verified in order under their
// own masks with the sampler's own draws, and the rejected tail leaves the KV pages and the matcher.
#include <fmt/format.h>

#include "engine_impl.h"
#include "forced_text.h"

namespace pie {

using detail::count_allowed;
using detail::DraftKind;
using detail::earlier_spelling;
using detail::spell;

void Engine::Impl::propose_drafts() {
  // Decoding rows (running, their tokens to compute being output tokens: the last one, or the forced ones
  // jump-forward appended) of requests that speculate, the tokens those rows compute, and how many samples
  // are live (decoding, prefilling, waiting, or not forked yet): the batch a draft joins, up to max_running.
  // Rows that are still prefilling decode in the next steps: counting only those decoding now would let a
  // large batch draft while it fills, at the cost of the compute-bound steps it is about to run.
  std::vector<Sample*> rows;
  std::int32_t n_step_tokens = 0, n_step_rows = 0, n_live = 0;
  for (auto& r : active) {
    for (Sample& s : r->samples) {
      if (!s.finished) ++n_live;
      if (s.finished || !s.seq || !scheduler->is_running(*s.seq) || !s.draft.empty() || s.output.empty()) continue;
      const auto n_tokens = static_cast<std::int32_t>(scheduler->tokens(*s.seq).size());
      const std::int32_t computed = scheduler->n_computed(*s.seq);
      if (n_tokens - computed < 1 || computed < static_cast<std::int32_t>(r->req.prompt.size())) continue;
      n_step_tokens += n_tokens - computed;
      ++n_step_rows;
      if (r->speculative.mode != DraftMode::off) rows.push_back(&s);
    }
  }
  // Samples past max_running wait for a slot, not for this batch: it never grows past that.
  n_live = std::min(n_live, options.max_running);
  if (rows.empty() || n_live > options.speculative_max_batch) return;
  // A row's draft as it is built: the grammar's matcher walked through it (rolled back at the end).
  struct Plan {
    Sample* s = nullptr;
    std::int32_t room = 0;  // tokens the draft may hold (output and context limits)
    std::vector<std::int32_t> tokens;
    std::vector<DraftKind> kinds;
    std::int32_t walked = 0;
    std::vector<std::int32_t> context;  // the row's tokens and the draft so far, for the drafter
    std::int32_t ask = 0;               // guesses asked of the drafter
    bool cut = false;                   // the room ran out inside forced text (its tokens are dropped)
    bool full() const { return static_cast<std::int32_t>(tokens.size()) >= room; }
  };
  const auto is_text = [&](std::int32_t t) {
    return t >= 0 && t < n_vocab && !is_eos(t) && !model->tokenizer->is_special(t);
  };
  // The text the grammar forces after the draft so far, as decoding takes it: jump-forward's tokens (its
  // spelling but the last, which is kept back for sampling unless the grammar must stop after it), then the
  // token the model spelled that kept-back text with before (a draft to verify); again while text is
  // forced. Returns whether the drafter's guesses may follow (no text forced there).
  const auto extend_forced = [&](Plan& p) {
    pse::Matcher& m = *p.s->matcher;
    for (;;) {
      const std::string forced = m.forced_continuation();
      if (forced.empty()) return true;
      const std::vector<std::int32_t> ids = spell(*model->tokenizer, m.grammar().vocabulary(), forced);
      if (ids.empty()) return false;
      for (std::size_t i = 0; i < ids.size(); ++i) {
        if (!m.accept_token(ids[i])) return false;  // decoding stops appending there too
        if (i + 1 == ids.size() && !m.must_stop()) {
          m.rollback(1);
          break;
        }
        if (p.full()) {
          m.rollback(1);
          p.cut = true;
          return false;
        }
        ++p.walked;
        p.tokens.push_back(ids[i]);
        p.kinds.push_back(DraftKind::forced);
        if (m.must_stop()) return false;
      }
      const std::string kept_back = m.forced_continuation();
      if (kept_back.empty() || p.full()) return false;
      std::vector<std::int32_t> context(scheduler->tokens(*p.s->seq).begin(), scheduler->tokens(*p.s->seq).end());
      context.insert(context.end(), p.tokens.begin(), p.tokens.end());
      const std::int32_t token = earlier_spelling(context, m.grammar().vocabulary(), kept_back);
      if (!is_text(token) || !m.accept_token(token)) return false;
      ++p.walked;
      p.tokens.push_back(token);
      p.kinds.push_back(DraftKind::spelling);
      if (m.must_stop()) return false;
    }
  };
  std::int32_t n_planned = 0;  // draft tokens planned so far this step (asked guesses at their most)
  for (const DraftMode mode : {DraftMode::ngram, DraftMode::draft, DraftMode::custom}) {
    Drafter* drafter = drafter_for(mode);
    if (drafter == nullptr) continue;
    std::vector<Plan> plans;
    for (Sample* s : rows) {
      if (s->request->speculative.mode == mode) plans.push_back({s});
    }
    if (plans.empty()) continue;
    // A drafted token costs the growth of the verifying step, plus the drafter's own time for it.
    const double drafter_seconds = drafter->token_seconds(static_cast<std::int32_t>(plans.size()));
    for (Plan& p : plans) {
      Sample* s = p.s;
      const GenerateRequest& q = s->request->req;
      const auto n_tokens = static_cast<std::int32_t>(scheduler->tokens(*s->seq).size());
      const std::int32_t limit =
          std::min(q.max_tokens, context_length - static_cast<std::int32_t>(q.prompt.size()));
      // Each kept draft token is an output token (the last may reach the limit: no token is sampled after
      // it then), and each takes a position of the context.
      p.room = std::min({limit - static_cast<std::int32_t>(s->output.size()), context_length - n_tokens,
                         kMaxDraftTokens});
      if (p.room <= 0) continue;
      bool open = true;
      if (s->matcher) {
        try {
          open = extend_forced(p);  // text forced after the row's tokens (kept back for the model) first
        } catch (const std::exception&) {
          open = false;
        }
      }
      if (open && !p.full()) {
        // The step as it is (every row's tokens, the drafts planned for the rows before this one, this
        // row's draft so far) against it with k more tokens, weighed for the step's every row.
        const auto n = n_step_tokens + n_planned + static_cast<std::int32_t>(p.tokens.size());
        std::vector<double> costs = step_cost.relative_costs(n, s->draft_length.max_k());
        const double base = step_cost.seconds(n);
        if (base > 0) {
          for (std::size_t k = 1; k < costs.size(); ++k) costs[k] += static_cast<double>(k) * drafter_seconds / base;
        }
        p.ask = std::min(p.room - static_cast<std::int32_t>(p.tokens.size()),
                         s->draft_length.next(costs, n_step_rows));
      }
      n_planned += static_cast<std::int32_t>(p.tokens.size()) + p.ask;
    }
    std::vector<Drafter::Row> asks;
    std::vector<Plan*> asked;
    for (Plan& p : plans) {
      if (p.ask <= 0) continue;
      const std::span<const std::int32_t> tokens = scheduler->tokens(*p.s->seq);
      std::span<const std::int32_t> context = tokens;
      if (!p.tokens.empty()) {
        p.context.assign(tokens.begin(), tokens.end());
        p.context.insert(p.context.end(), p.tokens.begin(), p.tokens.end());
        context = p.context;
      }
      asks.push_back({p.s->draft_key, context, p.ask, {}});
      asked.push_back(&p);
    }
    if (!asks.empty()) {
      try {
        drafter->propose(asks);
      } catch (const std::exception&) {
        for (Drafter::Row& a : asks) a.draft.clear();  // no guesses this step
      }
    }
    for (std::size_t i = 0; i < asks.size(); ++i) {
      Plan& p = *asked[i];
      std::vector<std::int32_t>& guesses = asks[i].draft;
      if (guesses.size() > static_cast<std::size_t>(p.ask)) guesses.resize(static_cast<std::size_t>(p.ask));
      // A guess is text: the draft stops before a token that ends generation, is special or is not a logits
      // row, before the first token the grammar rejects, and after one past which the grammar forces text
      // (close_row appends it; drafting it after a guess was measured to cost more rows than it saves).
      try {
        for (const std::int32_t t : guesses) {
          if (!is_text(t) || p.full()) break;
          if (p.s->matcher) {
            if (!p.s->matcher->accept_token(t)) break;
            ++p.walked;
          }
          p.tokens.push_back(t);
          p.kinds.push_back(DraftKind::guess);
          if (p.s->matcher && (p.s->matcher->must_stop() || !p.s->matcher->forced_continuation().empty())) break;
        }
      } catch (const std::exception&) {
        // The draft so far stands: each of its tokens was accepted.
      }
    }
    for (Plan& p : plans) {
      Sample* s = p.s;
      if (p.walked > 0) s->matcher->rollback(static_cast<std::size_t>(p.walked));
      // Forced text cut short would be sampled where decoding appends the rest of it: the draft ends
      // before it instead (close_row appends it after the draft's last token).
      while (p.cut && !p.kinds.empty() && p.kinds.back() == DraftKind::forced) {
        p.kinds.pop_back();
        p.tokens.pop_back();
      }
      if (p.tokens.empty()) continue;
      scheduler->draft(*s->seq, p.tokens);
      s->draft = std::move(p.tokens);
      s->draft_kinds = std::move(p.kinds);
    }
  }
}

// Verifies a drafted row: position by position, a guessed token is kept or replaced (by the token that
// sample_position draws there under the position's own mask: the host's Sampler::verify or the device's
// row at the same draw), a forced one appended as jump-forward appends it; the first
// replacement, or the token after a fully kept draft, ends the row. Kept tokens are events of their own
// (events carry one sampled token, then forced ones). The K/V of the row's tokens and of the kept drafts
// stay; the rest is truncated.
void Engine::Impl::verify_row(Sample& s, std::int32_t first_position, std::span<const std::uint32_t> masks,
                              const detail::PositionSampler& sample_position) {
  Request& r = *s.request;
  const std::vector<std::int32_t> draft = std::move(s.draft);
  const std::vector<DraftKind> kinds = std::move(s.draft_kinds);
  s.draft.clear();
  s.draft_kinds.clear();
  const auto vocab = static_cast<std::size_t>(n_vocab);
  const std::size_t words = (vocab + 31) / 32;
  const bool per_position = s.matcher.has_value();
  std::int32_t kept = 0;           // draft positions kept, forced ones included
  std::int32_t verified_kept = 0;  // guesses and spellings kept
  std::size_t n_known = 0;         // leading tokens of out that are kept draft positions
  std::int32_t n_forced = 0;       // forced tokens in out
  bool going = true, ended = false;
  RowOutput out;
  for (std::size_t i = 0; i <= draft.size(); ++i) {
    if (i < draft.size() && kinds[i] == DraftKind::forced) {
      // Text the grammar forces after the kept tokens: appended unverified, as decoding appends it.
      if (!s.matcher->accept_token(draft[i])) {
        finish(s, FinishReason::error, "a forced draft token was rejected by the grammar");
        ended = true;
        break;
      }
      ++kept, ++n_known, ++n_forced;
      going = push_token(s, draft[i], out);
      if (!going) break;
      continue;
    }
    if (!out.added.empty()) {  // the kept tokens before this position: their own event
      count_generated(out.added.size(), n_forced);
      emit(s, std::move(out.added), std::move(out.text), std::move(out.logprobs), FinishReason::none, {},
           out.n_allowed);
      n_forced = 0;
      n_known = 0;
    }
    const std::span<const std::uint32_t> mask = per_position ? masks.subspan(i * words, words) : masks;
    out = RowOutput{};
    out.n_allowed = per_position ? count_allowed(mask, n_vocab) : -1;
    SampledToken sampled;
    bool accepted = false;
    try {
      // The token sample() draws here with the sampler's own draw; a guess is kept iff it is that token.
      sampled = sample_position(i, mask, i < draft.size() ? draft[i] : -1);
      accepted = i < draft.size() && sampled.token == draft[i];
    } catch (const std::exception& e) {
      finish(s, FinishReason::error, fmt::format("sampling failed: {}", e.what()));
      ended = true;
      break;
    }
    going = take_sampled(s, std::move(sampled), out, ended);
    if (ended || !accepted) break;
    ++kept, ++verified_kept, ++n_known;
    if (!going) break;  // a kept draft token that ends the sample (a limit, a stop string)
    // Text the grammar forces after the draft's last token: close_row appends it, as decoding does (a draft
    // goes on past forced text only with the tokens decoding appends there).
    if (i + 1 == draft.size() && s.matcher && !s.matcher->forced_continuation().empty()) break;
  }
  // Drafted and kept counts are of verified tokens; the drafter's guesses alone feed the draft length.
  std::int32_t n_verified = 0, n_guesses = 0, guesses_kept = 0, first_guess = -1;
  for (std::size_t i = 0; i < kinds.size(); ++i) {
    if (kinds[i] == DraftKind::forced) continue;
    ++n_verified;
    if (kinds[i] != DraftKind::guess) continue;
    if (first_guess < 0) first_guess = static_cast<std::int32_t>(i);
    ++n_guesses;
    if (static_cast<std::int32_t>(i) < kept) ++guesses_kept;
  }
  if (Drafter* d = drafter_for(r.speculative.mode)) d->keep(s.draft_key, first_position + 1 + kept);
  // Guesses the verification reached (a rejected spelling before them leaves them untried).
  if (n_guesses > 0 && kept >= first_guess) s.draft_length.record(n_guesses, guesses_kept);
  r.usage.draft_tokens += n_verified;
  r.usage.accepted_draft_tokens += verified_kept;
  {
    std::lock_guard<std::mutex> lock(stats_mutex);
    stats.draft_tokens += static_cast<std::uint64_t>(n_verified);
    stats.accepted_draft_tokens += static_cast<std::uint64_t>(verified_kept);
    stats.forced_tokens += static_cast<std::uint64_t>(n_forced);  // close_row counts them as generated
  }
  if (ended) return;
  if (going) scheduler->truncate(*s.seq, first_position + 1 + kept);
  // The row's last kept draft tokens are the scheduler's already (their K/V computed).
  close_row(s, out, going, n_known);
}

}  // namespace pie
