#include "pse/compiler.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "compiled_grammar_impl.h"
#include "stack_dfa.h"
#include "state_classes.h"
#include "tables_ahead.h"
#include "vocabulary_index.h"

namespace pse {

namespace {

// Past this many states (an automaton's, or with classes found rule by rule, a rule's) the tables are not
// shared between equivalent states (the partition refinement's cost grows with the automaton, 0.2-0.4 us
// a state). Below it, a large counted repetition's copies share their tables: a 558,000-state
// schema (a pattern of up to 100 words in 300 characters) classified in 222 ms and then built 208,000
// tables instead of 548,000, its masks over 0.5 ms 182 -> 66.
constexpr std::size_t kMaxStatesToClassify = 1'048'576;
// With tables built on first use, smaller automata go without the classes; larger ones find them rule by
// rule (a state's class depends on its rule alone), each rule at its first table, but for the rules of at
// least kMinRuleStatesToClassifyInCompile states, classified in compile so that no mask waits for long.
// (Classifying also the rules whose states a table's walks meet, so that they share configurations as
// in an eager compile, cost 5% more mask instructions on the dev schemas over 8,192 states.)
// A Kubernetes schema of 41,000 states in 511 rules (at most 1,760 states each) spent 7 ms of its 19 ms
// compile on classes that saved 9% of its tables; counted repetitions concentrate in large rules.
constexpr std::size_t kMinStatesToClassifyLazily = 8'192;
constexpr std::size_t kMinRuleStatesToClassifyInCompile = 4'096;

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

std::uint64_t options_hash(const CompileOptions& o) {
  std::uint64_t h = 0x9e3779b97f4a7c15ULL;
  for (std::uint64_t v : {std::uint64_t(o.max_rules), std::uint64_t(o.max_exprs), std::uint64_t(o.max_states),
                          std::uint64_t(o.max_compile_ms * 1000), std::uint64_t(o.max_memory_bytes),
                          std::uint64_t(o.tables == TableBuild::kAtFirstUse), std::uint64_t(o.eager_state_limit),
                          std::uint64_t(o.eager_table_ms * 1000),
                          std::uint64_t(o.shared_tables)}) {  // (not threads: the same tables)
    h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  }
  return h;
}

}  // namespace

const Vocabulary& CompiledGrammar::vocabulary() const { return *impl_->vocabulary; }
const CompileStats& CompiledGrammar::stats() const { return impl_->stats; }
CompileStats CompiledGrammar::wait_for_tables() const { return detail::wait_for_background_tables(*impl_); }

namespace {

CompiledGrammar compile_bounded(const Grammar& grammar, std::shared_ptr<const Vocabulary> vocabulary,
                                const CompileOptions& options) {
  if (vocabulary == nullptr) throw InputError("[compile] no vocabulary given");
  if (!(options.eager_table_ms >= 0)) {
    throw InputError(fmt::format("[compile] eager_table_ms must be >= 0, got {}", options.eager_table_ms));
  }
  if (grammar.rules().size() > options.max_rules) {
    throw LimitError(fmt::format("[compile] the grammar has {} rules, over the limit of {}",
                                 grammar.rules().size(), options.max_rules));
  }
  if (grammar.exprs().size() > options.max_exprs) {
    throw LimitError(fmt::format("[compile] the grammar has {} expressions, over the limit of {}",
                                 grammar.exprs().size(), options.max_exprs));
  }
  const auto t0 = std::chrono::steady_clock::now();
  const detail::Deadline deadline{
      t0 + std::chrono::microseconds(static_cast<std::int64_t>(options.max_compile_ms * 1000)),
      options.cancelled ? &options.cancelled : nullptr};
  auto impl = std::make_shared<CompiledGrammar::Impl>();
  impl->vocabulary = std::move(vocabulary);
  detail::AutomatonLimits limits;
  limits.max_states = options.max_states;
  limits.deadline = deadline;
  impl->automaton = detail::build_automaton(grammar, limits);
  const detail::Automaton& a = impl->automaton;
  impl->token_sets = detail::resolve_token_sets(grammar, a, *impl->vocabulary);
  CompileStats& st = impl->stats;
  st.n_rules = grammar.rules().size();
  st.n_states = a.n_states();
  st.automaton_ms = ms_since(t0);

  // One table per class of states with the same future (up to the longest token), built from the
  // class's first state; one per state when classes are not computed.
  impl->scan_index.assign(a.n_states(), CompiledGrammar::Impl::kNoTable);
  const auto t_classes = std::chrono::steady_clock::now();
  std::vector<std::uint32_t> classes;
  // The classes up to the short tokens' length (VocabularyIndex::kShortTokenBytes), which `classes` refine:
  // tables of one such class differ only in the long tokens (the positions of a counted repetition).
  std::vector<std::uint32_t> short_classes;
  // Classes save table builds but cost a pass over the automaton: worth it when every table is built
  // ahead (all rules at once, here), or in a large automaton (a counted repetition's copies would each
  // build their tables at first use; rule by rule, below). For a small one built on first use, tables
  // of states reaching the same configuration after a first byte already share their walks (StackDfa's
  // group memo), and compile stays short.
  // In the background only below kMinStatesToClassifyLazily states: the classes of a larger automaton
  // would hold up its first mask (on MaskBench's dev split, TTFM p99 21 -> 45 ms), so its tables are
  // built at first use, with classes found rule by rule.
  const bool first_use = options.tables == TableBuild::kAtFirstUse ||
                         (options.tables == TableBuild::kInBackground && a.n_states() > kMinStatesToClassifyLazily);
  const bool classify = !first_use && a.n_states() <= kMaxStatesToClassify;
  const bool lazy_classes = first_use && a.n_states() > kMinStatesToClassifyLazily;
  if (classify) {
    // Optional: past a quarter of the time left, go without them.
    const detail::Deadline classes_deadline = deadline.by(t_classes + (deadline.at - t_classes) / 4);
    try {
      const std::size_t horizon = impl->vocabulary->index().max_token_length();
      const bool short_horizon = horizon > VocabularyIndex::kShortTokenBytes;
      classes = detail::future_classes(a, horizon, 256, &classes_deadline, VocabularyIndex::kShortTokenBytes,
                                       short_horizon ? &short_classes : nullptr);
    } catch (const LimitError&) {
      classes.clear();
      short_classes.clear();
    }
  }
  // Class ids are dense from 0: per class, its first state and its table.
  constexpr std::uint32_t kNone = ~0u;
  std::vector<std::uint32_t> class_table;
  if (!classes.empty()) {
    const std::uint32_t n_classes = *std::max_element(classes.begin(), classes.end()) + 1;
    std::vector<std::uint32_t> representative(n_classes, kNone);
    impl->canonical_states.resize(a.n_states());
    for (std::uint32_t s = 0; s < a.n_states(); ++s) {
      if (representative[classes[s]] == kNone) representative[classes[s]] = s;
      impl->canonical_states[s] = representative[classes[s]];
    }
    class_table.assign(n_classes, kNone);
  }
  for (std::uint32_t s = 0; s < a.n_states(); ++s) {
    if (!a.reachable[s] || !a.has_bytes(s)) continue;
    if (!classes.empty()) {
      std::uint32_t& t = class_table[classes[s]];
      if (t != kNone) {
        impl->scan_index[s] = t;
        continue;
      }
      t = static_cast<std::uint32_t>(impl->table_state.size());
    }
    impl->scan_index[s] = static_cast<std::uint32_t>(impl->table_state.size());
    impl->table_state.push_back(s);
  }
  if (!short_classes.empty()) {
    const std::uint32_t n_short = *std::max_element(short_classes.begin(), short_classes.end()) + 1;
    std::vector<std::uint32_t> first_table(n_short, kNone);
    impl->table_base.assign(impl->table_state.size(), CompiledGrammar::Impl::kNoTable);
    for (std::uint32_t i = 0; i < impl->table_state.size(); ++i) {
      std::uint32_t& first = first_table[short_classes[impl->table_state[i]]];
      if (first == kNone) {
        first = i;
      } else {
        impl->table_base[i] = first;
      }
    }
  }
  if (lazy_classes) {
    // A table slot per state for now; each rule's classes point its states at their class's first table.
    impl->classes_by_rule = true;
    impl->class_horizon = impl->vocabulary->index().max_token_length();
    impl->canonical_states.resize(a.n_states());
    for (std::uint32_t s = 0; s < a.n_states(); ++s) impl->canonical_states[s] = s;
    impl->rule_classified = std::make_unique<std::atomic<std::uint8_t>[]>(a.rule_start.size());
    const detail::Deadline classes_deadline = deadline.by(t_classes + (deadline.at - t_classes) / 4);
    std::lock_guard<std::mutex> lock(impl->dfa_mutex);
    for (std::uint32_t r = 0; r < a.rule_start.size(); ++r) {
      if (a.rule_final[r] >= a.n_states()) continue;  // unproductive: no table
      const std::size_t size = std::size_t{a.rule_final[r]} + 1 - a.rule_start[r];
      if (size < kMinRuleStatesToClassifyInCompile) continue;
      if (size > kMaxStatesToClassify || classes_deadline.passed()) {
        impl->mark_classified(r);  // goes without
      } else {
        impl->classify_rule_locked(r, &classes_deadline);
      }
    }
  }
  st.classes_ms = ms_since(t_classes);
  const std::size_t n_tables = impl->table_state.size();
  // Tables of rules small enough to be identified exactly are shared with other grammars: each rule
  // is identified at its first table build (all of them here when every table is built ahead).
  impl->vocabulary_hash = impl->vocabulary->hash();
  impl->share_tables = options.shared_tables;
  if (options.shared_tables) {
    impl->rule_shared.resize(a.rule_start.size());
    impl->rule_shared_once = std::make_unique<std::once_flag[]>(a.rule_start.size());
  }
  st.n_scan_states = static_cast<std::size_t>(std::count_if(
      impl->scan_index.begin(), impl->scan_index.end(), [](std::uint32_t i) { return i != CompiledGrammar::Impl::kNoTable; }));
  st.n_tables = n_tables;
  impl->tables.resize(n_tables);
  impl->table_once = std::make_unique<std::once_flag[]>(n_tables);
  st.memory_bytes = a.memory_bytes() + impl->scan_index.size() * 4 +
                    n_tables * (sizeof(detail::TokenTable) + sizeof(std::once_flag) + 4) +
                    impl->token_sets.size() * impl->vocabulary->n_mask_words() * 4;
  impl->base_memory_bytes = st.memory_bytes;
  if (st.memory_bytes > options.max_memory_bytes) {
    throw LimitError(fmt::format("[compile] the automaton needs {} bytes, over the limit of {}",
                                 st.memory_bytes, options.max_memory_bytes));
  }

  const auto t1 = std::chrono::steady_clock::now();
  // One stack automaton for all the builds, eager and on first use: walks from neighbouring states
  // meet the same configurations, built once.
  // Larger while compile() builds every table (configurations met by one walk serve the next ones);
  // cut back to the bound kept with the grammar afterwards.
  impl->dfa = std::make_unique<detail::StackDfa>(a, CompiledGrammar::Impl::kMaxCompileConfigs);
  // (With classes found rule by rule, a rule's states are their own representatives until it is
  // classified: walks that meet them then share less, never wrongly.)
  if (!impl->canonical_states.empty()) impl->dfa->set_canonical_states(&impl->canonical_states);
  const auto eager_time = std::chrono::microseconds(static_cast<std::int64_t>(options.eager_table_ms * 1000));
  const bool ahead = !first_use && n_tables <= options.eager_state_limit;
  if (ahead && options.tables == TableBuild::kInCompile) {
    const auto t_closures = std::chrono::steady_clock::now();
    for (std::size_t i = 0; i < n_tables; ++i) (void)impl->shared_rule(a.state_rule[impl->table_state[i]]);
    st.closures_ms = ms_since(t_closures);
    detail::build_tables_ahead(*impl, options, deadline.by(std::min(t1 + eager_time, t1 + (deadline.at - t1) / 2)));
  }
  if (impl->dfa->n_configs() > CompiledGrammar::Impl::kMaxSharedConfigs) impl->dfa->clear();
  impl->dfa->set_max_configs(CompiledGrammar::Impl::kMaxSharedConfigs);
  impl->dfa->reset_groups(CompiledGrammar::Impl::kMaxSharedGroupBytes);
  impl->dfa->set_selective_records(false);
  st.tables_ms = ms_since(t1);
  // (The rules shared with other grammars are then identified at their first table.)
  if (ahead && options.tables == TableBuild::kInBackground)
    // (Without the caller's cancellation: the tables serve every later user of the cached grammar.)
    detail::build_tables_in_background(impl, options, detail::Deadline{std::chrono::steady_clock::now() + eager_time});
  return CompiledGrammar(std::move(impl));
}

}  // namespace

CompiledGrammar compile_grammar(const Grammar& grammar, std::shared_ptr<const Vocabulary> vocabulary,
                                const CompileOptions& options) {
  try {
    return compile_bounded(grammar, std::move(vocabulary), options);
  } catch (const LimitError&) {
    // A bound checked with the cancellation says which stopped it.
    if (options.cancelled && options.cancelled()) throw LimitError("[compile] cancelled by the caller");
    throw;
  }
}

std::size_t CompiledGrammar::memory_bytes() const {
  return impl_->base_memory_bytes + impl_->table_bytes.load(std::memory_order_relaxed);
}

void clear_shared_table_cache() { detail::TableCache::instance().clear(); }

void set_shared_table_cache_bytes(std::size_t max_bytes) { detail::TableCache::instance().set_max_bytes(max_bytes); }

std::size_t shared_table_cache_bytes() { return detail::TableCache::instance().bytes(); }

Compiler::Compiler(std::shared_ptr<const Vocabulary> vocabulary, CompileOptions options,
                   std::size_t capacity, std::size_t max_bytes)
    : vocabulary_(std::move(vocabulary)), options_(std::move(options)), capacity_(capacity),
      max_bytes_(max_bytes) {
  if (vocabulary_ == nullptr) throw InputError("[compiler] no vocabulary given");
}

CompiledGrammar Compiler::compile(const Grammar& grammar) { return compile(grammar, options_.cancelled); }

CompiledGrammar Compiler::compile(const Grammar& grammar, const std::function<bool()>& cancelled) {
  std::uint64_t key = grammar.hash();
  key ^= vocabulary_->hash() + 0x9e3779b97f4a7c15ULL + (key << 6) + (key >> 2);
  key ^= options_hash(options_) + 0x9e3779b97f4a7c15ULL + (key << 6) + (key >> 2);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = index_.find(key);
    if (it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      ++hits_;
      CompiledGrammar hit = it->second->second;
      trim_locked();
      return hit;
    }
  }
  // Compiled outside the lock: two threads may compile the same grammar once each; one result is kept.
  CompileOptions options = options_;
  options.cancelled = cancelled;
  CompiledGrammar compiled = compile_grammar(grammar, vocabulary_, options);
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = index_.find(key);
  if (it != index_.end()) {
    lru_.splice(lru_.begin(), lru_, it->second);
    return it->second->second;
  }
  if (capacity_ == 0 || (max_bytes_ > 0 && compiled.memory_bytes() > max_bytes_)) return compiled;
  lru_.emplace_front(key, compiled);
  index_[key] = lru_.begin();
  while (lru_.size() > capacity_) {
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
  trim_locked();
  return compiled;
}

std::size_t Compiler::trim() {
  std::lock_guard<std::mutex> lock(mutex_);
  return trim_locked();
}

std::size_t Compiler::trim_locked() {
  // The grammars' bytes are read afresh: they grow as their tables are built.
  std::size_t bytes = 0;
  for (const auto& entry : lru_) bytes += entry.second.memory_bytes();
  while (max_bytes_ > 0 && bytes > max_bytes_ && !lru_.empty()) {
    bytes -= std::min(bytes, lru_.back().second.memory_bytes());
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
  return bytes;
}

void Compiler::clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  lru_.clear();
  index_.clear();
}

std::size_t Compiler::cache_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::size_t bytes = 0;
  for (const auto& entry : lru_) bytes += entry.second.memory_bytes();
  return bytes;
}

std::size_t Compiler::cache_size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return lru_.size();
}

std::size_t Compiler::cache_hits() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return hits_;
}

}  // namespace pse
