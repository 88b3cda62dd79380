// N cold compiles of one GBNF grammar (or regex) with the Llama 3.1 vocabulary, on one thread, for
// instruction counts under callgrind (wall-clock compile figures are BM_GrammarCompile*'s, in
// grammar_mask_bench). One compile's cost, once the process's one-time work (the vocabulary's set indexes)
// is done, is (I(8) - I(4)) / 4:
//   valgrind --tool=callgrind --callgrind-out-file=/dev/null build/tests/bench/grammar_compile_loop FILE 4
//   valgrind --tool=callgrind --callgrind-out-file=/dev/null build/tests/bench/grammar_compile_loop FILE 8
// (--regex PATTERN instead of FILE: the pattern, as `orchard grammar --regex`.)
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

#include "llama3_vocabulary.h"
#include "pse/compiler.h"
#include "pse/gbnf.h"
#include "pse/regex.h"

int main(int argc, char** argv) {
  const bool regex = argc == 4 && std::string(argv[1]) == "--regex";
  if (argc != 3 && !regex) {
    std::fprintf(stderr, "usage: grammar_compile_loop (GBNF_FILE | --regex PATTERN) N\n");
    return 2;
  }
  const char* const count = argv[argc - 1];
  char* end = nullptr;
  const long n = std::strtol(count, &end, 10);
  if (end == count || *end != '\0' || n < 1) {
    std::fprintf(stderr, "grammar_compile_loop: N must be a positive integer, got '%s'\n", count);
    return 2;
  }
  try {
    const char* env = std::getenv("ORCHARD_SHARED_DATA");
    const std::string data = env != nullptr && *env != '\0' ? env : ORCHARD_DEFAULT_SHARED_DATA;
    auto vocab = pse::testing::load_llama3_vocabulary(data + "/tokenizers/llama3/encoder.json");
    std::stringstream text;
    if (!regex) {
      std::ifstream in(argv[1]);
      if (!in) throw std::runtime_error(std::string("cannot open ") + argv[1]);
      text << in.rdbuf();
    }
    const pse::Grammar grammar = regex ? pse::parse_regex(argv[2]) : pse::parse_gbnf(text.str());
    pse::CompileOptions cold;  // as BM_GrammarCompileOneThread: nothing shared with earlier compiles
    cold.shared_tables = false;
    cold.threads = 1;
    std::size_t n_tables = 0;
    for (long i = 0; i < n; ++i) n_tables = pse::compile_grammar(grammar, vocab, cold).stats().n_tables;
    std::printf("%ld compiles, %zu token tables each\n", n, n_tables);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "grammar_compile_loop: %s\n", e.what());
    return 2;
  }
  return 0;
}
