// One sequence's cursor over a CompiledGrammar: the next-token bitmask, accepting tokens or bytes,
// rollback for speculative decoding, fork, stop conditions and the forced (jump-forward) continuation.
// A Matcher is not thread-safe; distinct matchers (and forks) may run on distinct threads, sharing
// their CompiledGrammar.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "pse/compiler.h"
#include "pse/thread_pool.h"

namespace pse {

namespace detail {
class Chart;
struct UncertainView;
}

class Matcher {
 public:
  explicit Matcher(CompiledGrammar grammar);

  // Words a mask needs: ceil(n_rows / 32).
  std::size_t mask_words() const;
  // Writes the allowed next tokens: bit i % 32 of word i / 32 set when token i is allowed. Text tokens
  // are allowed exactly when some valid output continues with their bytes, or a token terminal of the
  // grammar (Expr::kToken) reads them next; other special ids only where a token terminal reads them;
  // end-of-sequence ids also when can_stop(); padded rows never. After an accepted end-of-sequence token
  // the mask is empty. Throws InputError when mask has fewer than mask_words() words.
  void fill_next_token_bitmask(std::span<std::uint32_t> mask);

  // Accepts one token: true and advanced when allowed, false and unchanged otherwise. An end-of-sequence
  // id ends the output (is_terminated) unless a token terminal reads it next. Throws InputError on an id
  // outside [0, n_rows).
  bool accept_token(TokenId id);
  // Accepts raw bytes (a forced continuation, a prefill): true and advanced, or false and unchanged.
  // Counts as one step for rollback.
  bool accept_bytes(std::string_view bytes);
  // Undoes the last n accepted steps (tokens or accept_bytes calls). Throws InputError when n exceeds
  // n_steps() (state unchanged).
  void rollback(std::size_t n);
  std::size_t n_steps() const { return history_.size(); }
  // An independent copy: what one accepts never shows in the other.
  Matcher fork() const { return *this; }
  // Back to the start of the grammar.
  void reset();

  // The output so far is a sentence of the grammar (an end-of-sequence token is allowed now).
  bool can_stop() const;
  // can_stop() and no byte or token terminal can extend the output (or an end-of-sequence token was
  // accepted).
  bool must_stop() const;
  // True once an end-of-sequence token was accepted.
  bool is_terminated() const { return terminated_; }
  // The longest byte string that every valid continuation starts with (empty when the output may stop
  // here, the next byte is not determined, or a token terminal may come next); at most max_bytes. The
  // state is unchanged.
  std::string forced_continuation(std::size_t max_bytes = 4096);
  // Bytes accepted so far (a token read only by a token terminal counts as one).
  std::size_t n_bytes() const;
  const CompiledGrammar& grammar() const { return grammar_; }

  Matcher(const Matcher& other);
  Matcher& operator=(const Matcher& other);
  Matcher(Matcher&&) noexcept;
  Matcher& operator=(Matcher&&) noexcept;
  ~Matcher();

  struct Scratch;  // reused buffers of the mask fill; not part of the value

 private:
  CompiledGrammar grammar_;
  const CompiledGrammar::Impl* impl_;
  std::unique_ptr<detail::Chart> chart_;  // the Earley sets of the bytes accepted so far
  std::vector<std::uint32_t> history_;    // number of sets before each step
  bool terminated_ = false;
  std::unique_ptr<Scratch> scratch_;

  // Or-s in the ids the token edges of the last set read.
  void allow_token_edges(std::span<std::uint32_t> mask) const;
  // Resolves uncertain tokens through the callers of (rule, origin), recursively (matcher.cpp).
  void resolve_up(std::vector<std::uint32_t>& chain, const detail::UncertainView& below, std::uint32_t rule,
                  std::uint32_t origin, std::size_t depth, std::size_t& budget, std::span<std::uint32_t> mask,
                  std::size_t& lo_word, std::size_t& hi_word);
};

// Fills masks[i * words .. (i + 1) * words) for matchers[i] (words = the matchers' mask_words(), all
// equal), spread over `pool` (nullptr: on the calling thread). Throws InputError on a size mismatch;
// the first error of a matcher is rethrown once all are done.
void fill_next_token_bitmasks(std::span<Matcher* const> matchers, std::span<std::uint32_t> masks,
                              ThreadPool* pool);

}  // namespace pse
