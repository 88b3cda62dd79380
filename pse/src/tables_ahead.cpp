#include "tables_ahead.h"

#include <algorithm>
#include <deque>
#include <thread>

#include <fmt/format.h>

#include "compiled_grammar_impl.h"
#include "pse/thread_pool.h"
#include "table_cache.h"

namespace pse::detail {

namespace {

using Impl = CompiledGrammar::Impl;

constexpr std::size_t kMaxThreads = 8;
std::size_t threads_per_core() {
  return std::min<std::size_t>(kMaxThreads, std::max(1u, std::thread::hardware_concurrency()));
}

// The threads of compile(): one pool per process, used by one compile at a time; a compile that finds it
// busy builds on its own thread.
struct CompilePool {
  std::mutex busy;
  ThreadPool pool{threads_per_core()};
};

CompilePool& compile_pool() {
  static CompilePool pool;
  return pool;
}

// A stack automaton for one thread's walks, sized for building every table.
std::unique_ptr<StackDfa> walk_dfa(const Impl& impl) {
  auto dfa = std::make_unique<StackDfa>(impl.automaton, Impl::kMaxCompileConfigs);
  if (!impl.canonical_states.empty()) dfa->set_canonical_states(&impl.canonical_states);
  dfa->set_selective_records(true);  // (StackDfa::keeps_groups)
  return dfa;
}

// Builds the tables of the next chunk not taken (skipping those already built at first use). Returns
// false when none is left or a bound has stopped the build.
bool build_next_chunk(const Impl& impl, TablesAhead& ahead, EagerWorker& worker) {
  const std::size_t n_tables = impl.table_state.size();
  if (ahead.stopped.load(std::memory_order_relaxed)) return false;
  const std::size_t lo = ahead.next_chunk++ * TablesAhead::kChunk;
  if (lo >= n_tables) return false;
  for (std::size_t i = lo; i < std::min(n_tables, lo + TablesAhead::kChunk); ++i) {
    if (ahead.deadline.passed()) {
      ahead.stopped = true;
      return false;
    }
    try {
      std::call_once(impl.table_once[i], [&] {
        if (impl.build_table(i, &ahead.deadline, &ahead.eager, &worker)) ++ahead.n_shared;
      });
    } catch (const LimitError&) {
      ahead.stopped = true;  // its build passed the deadline: it and the rest at first use
      return false;
    }
    ahead.n_uncertain += impl.tables[i].uncertain.size();
    if ((ahead.memory_bytes += impl.tables[i].memory_bytes()) > ahead.max_memory_bytes) {
      std::size_t none = TablesAhead::kNone;
      ahead.over_memory_at.compare_exchange_strong(none, i);
      ahead.stopped = true;
      return false;
    }
  }
  return true;
}

// The background threads: a queue of grammars, each entered once per thread it may use.
class BackgroundBuilders {
 public:
  static BackgroundBuilders& instance() {
    static BackgroundBuilders builders;
    return builders;
  }
  std::size_t n_threads() const { return threads_.size(); }
  void submit(const std::shared_ptr<const Impl>& impl, std::size_t n_entries) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (std::size_t k = 0; k < n_entries; ++k) queue_.push_back(impl);
    }
    cv_.notify_all();
  }

 private:
  BackgroundBuilders() {
    (void)TableCache::instance();  // constructed first, so destroyed after the threads are joined
    // A core left to the masks (and the forward pass) that come while the tables are built. (At the
    // normal priority: a mask that waits on a table's once-flag must not wait on a starved thread.)
    const std::size_t n = std::max<std::size_t>(1, threads_per_core() - 1);
    for (std::size_t t = 0; t < n; ++t) threads_.emplace_back([this] { loop(); });
  }
  ~BackgroundBuilders() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
      queue_.clear();
    }
    cv_.notify_all();
    for (std::thread& t : threads_) t.join();
  }
  void loop() {
    for (;;) {
      std::weak_ptr<const Impl> entry;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (stop_) return;
        entry = std::move(queue_.front());
        queue_.pop_front();
      }
      build(entry);
    }
  }
  // Joins the grammar's build with a stack automaton of its own, then builds chunks, holding the grammar
  // only while it builds one. The last thread to leave marks the build finished.
  void build(const std::weak_ptr<const Impl>& entry) {
    std::size_t slot;
    EagerWorker worker;
    if (std::shared_ptr<const Impl> impl = entry.lock()) {
      TablesAhead& ahead = *impl->background;
      std::lock_guard<std::mutex> lock(ahead.mutex);
      if (ahead.finished) return;
      slot = ahead.dfas.size();
      ahead.dfas.push_back(walk_dfa(*impl));  // (reserved: the vector never moves)
      ++ahead.active;
    } else {
      return;
    }
    for (;;) {
      const std::shared_ptr<const Impl> impl = entry.lock();
      if (impl == nullptr) return;  // dropped: its build went with it
      TablesAhead& ahead = *impl->background;
      worker.dfa = ahead.dfas[slot].get();
      bool more = false;
      try {
        more = build_next_chunk(*impl, ahead, worker);
      } catch (...) {  // (out of memory: the rest at first use, where the error reaches a caller)
        ahead.stopped = true;
      }
      if (more && stop_requested()) {  // the process is exiting
        ahead.stopped = true;
        more = false;
      }
      if (!more) {
        leave(ahead);
        return;
      }
    }
  }
  static void leave(TablesAhead& ahead) {
    std::lock_guard<std::mutex> lock(ahead.mutex);
    if (--ahead.active > 0) return;
    ahead.finished = true;
    ahead.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - ahead.started).count();
    ahead.dfas.clear();
    ahead.dfas.shrink_to_fit();
    ahead.eager.as_built = {};
    ahead.finished_cv.notify_all();
  }
  bool stop_requested() {
    std::lock_guard<std::mutex> lock(mutex_);
    return stop_;
  }

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::weak_ptr<const Impl>> queue_;
  std::vector<std::thread> threads_;
  bool stop_ = false;
};

}  // namespace

void build_tables_ahead(Impl& impl, const CompileOptions& options, Deadline deadline) {
  CompileStats& st = impl.stats;
  const std::size_t n_tables = impl.table_state.size();
  const std::size_t n_chunks = (n_tables + TablesAhead::kChunk - 1) / TablesAhead::kChunk;
  std::size_t n_threads = options.threads == 0 ? kMaxThreads : options.threads;
  n_threads = std::max<std::size_t>(1, std::min(n_threads, n_chunks));  // (one, also with no table)
  std::unique_lock<std::mutex> pool_lock;
  if (n_threads > 1) {
    pool_lock = std::unique_lock<std::mutex>(compile_pool().busy, std::try_to_lock);
    n_threads = pool_lock.owns_lock() ? std::min(n_threads, compile_pool().pool.n_threads()) : 1;
  }
  std::vector<std::unique_ptr<StackDfa>> dfas(n_threads);
  dfas[0] = std::move(impl.dfa);
  dfas[0]->set_selective_records(true);
  for (std::size_t w = 1; w < n_threads; ++w) dfas[w] = walk_dfa(impl);
  TablesAhead ahead(n_tables, deadline, st.memory_bytes, options.max_memory_bytes);
  auto work = [&](std::size_t w) {
    EagerWorker worker;
    worker.dfa = dfas[w].get();
    while (build_next_chunk(impl, ahead, worker)) {
    }
  };
  if (n_threads == 1) {
    work(0);
  } else {
    compile_pool().pool.parallel_for(n_threads, work);
  }
  impl.dfa = std::move(dfas[0]);
  if (const std::size_t at = ahead.over_memory_at.load(); at != TablesAhead::kNone) {
    throw LimitError(fmt::format("[compile] token tables need over {} bytes, the limit (table {} of {})",
                                 options.max_memory_bytes, at + 1, n_tables));
  }
  st.precomputed = !ahead.stopped;
  st.memory_bytes = ahead.memory_bytes;
  st.n_uncertain = ahead.n_uncertain;
  st.n_shared_tables = ahead.n_shared;
}

void build_tables_in_background(const std::shared_ptr<Impl>& impl, const CompileOptions& options,
                                Deadline deadline) {
  const std::size_t n_tables = impl->table_state.size();
  const std::size_t n_chunks = (n_tables + TablesAhead::kChunk - 1) / TablesAhead::kChunk;
  BackgroundBuilders& builders = BackgroundBuilders::instance();
  std::size_t n_threads =
      options.threads == 0 ? builders.n_threads() : std::min(options.threads, builders.n_threads());
  n_threads = std::min(n_threads, n_chunks);
  impl->background =
      std::make_unique<TablesAhead>(n_tables, deadline, impl->stats.memory_bytes, options.max_memory_bytes);
  TablesAhead& ahead = *impl->background;
  ahead.started = std::chrono::steady_clock::now();
  ahead.dfas.reserve(n_threads);
  if (n_threads == 0) {
    ahead.finished = true;  // no table
    return;
  }
  builders.submit(impl, n_threads);
}

CompileStats wait_for_background_tables(const Impl& impl) {
  CompileStats st = impl.stats;
  if (impl.background == nullptr) return st;
  TablesAhead& ahead = *impl.background;
  std::unique_lock<std::mutex> lock(ahead.mutex);
  ahead.finished_cv.wait(lock, [&] { return ahead.finished; });
  st.precomputed = !ahead.stopped;
  st.memory_bytes = ahead.memory_bytes;
  st.n_uncertain = ahead.n_uncertain;
  st.n_shared_tables = ahead.n_shared;
  st.tables_ms += ahead.ms;
  return st;
}

}  // namespace pse::detail
