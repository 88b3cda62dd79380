// Grammar + Vocabulary -> CompiledGrammar: the byte automaton of the grammar and, per automaton state
// that reads bytes, the tokens it accepts or rejects whatever the parser stack holds (only the few
// tokens that run past the end of their rule are checked at run time). A CompiledGrammar is immutable,
// thread-safe and cheap to copy (a handle); a Compiler caches them by content hash (LRU).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <list>
#include <unordered_map>

#include "pse/error.h"
#include "pse/grammar.h"
#include "pse/vocabulary.h"

namespace pse {

// When a compiled grammar's token tables are built.
enum class TableBuild {
  // All in compile(): steady masks from the first step, the longest compile.
  kInCompile,
  // On process-wide background threads (one per core but one, at least one, at most 7) after compile()
  // returns, which then takes the automaton and its classes only; the tables in the order of their states.
  // A mask that needs a table not built yet builds it, or waits for the thread building it. The same
  // tables as kInCompile. An automaton of over 8,192 states builds at first use instead (its classes would
  // hold up the first mask).
  kInBackground,
  // Each at its first mask (the shortest compile; the first mask at each state pays for its table).
  kAtFirstUse,
};

struct CompileOptions {
  std::size_t max_rules = 100'000;        // input size limits (LimitError)
  std::size_t max_exprs = 4'000'000;
  std::size_t max_states = 2'000'000;     // automaton states (counted repetitions multiply them)
  double max_compile_ms = 10'000;         // wall-clock bound on compile()
  std::size_t max_memory_bytes = std::size_t{1} << 30;  // automaton + token tables
  // When the token tables are built (TableBuild). With more tables than eager_state_limit (at 100,000,
  // compile takes up to a few seconds), each is built at its first use.
  TableBuild tables = TableBuild::kInCompile;
  std::size_t eager_state_limit = 100'000;
  // Time spent building tables ahead: past it (in compile(), or past half the time left before
  // max_compile_ms), the tables not built yet are built at first use, and compile() still succeeds.
  double eager_table_ms = 10'000;
  // Share token tables with other grammars compiled against the same vocabulary (a process-wide cache
  // keyed by the exact structure of a rule, the rules it calls and the bytes that may follow it;
  // bounded at 512 MiB, tables and the closures that identify them). Each grammar applies its own full
  // follow filter to a table it takes.
  bool shared_tables = true;
  // Threads that build the tables ahead: 0 = one per core (at most 8) from a process-wide pool that one
  // compile uses at a time (a compile that finds it busy builds on its own thread), or all the background
  // threads; 1 = the calling thread only (one background thread). The tables are the same whatever the
  // number.
  std::size_t threads = 0;
  // Polled with the clock wherever max_compile_ms is checked (every few thousand states or tokens):
  // true stops the compile with a LimitError ("cancelled"), e.g. when the client that asked went away.
  // Only while compile() runs: the tables it leaves to the background do not poll it. Not part of the
  // cache key.
  std::function<bool()> cancelled;
};

// Empties the process-wide cache of shared token tables (CompileOptions::shared_tables), e.g. to time
// cold compiles. Compiled grammars keep their tables.
void clear_shared_table_cache();
// Bounds that cache (512 MiB unless set; the least recently used rules are evicted past it, at once too).
// Process-wide: for the program that decides how much memory its grammars may keep (orchard serve).
void set_shared_table_cache_bytes(std::size_t max_bytes);
std::size_t shared_table_cache_bytes();  // held now

struct CompileStats {
  std::size_t n_rules = 0;
  std::size_t n_states = 0;        // automaton states after pruning
  std::size_t n_scan_states = 0;   // reachable states that read bytes
  // Token tables: one per class of those states with the same future; when the classes are found rule by
  // rule at first use (large automata, tables built on first use), one per state, shared once classified.
  std::size_t n_tables = 0;
  std::size_t n_shared_tables = 0; // of those, taken from the shared cache (built by an earlier compile)
  std::size_t n_uncertain = 0;     // tokens left to run-time checks, summed over built tables
  std::size_t memory_bytes = 0;    // automaton + built token tables
  double automaton_ms = 0;
  double classes_ms = 0;   // finding the states with the same future
  double closures_ms = 0;  // identifying the rules shared with other grammars (when tables are built ahead)
  double tables_ms = 0;
  bool precomputed = false;
};

class CompiledGrammar {
 public:
  struct Impl;
  explicit CompiledGrammar(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  const Vocabulary& vocabulary() const;
  const CompileStats& stats() const;  // as compile() left them
  // Bytes held now: the automaton and the token tables built so far (tables built later, in the
  // background or at first use, add to it). Thread-safe.
  std::size_t memory_bytes() const;
  // Blocks until the tables built in the background (TableBuild::kInBackground) are done, or
  // stopped at a bound; returns the stats with the tables' figures (stats() at once without them).
  CompileStats wait_for_tables() const;
  const std::shared_ptr<const Impl>& impl() const { return impl_; }

 private:
  std::shared_ptr<const Impl> impl_;
};

// Compiles without a cache. Throws GrammarError (undefined rule, no root, empty language) or
// LimitError (input size, states, time, memory).
CompiledGrammar compile_grammar(const Grammar& grammar, std::shared_ptr<const Vocabulary> vocabulary,
                                const CompileOptions& options = {});

// A compile cache for one vocabulary, keyed by Grammar::hash() (plus the vocabulary's hash and the
// options), holding at most `capacity` grammars and at most `max_bytes` of them (CompiledGrammar::
// memory_bytes; 0: no byte bound), least recently used evicted first; a grammar larger than max_bytes
// alone is returned without being kept. Grammars grow after compile() (tables built later): the bytes are
// measured at every compile() and trim(). Thread-safe.
class Compiler {
 public:
  Compiler(std::shared_ptr<const Vocabulary> vocabulary, CompileOptions options = {},
           std::size_t capacity = 64, std::size_t max_bytes = 0);
  // Cached compile_grammar; throws as it does (errors are not cached). `cancelled`: as
  // CompileOptions::cancelled, for this call.
  CompiledGrammar compile(const Grammar& grammar);
  CompiledGrammar compile(const Grammar& grammar, const std::function<bool()>& cancelled);
  std::size_t cache_size() const;
  std::size_t cache_hits() const;
  std::size_t cache_bytes() const;  // memory_bytes() summed over the grammars kept
  void clear();                      // forgets every grammar kept (those in use stay valid)
  // Evicts least recently used grammars until the byte bound holds again; returns cache_bytes().
  std::size_t trim();
  const Vocabulary& vocabulary() const { return *vocabulary_; }

 private:
  std::shared_ptr<const Vocabulary> vocabulary_;
  CompileOptions options_;
  std::size_t capacity_;
  std::size_t max_bytes_;
  mutable std::mutex mutex_;
  std::list<std::pair<std::uint64_t, CompiledGrammar>> lru_;  // most recent first
  std::unordered_map<std::uint64_t, std::list<std::pair<std::uint64_t, CompiledGrammar>>::iterator>
      index_;
  std::size_t hits_ = 0;
  std::size_t trim_locked();
};

}  // namespace pse
