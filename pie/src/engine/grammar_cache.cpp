#include "grammar_cache.h"

#include <algorithm>
#include <chrono>

#include "pie/error.h"
#include "pie/grammar_vocabulary.h"
#include "pse/error.h"

namespace pie::detail {

GrammarCache::GrammarCache(std::shared_ptr<const tokenizers::Tokenizer> tokenizer, std::size_t n_rows,
                           pse::CompileOptions options, std::size_t capacity)
    : tokenizer_(std::move(tokenizer)), n_rows_(n_rows), options_(options), capacity_(capacity) {}

std::shared_ptr<pse::Compiler> GrammarCache::compiler_for(const std::vector<std::string>& special_tokens) {
  std::vector<std::string> sorted = special_tokens;
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  std::string key;
  for (const std::string& s : sorted) key += s + '\0';
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = compilers_.find(key);
  if (it != compilers_.end()) return it->second;
  // Bounded: a client cycling through special-token sets cannot grow this without limit.
  if (compilers_.size() >= 16) compilers_.clear();
  auto compiler = std::make_shared<pse::Compiler>(grammar_vocabulary(*tokenizer_, n_rows_, sorted), options_,
                                                  capacity_);
  compilers_.emplace(key, compiler);
  return compiler;
}

CompiledConstraint GrammarCache::compile_typed(const pse::Grammar& grammar,
                                               const std::vector<std::string>& special_tokens) {
  auto compiler = compiler_for(special_tokens);
  const std::size_t hits_before = compiler->cache_hits();
  const auto t0 = std::chrono::steady_clock::now();
  pse::CompiledGrammar compiled = compiler->compile(grammar);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const bool cached = compiler->cache_hits() > hits_before;
  std::lock_guard<std::mutex> lock(mutex_);
  if (cached) {
    ++stats_.hits;
  } else {
    ++stats_.compiles;
    stats_.compile_seconds += seconds;
  }
  return {std::move(compiled), cached, seconds};
}

pse::CompiledGrammar GrammarCache::compile(const pse::Grammar& grammar,
                                           const std::vector<std::string>& special_tokens) {
  try {
    return compile_typed(grammar, special_tokens).grammar;
  } catch (const pse::Error& e) {
    throw RequestError(std::string("[request] grammar: ") + e.what(), "grammar");
  }
}

GrammarCacheStats GrammarCache::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

}  // namespace pie::detail
