#include "grammar_cache.h"

#include <algorithm>
#include <chrono>

#include "pie/error.h"
#include "pie/grammar_vocabulary.h"
#include "pse/error.h"

namespace pie::detail {

namespace {

// The API's code for a pse error: what kind of fault the client has to fix.
const char* pse_error_code(const pse::Error& e) {
  if (const auto* s = dynamic_cast<const pse::SchemaError*>(&e)) {
    return s->keyword().empty() ? "invalid_schema" : "unsupported_schema_keyword";
  }
  if (dynamic_cast<const pse::LimitError*>(&e) != nullptr) return "constraint_too_large";
  return "invalid_grammar";
}

}  // namespace

GrammarCache::GrammarCache(std::shared_ptr<const tokenizers::Tokenizer> tokenizer, std::size_t n_rows,
                           pse::CompileOptions options, std::size_t capacity, std::size_t max_bytes)
    : tokenizer_(std::move(tokenizer)), n_rows_(n_rows), options_(std::move(options)), capacity_(capacity),
      max_bytes_(max_bytes) {}

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
                                                  capacity_, max_bytes_);
  compilers_.emplace(key, compiler);
  return compiler;
}

CompiledConstraint GrammarCache::compile_typed(const pse::Grammar& grammar,
                                               const std::vector<std::string>& special_tokens,
                                               const std::function<bool()>& cancelled) {
  auto compiler = compiler_for(special_tokens);
  const std::size_t hits_before = compiler->cache_hits();
  const auto t0 = std::chrono::steady_clock::now();
  pse::CompiledGrammar compiled = compiler->compile(grammar, cancelled);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const bool cached = compiler->cache_hits() > hits_before;
  std::lock_guard<std::mutex> lock(mutex_);
  if (cached) {
    ++stats_.hits;
  } else {
    ++stats_.compiles;
    stats_.compile_seconds += seconds;
  }
  trim_locked(compiler.get());
  return {std::move(compiled), cached, seconds};
}

pse::CompiledGrammar GrammarCache::compile(const pse::Grammar& grammar,
                                           const std::vector<std::string>& special_tokens,
                                           const std::function<bool()>& cancelled) {
  try {
    return compile_typed(grammar, special_tokens, cancelled).grammar;
  } catch (const pse::Error& e) {
    if (cancelled && cancelled()) throw CancelledError("[request] the grammar's compile was cancelled");
    throw RequestError(std::string("[request] grammar: ") + e.what(), "grammar", pse_error_code(e));
  }
}

void GrammarCache::trim() {
  std::lock_guard<std::mutex> lock(mutex_);
  trim_locked(nullptr);
}

void GrammarCache::trim_locked(const pse::Compiler* in_use) {
  // One byte bound over every compiler: each keeps its own, and past it in sum the caches of the others
  // are emptied (a client rarely mixes special-token sets).
  std::size_t bytes = 0;
  for (const auto& [key, c] : compilers_) bytes += c->trim();
  if (max_bytes_ > 0 && bytes > max_bytes_) {
    bytes = 0;
    for (const auto& [key, c] : compilers_) {
      if (c.get() != in_use) c->clear();
      bytes += c->cache_bytes();
    }
  }
  stats_.cached_bytes = bytes;
}

GrammarCacheStats GrammarCache::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

}  // namespace pie::detail
