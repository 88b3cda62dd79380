// The scheduler against a fake page budget: chunked prefill, decode-first packing, arrival-order
// admission, preemption of the most recently admitted sequence, forks, cancellation, and sequences that
// can never fit.
#include "pie/scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <vector>

#include "pie/error.h"

namespace pie {
namespace {

// A page budget: n_pages pages of 16 tokens, no prefix cache unless `cached_prefix` is set (then every
// sequence's first cached_prefix tokens are found "cached", at no page cost).
class FakePages final : public KvPages {
 public:
  explicit FakePages(std::int32_t n_pages) : n_pages_(n_pages) {}
  SeqId create(std::uint64_t /*prefix_namespace*/) override {
    owned_[next_] = 0;
    return next_++;
  }
  std::int32_t attach_prefix(SeqId seq, std::span<const std::int32_t> tokens) override {
    EXPECT_TRUE(owned_.count(seq));
    const auto n = static_cast<std::int32_t>(tokens.size());
    std::int32_t covered = std::min(cached_prefix, (n - 1) / kKvPageSize * kKvPageSize);
    covered = covered / kKvPageSize * kKvPageSize;
    return covered;
  }
  bool reserve(SeqId seq, std::int32_t n_tokens) override {
    EXPECT_TRUE(owned_.count(seq)) << "reserve of a released sequence " << seq;
    const std::int32_t need = (n_tokens + kKvPageSize - 1) / kKvPageSize;
    const std::int32_t extra = need - owned_[seq];
    if (extra <= 0) return true;
    if (used() + extra > n_pages_) return false;
    owned_[seq] = need;
    return true;
  }
  void commit(SeqId seq, std::span<const std::int32_t>, std::int32_t n_computed) override {
    EXPECT_TRUE(owned_.count(seq));
    EXPECT_LE(n_computed, owned_[seq] * kKvPageSize);
    ++commits;
  }
  SeqId fork(SeqId seq) override {
    if (fork_fails || used() + owned_[seq] > n_pages_) return -1;
    owned_[next_] = owned_[seq];
    return next_++;
  }
  void release(SeqId seq) override {
    EXPECT_TRUE(owned_.count(seq)) << "double release of " << seq;
    owned_.erase(seq);
  }
  bool truncate(SeqId seq, std::int32_t n_keep) override {
    EXPECT_TRUE(owned_.count(seq));
    if (truncate_fails) return false;
    owned_[seq] = (n_keep + kKvPageSize - 1) / kKvPageSize;
    ++truncations;
    return true;
  }
  std::int32_t used() const {
    std::int32_t u = 0;
    for (auto& [s, n] : owned_) u += n;
    return u;
  }
  std::size_t n_sequences() const { return owned_.size(); }

  std::int32_t cached_prefix = 0;
  bool fork_fails = false;
  bool truncate_fails = false;
  int commits = 0;
  int truncations = 0;

 private:
  std::int32_t n_pages_;
  std::map<SeqId, std::int32_t> owned_;
  SeqId next_ = 0;
};

std::vector<std::int32_t> prompt(std::int32_t n) {
  std::vector<std::int32_t> t(static_cast<std::size_t>(n));
  std::iota(t.begin(), t.end(), 1);
  return t;
}

// Runs a step as the engine would: completes it and appends one token to every sequence whose logits
// came out.
Step run_step(Scheduler& s) {
  Step step = s.schedule();
  s.complete(step);
  for (const ScheduledChunk& c : step.chunks) {
    if (c.wants_logits) {
      const std::int32_t t = 7;
      s.append(c.id, std::span<const std::int32_t>(&t, 1));
    }
  }
  return step;
}

TEST(Scheduler, RejectsBadConfig) {
  FakePages pages(10);
  EXPECT_THROW(Scheduler({.max_running = 0, .max_batch_tokens = 8}, pages), Error);
  EXPECT_THROW(Scheduler({.max_running = 1, .max_batch_tokens = 0}, pages), Error);
  Scheduler s({}, pages);
  EXPECT_THROW(s.add({}), Error);
  EXPECT_THROW(s.append(99, {}), Error);
  EXPECT_THROW(s.fork(99), Error);
  s.remove(99);  // ignored
}

TEST(Scheduler, ChunkedPrefillDoesNotStallDecoding) {
  FakePages pages(100);
  Scheduler s({.max_running = 4, .max_batch_tokens = 32}, pages);
  const SequenceId a = s.add(prompt(10));
  Step step = run_step(s);
  ASSERT_EQ(step.chunks.size(), 1u);
  EXPECT_EQ(step.chunks[0].n_tokens, 10);
  EXPECT_TRUE(step.chunks[0].wants_logits);
  // A long prompt arrives while `a` decodes: every step gives `a` its row first, the prompt the rest.
  const SequenceId b = s.add(prompt(100));
  std::int32_t prefilled = 0;
  for (int i = 0; i < 4; ++i) {
    step = run_step(s);
    ASSERT_GE(step.chunks.size(), 1u);
    EXPECT_EQ(step.chunks[0].id, a);
    EXPECT_EQ(step.chunks[0].n_tokens, 1);
    EXPECT_TRUE(step.chunks[0].wants_logits);
    EXPECT_LE(step.n_tokens, 32);
    for (const auto& c : step.chunks) {
      if (c.id == b) {
        EXPECT_EQ(c.begin, prefilled);
        prefilled += c.n_tokens;
        EXPECT_EQ(c.wants_logits, prefilled == 100);
      }
    }
  }
  EXPECT_EQ(prefilled, 100);  // 31 + 31 + 31 + 7
  EXPECT_EQ(s.n_computed(b), 100);
  EXPECT_EQ(s.tokens(b).size(), 101u);
}

TEST(Scheduler, AdmitsInArrivalOrderUpToMaxRunning) {
  FakePages pages(100);
  Scheduler s({.max_running = 2, .max_batch_tokens = 64}, pages);
  const SequenceId a = s.add(prompt(5)), b = s.add(prompt(5)), c = s.add(prompt(5));
  Step step = run_step(s);
  ASSERT_EQ(step.admitted.size(), 2u);
  EXPECT_EQ(step.admitted[0].first, a);
  EXPECT_EQ(step.admitted[1].first, b);
  EXPECT_EQ(s.n_waiting(), 1u);
  s.remove(a);  // finished
  step = run_step(s);
  ASSERT_EQ(step.admitted.size(), 1u);
  EXPECT_EQ(step.admitted[0].first, c);
  EXPECT_EQ(pages.n_sequences(), 2u);
}

TEST(Scheduler, PreemptsMostRecentlyAdmittedAndRecomputes) {
  // 4 pages of 16 tokens: two sequences of 20 tokens fit (2 pages each) until one grows past 32.
  FakePages pages(4);
  Scheduler s({.max_running = 4, .max_batch_tokens = 64}, pages);
  const SequenceId a = s.add(prompt(20));
  const SequenceId b = s.add(prompt(20));
  run_step(s);
  EXPECT_EQ(s.n_running(), 2u);
  // Grow both to 32 tokens, computed, + 1 pending: a then needs a third page, so b (younger) goes.
  std::vector<std::int32_t> more(11, 3);
  s.append(a, more);
  s.append(b, more);
  Step step = run_step(s);  // computes tokens 20..32 of both (fits: 2 pages each)
  EXPECT_EQ(step.preempted.size(), 0u);
  step = run_step(s);  // both need a third page: b is preempted
  ASSERT_EQ(step.preempted.size(), 1u);
  EXPECT_EQ(step.preempted[0], b);
  ASSERT_EQ(step.chunks.size(), 1u);
  EXPECT_EQ(step.chunks[0].id, a);
  EXPECT_FALSE(s.is_running(b));
  EXPECT_EQ(s.n_computed(b), 0);
  EXPECT_EQ(s.n_preemptions(), 1u);
  EXPECT_LE(pages.used(), 4);
  // Once a finishes, b is readmitted first and recomputes all of its 33 tokens.
  s.remove(a);
  const SequenceId c = s.add(prompt(3));
  step = run_step(s);
  ASSERT_GE(step.admitted.size(), 1u);
  EXPECT_EQ(step.admitted[0].first, b);
  EXPECT_EQ(step.chunks[0].id, b);
  EXPECT_EQ(step.chunks[0].begin, 0);
  EXPECT_EQ(step.chunks[0].n_tokens, 33);
  EXPECT_TRUE(step.chunks[0].wants_logits);
  EXPECT_TRUE(s.contains(c));
}

TEST(Scheduler, ReadmissionReusesThePrefixCache) {
  FakePages pages(100);
  pages.cached_prefix = 32;
  Scheduler s({}, pages);
  const SequenceId a = s.add(prompt(40));
  Step step = run_step(s);
  ASSERT_EQ(step.admitted.size(), 1u);
  EXPECT_EQ(step.admitted[0].second, 32);
  EXPECT_EQ(step.chunks[0].begin, 32);
  EXPECT_EQ(step.chunks[0].n_tokens, 8);
  EXPECT_EQ(s.n_computed(a), 40);
}

// A sequence that needs the logits of its prompt positions: no cached prefix, chunks of at most
// max_chunk tokens; set_options lifts both (forks made later inherit the sequence's options).
TEST(Scheduler, SequenceOptionsBypassTheCacheAndBoundChunks) {
  FakePages pages(100);
  pages.cached_prefix = 32;
  Scheduler s({.max_running = 4, .max_batch_tokens = 64}, pages);
  const SequenceId a = s.add(prompt(40), {.reuse_prefix = false, .max_chunk = 16});
  std::vector<std::int32_t> chunks;
  while (s.n_computed(a) < 40) {
    Step step = run_step(s);
    ASSERT_EQ(step.chunks.size(), 1u);
    if (!step.admitted.empty()) {
      EXPECT_EQ(step.admitted[0].second, 0);
    }
    EXPECT_EQ(step.chunks[0].begin, s.n_computed(a) - step.chunks[0].n_tokens);
    chunks.push_back(step.chunks[0].n_tokens);
  }
  EXPECT_EQ(chunks, (std::vector<std::int32_t>{16, 16, 8}));
  // A second sequence with the default options takes the cached prefix and one chunk.
  const SequenceId b = s.add(prompt(40));
  Step step = run_step(s);
  for (const auto& c : step.chunks) {
    if (c.id == b) {
      EXPECT_EQ(c.begin, 32);
    }
  }
  s.set_options(a, {.reuse_prefix = true, .max_chunk = 2});
  const std::vector<std::int32_t> more(10, 3);
  s.append(a, more);
  step = s.schedule();
  for (const auto& c : step.chunks) {
    if (c.id == a) {
      EXPECT_EQ(c.n_tokens, 2);
    }
  }
  s.complete(step);
  EXPECT_THROW(s.add(prompt(3), {.max_chunk = -1}), Error);
  EXPECT_THROW(s.set_options(a, {.max_chunk = -1}), Error);
  EXPECT_THROW(s.set_options(999, {}), Error);
}

TEST(Scheduler, NeverLosesARequestUnderPagePressure) {
  // 6 pages, 8 sequences that each grow to 40 tokens (3 pages): constant preemption, all finish.
  FakePages pages(6);
  Scheduler s({.max_running = 8, .max_batch_tokens = 24}, pages);
  std::vector<SequenceId> ids;
  for (int i = 0; i < 8; ++i) ids.push_back(s.add(prompt(10 + i)));
  std::map<SequenceId, int> generated;
  int steps = 0;
  while (!s.idle()) {
    ASSERT_LT(++steps, 2000) << "no progress";
    Step step = s.schedule();
    EXPECT_TRUE(step.failed.empty());
    EXPECT_LE(step.n_tokens, 24);
    EXPECT_LE(pages.used(), 6);
    s.complete(step);
    for (const auto& c : step.chunks) {
      if (!c.wants_logits) continue;
      if (s.tokens(c.id).size() >= 40) {
        s.remove(c.id);
        ++generated[c.id];
        continue;
      }
      const std::int32_t t = 5;
      s.append(c.id, std::span<const std::int32_t>(&t, 1));
    }
  }
  EXPECT_EQ(generated.size(), 8u);
  EXPECT_GT(s.n_preemptions(), 0u);
  EXPECT_EQ(pages.n_sequences(), 0u);
}

TEST(Scheduler, SequenceThatCannotFitFailsAlone) {
  FakePages pages(2);  // 32 tokens in all
  Scheduler s({.max_running = 4, .max_batch_tokens = 64}, pages);
  const SequenceId big = s.add(prompt(50));
  const SequenceId small = s.add(prompt(5));
  Step step = s.schedule();
  ASSERT_EQ(step.failed.size(), 1u);
  EXPECT_EQ(step.failed[0], big);
  EXPECT_FALSE(s.contains(big));
  ASSERT_EQ(step.chunks.size(), 1u);
  EXPECT_EQ(step.chunks[0].id, small);
  s.complete(step);
  // A running sequence that outgrows the whole cache fails too, leaving nothing behind.
  std::vector<std::int32_t> more(40, 1);
  s.append(small, more);
  step = s.schedule();
  ASSERT_EQ(step.failed.size(), 1u);
  EXPECT_EQ(step.failed[0], small);
  EXPECT_TRUE(s.idle());
  EXPECT_EQ(pages.n_sequences(), 0u);
}

TEST(Scheduler, ForkSharesPagesOrWaits) {
  FakePages pages(100);
  Scheduler s({.max_running = 1, .max_batch_tokens = 64}, pages);
  const SequenceId a = s.add(prompt(20));
  Step step = s.schedule();
  s.complete(step);
  const SequenceId f = s.fork(a);  // forks run even past max_running
  EXPECT_TRUE(s.is_running(f));
  EXPECT_EQ(s.n_computed(f), 20);
  const std::int32_t t1 = 1, t2 = 2;
  s.append(a, std::span<const std::int32_t>(&t1, 1));
  s.append(f, std::span<const std::int32_t>(&t2, 1));
  step = s.schedule();
  ASSERT_EQ(step.chunks.size(), 2u);
  EXPECT_EQ(s.tokens(f).back(), 2);
  EXPECT_EQ(s.tokens(a).back(), 1);
  s.complete(step);
  // No page for a copy: the fork waits at the front and recomputes.
  pages.fork_fails = true;
  const SequenceId g = s.fork(a);
  EXPECT_FALSE(s.is_running(g));
  EXPECT_EQ(s.n_computed(g), 0);
  EXPECT_EQ(s.n_waiting(), 1u);
}

TEST(Scheduler, CancelQueuedAndRunning) {
  FakePages pages(100);
  Scheduler s({.max_running = 1, .max_batch_tokens = 64}, pages);
  const SequenceId a = s.add(prompt(5)), b = s.add(prompt(5));
  run_step(s);
  s.remove(b);  // queued
  s.remove(a);  // running
  EXPECT_TRUE(s.idle());
  EXPECT_EQ(pages.n_sequences(), 0u);
  EXPECT_TRUE(s.schedule().empty());
}

TEST(Scheduler, DecodeRowsBeyondTheBudgetWait) {
  FakePages pages(100);
  Scheduler s({.max_running = 8, .max_batch_tokens = 3}, pages);
  for (int i = 0; i < 5; ++i) s.add(prompt(1));
  int total = 0;
  for (int i = 0; i < 4; ++i) {
    Step step = run_step(s);
    EXPECT_LE(step.n_tokens, 3);
    total += step.n_tokens;
  }
  EXPECT_EQ(total, 12);
}

// Speculative decoding: a draft runs in one chunk with its row's last token; the rejected part is truncated
// away (tokens and K/V); a short budget trims the draft; preemption drops it.
TEST(Scheduler, DraftRunsWithItsRowThenIsTruncated) {
  FakePages pages(100);
  Scheduler s({.max_running = 4, .max_batch_tokens = 64}, pages);
  const SequenceId a = s.add(prompt(20));
  run_step(s);  // prefill, then one sampled token appended: 21 tokens, 20 computed
  const std::vector<std::int32_t> draft{31, 32, 33};
  s.draft(a, draft);
  EXPECT_EQ(s.n_draft(a), 3);
  const Step step = s.schedule();
  ASSERT_EQ(step.chunks.size(), 1u);
  EXPECT_EQ(step.chunks[0].begin, 20);
  EXPECT_EQ(step.chunks[0].n_tokens, 4);
  EXPECT_TRUE(step.chunks[0].wants_logits);
  s.complete(step);
  EXPECT_EQ(s.n_draft(a), 0);
  EXPECT_EQ(s.n_computed(a), 24);
  // One draft token kept: 22 tokens, 22 computed; the engine appends its next token.
  s.truncate(a, 22);
  EXPECT_EQ(s.tokens(a).size(), 22u);
  EXPECT_EQ(s.tokens(a).back(), 31);
  EXPECT_EQ(s.n_computed(a), 22);
  EXPECT_EQ(pages.truncations, 1);
  const std::int32_t next = 40;
  s.append(a, std::span<const std::int32_t>(&next, 1));
  const Step after = s.schedule();
  ASSERT_EQ(after.chunks.size(), 1u);
  EXPECT_EQ(after.chunks[0].begin, 22);
  EXPECT_EQ(after.chunks[0].n_tokens, 1);
}

TEST(Scheduler, ShortBudgetTrimsTheDraft) {
  FakePages pages(100);
  Scheduler s({.max_running = 4, .max_batch_tokens = 3}, pages);
  const SequenceId a = s.add(prompt(3));
  run_step(s);
  const std::vector<std::int32_t> draft{1, 2, 3, 4, 5};
  s.draft(a, draft);
  const Step step = s.schedule();
  ASSERT_EQ(step.chunks.size(), 1u);
  EXPECT_EQ(step.chunks[0].n_tokens, 3);  // the row's token and two of the draft
  EXPECT_EQ(s.n_draft(a), 2);
  EXPECT_EQ(s.tokens(a).size(), 6u);
  EXPECT_TRUE(step.chunks[0].wants_logits);
}

// Forced tokens jump-forward appended and a draft after them run as one chunk, the logits from the last
// forced token on; a budget short of the forced tokens and the draft's first token drops the draft.
TEST(Scheduler, DraftFollowsForcedTokensInOneChunk) {
  FakePages pages(100);
  Scheduler s({.max_running = 4, .max_batch_tokens = 64}, pages);
  const SequenceId a = s.add(prompt(20));
  run_step(s);  // 21 tokens, 20 computed
  const std::vector<std::int32_t> forced{7, 8}, draft{31, 32};
  s.append(a, forced);  // three tokens to compute
  s.draft(a, draft);
  const Step step = s.schedule();
  ASSERT_EQ(step.chunks.size(), 1u);
  EXPECT_EQ(step.chunks[0].begin, 20);
  EXPECT_EQ(step.chunks[0].n_tokens, 5);
  EXPECT_TRUE(step.chunks[0].wants_logits);
  s.complete(step);
  s.truncate(a, 24);  // the first draft token kept
  EXPECT_EQ(s.tokens(a).back(), 31);
  EXPECT_EQ(s.n_computed(a), 24);

  Scheduler tight({.max_running = 4, .max_batch_tokens = 4}, pages);
  const SequenceId b = tight.add(prompt(3));
  run_step(tight);  // 4 tokens, 3 computed
  tight.append(b, forced);
  tight.draft(b, draft);
  Step cut = tight.schedule();  // the three tokens and one of the draft
  ASSERT_EQ(cut.chunks.size(), 1u);
  EXPECT_EQ(cut.chunks[0].n_tokens, 4);
  EXPECT_EQ(tight.n_draft(b), 1);
  tight.complete(cut);
  tight.truncate(b, 6);
  tight.append(b, forced);
  tight.append(b, forced);  // four tokens to compute: no room for a draft token
  tight.draft(b, draft);
  cut = tight.schedule();
  ASSERT_EQ(cut.chunks.size(), 1u);
  EXPECT_EQ(cut.chunks[0].n_tokens, 4);
  EXPECT_EQ(tight.n_draft(b), 0);
  EXPECT_EQ(tight.tokens(b).size(), 10u);  // the draft is gone
}

TEST(Scheduler, PreemptionDropsTheDraft) {
  FakePages pages(5);
  Scheduler s({.max_running = 4, .max_batch_tokens = 64}, pages);
  s.add(prompt(47));
  run_step(s);  // 48 tokens, three pages
  const SequenceId b = s.add(prompt(20));
  run_step(s);  // b admitted with two pages: the cache is full
  const std::vector<std::int32_t> draft{1, 2};
  s.draft(b, draft);  // b's row fits its pages, but the first row's 49th token needs a fourth page
  const Step step = s.schedule();
  ASSERT_EQ(step.preempted.size(), 1u);
  EXPECT_EQ(step.preempted[0], b);
  EXPECT_EQ(s.n_draft(b), 0);
  EXPECT_EQ(s.tokens(b).size(), 21u);  // its draft is gone
}

TEST(Scheduler, TruncateWithoutAPageRequeues) {
  FakePages pages(100);
  Scheduler s({.max_running = 4, .max_batch_tokens = 64}, pages);
  const SequenceId a = s.add(prompt(20));
  run_step(s);
  pages.truncate_fails = true;
  s.truncate(a, 18);
  EXPECT_FALSE(s.is_running(a));
  EXPECT_EQ(s.n_waiting(), 1u);
  EXPECT_EQ(s.tokens(a).size(), 18u);
  pages.truncate_fails = false;
  const Step step = s.schedule();  // readmitted: recomputes its 18 tokens
  ASSERT_EQ(step.chunks.size(), 1u);
  EXPECT_EQ(step.chunks[0].n_tokens, 18);
}

TEST(Scheduler, DraftAndTruncateErrors) {
  FakePages pages(100);
  Scheduler s({.max_running = 1, .max_batch_tokens = 64}, pages);
  const SequenceId a = s.add(prompt(5)), b = s.add(prompt(5));
  const std::vector<std::int32_t> draft{1};
  EXPECT_THROW(s.draft(a, draft), Error);  // not running yet
  run_step(s);
  EXPECT_THROW(s.draft(b, draft), Error);  // still queued
  s.draft(a, draft);
  EXPECT_THROW(s.draft(a, draft), Error);  // one draft at a time
  EXPECT_THROW(s.draft(999, draft), Error);
  EXPECT_THROW(s.truncate(a, 0), Error);
  EXPECT_THROW(s.truncate(a, 8), Error);  // 7 tokens
  EXPECT_THROW(s.truncate(999, 1), Error);
}

}  // namespace
}  // namespace pie
