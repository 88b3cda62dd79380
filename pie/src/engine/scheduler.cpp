#include "pie/scheduler.h"

#include <algorithm>
#include <string>

#include "pie/error.h"

namespace pie {

Scheduler::Scheduler(SchedulerConfig config, KvPages& kv) : config_(config), kv_(kv) {
  if (config_.max_running < 1) {
    throw Error("[scheduler] max_running must be at least 1, got " + std::to_string(config_.max_running));
  }
  if (config_.max_batch_tokens < 1) {
    throw Error("[scheduler] max_batch_tokens must be at least 1, got " +
                std::to_string(config_.max_batch_tokens));
  }
}

Scheduler::~Scheduler() {
  for (auto& [id, s] : sequences_) {
    if (s.kv_seq >= 0) kv_.release(s.kv_seq);
  }
}

Scheduler::Sequence& Scheduler::get(SequenceId id) {
  auto it = sequences_.find(id);
  if (it == sequences_.end()) throw Error("[scheduler] unknown sequence " + std::to_string(id));
  return it->second;
}

const Scheduler::Sequence& Scheduler::get(SequenceId id) const {
  auto it = sequences_.find(id);
  if (it == sequences_.end()) throw Error("[scheduler] unknown sequence " + std::to_string(id));
  return it->second;
}

namespace {
void check_options(const SequenceOptions& options) {
  if (options.max_chunk < 0) {
    throw Error("[scheduler] max_chunk must be >= 0, got " + std::to_string(options.max_chunk));
  }
}
}  // namespace

SequenceId Scheduler::add(std::vector<std::int32_t> tokens, SequenceOptions options) {
  if (tokens.empty()) throw Error("[scheduler] a sequence needs at least one token");
  check_options(options);
  const SequenceId id = next_id_++;
  Sequence& s = sequences_[id];
  s.tokens = std::move(tokens);
  s.options = options;
  waiting_.push_back(id);
  return id;
}

void Scheduler::set_options(SequenceId id, SequenceOptions options) {
  check_options(options);
  get(id).options = options;
}

void Scheduler::append(SequenceId id, std::span<const std::int32_t> tokens) {
  Sequence& s = get(id);
  s.tokens.insert(s.tokens.end(), tokens.begin(), tokens.end());
}

SequenceId Scheduler::fork(SequenceId id) {
  const Sequence& parent = get(id);
  Sequence child;
  child.tokens = parent.tokens;
  child.options = parent.options;
  if (parent.kv_seq >= 0) child.kv_seq = kv_.fork(parent.kv_seq);
  const SequenceId child_id = next_id_++;
  if (child.kv_seq >= 0) {
    child.n_computed = parent.n_computed;
    child.admitted_at = ++admissions_;
    running_.push_back(child_id);
  } else {
    // No page for the copy: recompute later (the prompt's full pages are in the prefix cache by then).
    child.kv_seq = -1;
    child.n_computed = 0;
    waiting_.push_front(child_id);
  }
  sequences_.emplace(child_id, std::move(child));
  return child_id;
}

void Scheduler::draft(SequenceId id, std::span<const std::int32_t> draft) {
  Sequence& s = get(id);
  if (s.kv_seq < 0 || static_cast<std::int32_t>(s.tokens.size()) - s.n_computed < 1) {
    throw Error("[scheduler] draft: sequence " + std::to_string(id) + " is not decoding (running, a token to compute)");
  }
  if (s.n_draft > 0) throw Error("[scheduler] draft: sequence " + std::to_string(id) + " has a draft already");
  s.tokens.insert(s.tokens.end(), draft.begin(), draft.end());
  s.n_draft = static_cast<std::int32_t>(draft.size());
}

std::int32_t Scheduler::n_draft(SequenceId id) const { return get(id).n_draft; }

void Scheduler::truncate(SequenceId id, std::int32_t n_keep) {
  Sequence& s = get(id);
  if (n_keep < 1 || n_keep > static_cast<std::int32_t>(s.tokens.size())) {
    throw Error("[scheduler] truncate: sequence " + std::to_string(id) + ": n_keep " + std::to_string(n_keep) +
                " outside [1, " + std::to_string(s.tokens.size()) + "]");
  }
  s.tokens.resize(static_cast<std::size_t>(n_keep));
  s.n_draft = 0;
  if (s.kv_seq < 0 || s.n_computed <= n_keep) return;
  if (kv_.truncate(s.kv_seq, n_keep)) {
    s.n_computed = n_keep;
  } else {
    requeue(id);
    ++n_preemptions_;
  }
}

void Scheduler::requeue(SequenceId id) {
  Sequence& s = get(id);
  kv_.release(s.kv_seq);
  s.kv_seq = -1;
  s.n_computed = 0;
  std::erase(running_, id);
  waiting_.push_front(id);
}

void Scheduler::remove(SequenceId id) {
  auto it = sequences_.find(id);
  if (it == sequences_.end()) return;
  if (it->second.kv_seq >= 0) kv_.release(it->second.kv_seq);
  std::erase(running_, id);
  std::erase(waiting_, id);
  sequences_.erase(it);
}

SequenceId Scheduler::youngest_running() const {
  SequenceId best = 0;
  std::uint64_t best_at = 0;
  for (SequenceId id : running_) {
    const Sequence& s = sequences_.at(id);
    if (best == 0 || s.admitted_at > best_at) {
      best = id;
      best_at = s.admitted_at;
    }
  }
  return best;
}

void Scheduler::preempt(SequenceId id, Step& step, std::int32_t& budget) {
  Sequence& s = get(id);
  for (auto it = step.chunks.begin(); it != step.chunks.end();) {
    if (it->id == id) {
      budget += it->n_tokens;
      it = step.chunks.erase(it);
    } else {
      ++it;
    }
  }
  // A draft is for the step it was made for: a preempted sequence recomputes only what it has.
  s.tokens.resize(s.tokens.size() - static_cast<std::size_t>(s.n_draft));
  s.n_draft = 0;
  requeue(id);
  step.preempted.push_back(id);
  ++n_preemptions_;
}

Step Scheduler::schedule() {
  Step step;
  std::int32_t budget = config_.max_batch_tokens;

  // Reserves pages for tokens [n_computed, n_computed + n) of a running sequence, preempting the most
  // recently admitted sequences until they fit. False when the sequence itself was preempted or failed.
  auto place = [&](SequenceId id, std::int32_t n) -> bool {
    Sequence& s = get(id);
    while (!kv_.reserve(s.kv_seq, s.n_computed + n)) {
      const SequenceId victim = youngest_running();
      if (victim != id) {
        preempt(victim, step, budget);
        continue;
      }
      if (running_.size() == 1) {
        // Alone and still no room: it can never fit. Dropped, the caller fails it.
        step.failed.push_back(id);
        remove(id);
      } else {
        preempt(id, step, budget);
      }
      return false;
    }
    step.chunks.push_back({id, s.kv_seq, s.n_computed, n,
                           s.n_computed + n == static_cast<std::int32_t>(s.tokens.size())});
    budget -= n;
    return true;
  };
  // Tokens left to compute, as many as the sequence takes in one step.
  auto pending = [&](SequenceId id) {
    const Sequence& s = sequences_.at(id);
    const auto left = static_cast<std::int32_t>(s.tokens.size()) - s.n_computed;
    return s.options.max_chunk > 0 ? std::min(left, s.options.max_chunk) : left;
  };
  auto is_running = [&](SequenceId id) { return std::find(running_.begin(), running_.end(), id) != running_.end(); };

  // Decode rows first, so that prefill never stalls them; a drafted row takes its draft along, as far as
  // the budget goes (the rest of the draft is dropped).
  const std::vector<SequenceId> snapshot = running_;
  for (SequenceId id : snapshot) {
    if (budget < 1) break;
    if (!is_running(id)) continue;
    Sequence& s = get(id);
    if (s.n_draft == 0) {
      if (pending(id) == 1) place(id, 1);
      continue;
    }
    // A drafted row: its tokens to compute (one, or forced ones) and the draft after them.
    const std::int32_t base = static_cast<std::int32_t>(s.tokens.size()) - s.n_computed - s.n_draft;
    std::int32_t n = std::min(base + s.n_draft, budget);
    if (s.options.max_chunk > 0) n = std::min(n, s.options.max_chunk);
    if (n < base + 1) {  // not even the draft's first token fits: the row runs without it
      s.tokens.resize(s.tokens.size() - static_cast<std::size_t>(s.n_draft));
      s.n_draft = 0;
      continue;
    }
    if (n < base + s.n_draft) {
      s.tokens.resize(static_cast<std::size_t>(s.n_computed + n));
      s.n_draft = n - base;
    }
    place(id, n);
  }
  // Then prefill chunks (prompts, recomputation after preemption, forced tokens).
  for (SequenceId id : snapshot) {
    if (budget < 1) break;
    if (!is_running(id) || get(id).n_draft > 0) continue;  // a drafted row runs whole, as a decode row
    const std::int32_t n = pending(id);
    if (n > 1) place(id, std::min(n, budget));
  }
  // Then admissions, in arrival order (preempted sequences are at the front). Admission never preempts.
  while (!waiting_.empty() && budget >= 1 &&
         static_cast<std::int32_t>(running_.size()) < config_.max_running) {
    const SequenceId id = waiting_.front();
    Sequence& s = get(id);
    s.kv_seq = kv_.create(s.options.prefix_namespace);
    const std::int32_t covered = s.options.reuse_prefix ? kv_.attach_prefix(s.kv_seq, s.tokens) : 0;
    s.n_computed = covered;
    std::int32_t n = std::min(static_cast<std::int32_t>(s.tokens.size()) - covered, budget);
    if (s.options.max_chunk > 0) n = std::min(n, s.options.max_chunk);
    if (!kv_.reserve(s.kv_seq, covered + n)) {
      kv_.release(s.kv_seq);
      s.kv_seq = -1;
      s.n_computed = 0;
      if (running_.empty()) {
        // Nothing else holds pages: this one cannot fit the cache at all.
        waiting_.pop_front();
        step.failed.push_back(id);
        sequences_.erase(id);
        continue;
      }
      break;  // wait for pages; no overtaking
    }
    waiting_.pop_front();
    s.admitted_at = ++admissions_;
    running_.push_back(id);
    step.admitted.emplace_back(id, covered);
    step.chunks.push_back({id, s.kv_seq, covered, n, covered + n == static_cast<std::int32_t>(s.tokens.size())});
    budget -= n;
  }
  step.n_tokens = config_.max_batch_tokens - budget;
  return step;
}

void Scheduler::complete(const Step& step) {
  for (const ScheduledChunk& c : step.chunks) {
    auto it = sequences_.find(c.id);
    if (it == sequences_.end() || it->second.kv_seq != c.kv_seq) continue;
    Sequence& s = it->second;
    s.n_computed = std::max(s.n_computed, c.begin + c.n_tokens);
    s.n_draft = 0;  // computed: the caller keeps it or truncates it away
    kv_.commit(s.kv_seq, s.tokens, s.n_computed);
  }
}

bool Scheduler::contains(SequenceId id) const { return sequences_.count(id) != 0; }

bool Scheduler::is_running(SequenceId id) const {
  auto it = sequences_.find(id);
  return it != sequences_.end() && it->second.kv_seq >= 0;
}

std::span<const std::int32_t> Scheduler::tokens(SequenceId id) const { return get(id).tokens; }

std::int32_t Scheduler::n_computed(SequenceId id) const { return get(id).n_computed; }

}  // namespace pie
