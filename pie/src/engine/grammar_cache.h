// Compiled constraints for one model: a pse::Compiler (an LRU cache by grammar content) per set of
// grammar_special_tokens, since those change the vocabulary the grammar is compiled against. Thread-safe:
// submit() compiles on the caller's thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "pie/engine.h"
#include "pse/compiler.h"
#include "tokenizers/tokenizer.h"

namespace pie::detail {

struct GrammarCacheStats {
  std::uint64_t compiles = 0, hits = 0;
  double compile_seconds = 0;
  std::size_t cached_bytes = 0;  // as of the last compile
};

class GrammarCache {
 public:
  // n_rows: the model's logits rows. capacity: grammars kept per compiler; max_bytes: their bytes, over
  // every compiler (0: no bound).
  GrammarCache(std::shared_ptr<const tokenizers::Tokenizer> tokenizer, std::size_t n_rows,
               pse::CompileOptions options, std::size_t capacity, std::size_t max_bytes);
  // Throws RequestError (param "grammar", or "grammar_special_tokens"; code as pse's error kind) for any
  // pse error, CancelledError when `cancelled` stopped the compile.
  pse::CompiledGrammar compile(const pse::Grammar& grammar, const std::vector<std::string>& special_tokens,
                               const std::function<bool()>& cancelled = {});
  // The same, throwing pse errors as they are, and saying whether the cache had it and how long it took.
  CompiledConstraint compile_typed(const pse::Grammar& grammar, const std::vector<std::string>& special_tokens,
                                   const std::function<bool()>& cancelled = {});
  GrammarCacheStats stats() const;
  // Re-applies the byte bound (grammars grow as their tables are built after compile); the engine loop
  // calls it every step.
  void trim();

 private:
  std::shared_ptr<pse::Compiler> compiler_for(const std::vector<std::string>& special_tokens);
  void trim_locked(const pse::Compiler* in_use);  // holding mutex_

  std::shared_ptr<const tokenizers::Tokenizer> tokenizer_;
  std::size_t n_rows_;
  pse::CompileOptions options_;
  std::size_t capacity_;
  std::size_t max_bytes_;
  mutable std::mutex mutex_;
  // Key: the sorted special-token texts joined by '\0'. Few distinct sets exist (one per tool format).
  std::map<std::string, std::shared_ptr<pse::Compiler>> compilers_;
  GrammarCacheStats stats_;
};

}  // namespace pie::detail
