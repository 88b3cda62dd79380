// Every token table of a grammar built ahead of its masks: in compile() over the compile pool, or after
// compile() returns on background threads (TableBuild::kInBackground). Either way the tables
// are taken in chunks of consecutive tables (walks of neighbouring states meet the same configurations),
// each thread walking on its own stack automaton, and a table is derived from its base (table_base) only
// once the base is published: the tables are the same whatever the number of threads.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "pse/compiler.h"
#include "stack_dfa.h"
#include "token_table.h"

namespace pse::detail {

// The tables built ahead so far as they came out of the walk (a shared one before this grammar's follow
// filter; null for the others, which are in Impl::tables), each published by its `done` flag.
struct EagerBuild {
  std::vector<std::shared_ptr<const TokenTable>> as_built;
  std::unique_ptr<std::atomic<std::uint8_t>[]> done;
  explicit EagerBuild(std::size_t n_tables)
      : as_built(n_tables), done(std::make_unique<std::atomic<std::uint8_t>[]>(n_tables)) {}
};

// One thread's part of it: its own stack automaton, and per base table (table_base) built, its
// long_tokens_read_far, found at its first derived table.
struct EagerWorker {
  StackDfa* dfa = nullptr;
  std::unordered_map<std::uint32_t, std::vector<std::uint32_t>> read_far;
};

// One build of every table ahead: the chunks still to take, the bounds, and what the built tables add up
// to. A bound reached stops it; the tables not built then are built at first use.
struct TablesAhead {
  TablesAhead(std::size_t n_tables, Deadline deadline, std::size_t memory_bytes,
              std::size_t max_memory_bytes)
      : eager(n_tables), deadline(deadline), max_memory_bytes(max_memory_bytes), memory_bytes(memory_bytes) {}
  static constexpr std::size_t kChunk = 4;
  static constexpr std::size_t kNone = ~std::size_t{0};

  EagerBuild eager;
  const Deadline deadline;
  const std::size_t max_memory_bytes;
  std::atomic<std::size_t> next_chunk{0};
  std::atomic<bool> stopped{false};
  std::atomic<std::size_t> memory_bytes, n_uncertain{0}, n_shared{0};
  std::atomic<std::size_t> over_memory_at{kNone};  // the table that took memory past the bound

  // On background threads: one stack automaton per thread that joined (its slot), freed when the last
  // one leaves; `finished` once every chunk is taken and no thread builds any more (under mutex).
  std::mutex mutex;
  std::condition_variable finished_cv;
  std::vector<std::unique_ptr<StackDfa>> dfas;
  std::size_t active = 0;
  bool finished = false;
  std::chrono::steady_clock::time_point started;
  double ms = 0;  // from compile()'s return to the end of the build
};

// Builds every table in compile() over options.threads threads (the first walking on impl.dfa, kept for
// the tables built later). Past the deadline, the tables not built are left to first use. Throws
// LimitError when the tables need more than options.max_memory_bytes. Fills the tables' stats.
void build_tables_ahead(CompiledGrammar::Impl& impl, const CompileOptions& options,
                        Deadline deadline);

// Queues the build of every table on the process-wide background threads (one per core, at most 8;
// options.threads caps how many take this grammar) and returns. A thread holds the grammar only while it
// builds a chunk: a grammar dropped meanwhile is built no further. A mask that needs a table not built
// yet builds it, or waits for the thread building it (the tables' once-flags). Past the deadline or
// options.max_memory_bytes, the build stops: the rest are built at first use.
void build_tables_in_background(const std::shared_ptr<CompiledGrammar::Impl>& impl, const CompileOptions& options,
                                Deadline deadline);

// Blocks until the background build of impl's tables has ended (at once when there is none); returns
// impl's stats with the tables' figures.
CompileStats wait_for_background_tables(const CompiledGrammar::Impl& impl);

}  // namespace pse::detail
