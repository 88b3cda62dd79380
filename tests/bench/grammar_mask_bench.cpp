// Grammar engine benchmarks with the Llama 3.1 vocabulary (128,256 tokens), masks on one thread:
//   BM_GrammarCompile/<grammar>  cold compile (no cache): automaton + token tables, built over the compile
//                                pool (one thread per core, at most 8; CompileOptions::threads = 0)
//   BM_GrammarCompileOneThread/<grammar>  the same on the calling thread only (threads = 1)
//   BM_GrammarMask/<grammar>     one next-token mask at the states met along tokenized valid documents
//                                (round robin); counters p50_us / p99_us / p999_us / max_us from one
//                                timed pass over every state
// Grammars: llama.cpp's json.gbnf (documents: MaskBench instances), arithmetic.gbnf, c.gbnf, and a
// regex-heavy pattern (e-mail + ISO date-time + phone). Run: build/tests/bench/grammar_mask_bench
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "llama3_vocabulary.h"
#include "pse/compiler.h"
#include "pse/gbnf.h"
#include "pse/matcher.h"
#include "pse/regex.h"
#include "tokenizers/tokenizer.h"

namespace {

std::filesystem::path shared_dir() {
  if (const char* env = std::getenv("ORCHARD_SHARED_DATA"); env != nullptr && *env != '\0') return env;
  return ORCHARD_DEFAULT_SHARED_DATA;
}

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

constexpr const char* kRegex =
    "[a-z0-9._]{1,64}@([a-z]{1,63}\\.){1,4}(com|org|net) "
    "(19|20)[0-9]{2}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]Z "
    "\\+[0-9]{1,3} [0-9]{3}-[0-9]{3}-[0-9]{4}";

struct Workload {
  pse::Grammar grammar;
  std::vector<std::string> docs;
};

std::vector<std::string> json_docs(std::size_t n) {
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(shared_dir() / "maskbench-dev")) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  std::vector<std::string> out;
  for (const auto& f : files) {
    nlohmann::json j = nlohmann::json::parse(read_file(f));
    for (const auto& t : j["tests"]) {
      if (t.value("valid", false) && t.contains("text") && t["text"].is_string() &&
          t["text"].get<std::string>().starts_with("{")) {
        out.push_back(t["text"].get<std::string>());
        break;
      }
    }
    if (out.size() >= n) break;
  }
  return out;
}

std::vector<std::string> arithmetic_docs(std::size_t n) {
  std::mt19937 rng(1);
  auto pick = [&](int k) { return static_cast<int>(rng() % k); };
  std::function<std::string(int)> expr;
  auto term = [&](int depth) -> std::string {
    const int r = pick(10);
    const std::string sp = pick(2) ? " " : "";
    if (depth < 3 && r < 2) return "(" + sp + expr(depth + 1) + ")" + sp;
    if (r < 6) return std::to_string(pick(100000)) + sp;
    std::string name(1, "abcxyz"[pick(6)]);
    for (int i = pick(7); i > 0; --i) name += "abc0123_"[pick(8)];
    return name + sp;
  };
  expr = [&](int depth) {
    std::string out = term(depth);
    for (int i = pick(5); i > 0; --i) out += std::string(1, "+-*/"[pick(4)]) + term(depth);
    return out;
  };
  std::vector<std::string> out;
  for (std::size_t i = 0; i < n; ++i) {
    std::string doc;
    for (int k = 2 + pick(5); k > 0; --k) doc += expr(0) + "=" + (pick(2) ? " " : "") + term(2) + "\n";
    out.push_back(doc);
  }
  return out;
}

std::vector<std::string> regex_docs(std::size_t n) {
  std::mt19937 rng(2);
  auto pick = [&](int k) { return static_cast<int>(rng() % k); };
  auto word = [&](const char* alphabet, int lo, int hi) {
    std::string s;
    const int len = lo + pick(hi - lo + 1);
    const int m = static_cast<int>(std::strlen(alphabet));
    for (int i = 0; i < len; ++i) s += alphabet[pick(m)];
    return s;
  };
  std::vector<std::string> out;
  for (std::size_t i = 0; i < n; ++i) {
    char buf[128];
    std::snprintf(buf, sizeof buf, " %04d-%02d-%02dT%02d:%02d:%02dZ +%d %03d-%03d-%04d", 1990 + pick(41), 1 + pick(12),
                  1 + pick(28), pick(24), pick(60), pick(60), 1 + pick(99), 100 + pick(900), 100 + pick(900),
                  1000 + pick(9000));
    out.push_back(word("abcdefghijklmnopqrstuvwxyz0123456789._", 3, 14) + "a@" + word("abcdefghij", 2, 9) + "." +
                  word("klmnopqrst", 2, 9) + ".com" + buf);
  }
  return out;
}

struct Shared {
  std::shared_ptr<const pse::Vocabulary> vocab;
  tokenizers::Tokenizer tokenizer;
  std::map<std::string, Workload> work;
};

Shared& shared() {
  static Shared* s = [] {
    const auto dir = shared_dir();
    auto* out = new Shared{pse::testing::load_llama3_vocabulary(dir / "tokenizers/llama3/encoder.json"),
                           tokenizers::Tokenizer::load(dir / "tokenizers/llama3"),
                           {}};
    out->work["json"] = {pse::parse_gbnf(read_file(dir / "grammars/json.gbnf")), json_docs(100)};
    out->work["arithmetic"] = {pse::parse_gbnf(read_file(dir / "grammars/arithmetic.gbnf")), arithmetic_docs(60)};
    out->work["c"] = {pse::parse_gbnf(read_file(dir / "grammars/c.gbnf")),
                      {"int main(){int x = 1;int y = x*2+3;while(x<10){x = x+1;}return x;}",
                       "float area(float r){return r*r*314/100;}int twice(int v){return v+v;}",
                       "int fib(int n){if(n<=1){return n;}return fib(n-1)+fib(n-2);}",
                       "int sum(int n){int s = 0;for(int i = 0; i<n; i = i+1){s = s+i;}return s;}"}};
    out->work["regex"] = {pse::parse_regex(kRegex), regex_docs(80)};
    return out;
  }();
  return *s;
}

// Cold: nothing shared with earlier compiles (no compile cache, no shared token tables).
void BM_GrammarCompile(benchmark::State& state, const std::string& name, std::size_t threads) {
  Shared& s = shared();
  const pse::Grammar& g = s.work.at(name).grammar;
  pse::CompileOptions cold;
  cold.shared_tables = false;
  cold.threads = threads;
  for (auto _ : state) {
    pse::CompiledGrammar cg = pse::compile_grammar(g, s.vocab, cold);
    benchmark::DoNotOptimize(cg.stats().n_states);
  }
}

// With the token tables of the same rules compiled before (the process-wide cache), as in a server.
void BM_GrammarCompileShared(benchmark::State& state, const std::string& name) {
  Shared& s = shared();
  const pse::Grammar& g = s.work.at(name).grammar;
  (void)pse::compile_grammar(g, s.vocab);
  for (auto _ : state) {
    pse::CompiledGrammar cg = pse::compile_grammar(g, s.vocab);
    benchmark::DoNotOptimize(cg.stats().n_states);
  }
}

void BM_GrammarMask(benchmark::State& state, const std::string& name) {
  Shared& s = shared();
  const Workload& w = s.work.at(name);
  pse::CompiledGrammar cg = pse::compile_grammar(w.grammar, s.vocab);
  // Every state met along the documents (a fork per token position), each checked before timing: the
  // document's next token must be in the mask.
  std::vector<pse::Matcher> states;
  std::vector<std::uint32_t> mask(s.vocab->n_mask_words());
  for (const std::string& doc : w.docs) {
    pse::Matcher m(cg);
    std::vector<tokenizers::TokenId> ids = s.tokenizer.encode(doc);
    ids.push_back(128009);
    for (tokenizers::TokenId id : ids) {
      states.push_back(m.fork());
      m.fill_next_token_bitmask(mask);
      if (!((mask[id >> 5] >> (id & 31)) & 1) || !m.accept_token(id)) {
        state.SkipWithError(("a document token is not in the mask: " + name).c_str());
        return;
      }
    }
  }
  // One pass for the percentiles.
  std::vector<double> us;
  for (pse::Matcher& m : states) {
    const auto t0 = std::chrono::steady_clock::now();
    m.fill_next_token_bitmask(mask);
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(us.begin(), us.end());
  auto q = [&](double p) { return us[std::min(us.size() - 1, static_cast<std::size_t>(p * (us.size() - 1) + 0.5))]; };
  std::size_t i = 0;
  for (auto _ : state) {
    states[i].fill_next_token_bitmask(mask);
    benchmark::DoNotOptimize(mask.data());
    i = i + 1 == states.size() ? 0 : i + 1;
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["states"] = static_cast<double>(states.size());
  state.counters["p50_us"] = q(0.5);
  state.counters["p99_us"] = q(0.99);
  state.counters["p999_us"] = q(0.999);
  state.counters["max_us"] = us.back();
}

// Building a Vocabulary (the once-per-vocabulary preprocessing all grammars share); goal under 100 ms.
void BM_VocabularyPreprocessing(benchmark::State& state) {
  Shared& s = shared();
  std::vector<std::string> tokens;
  for (std::size_t i = 0; i < s.vocab->n_tokens(); ++i) {
    tokens.push_back(s.vocab->token_bytes(static_cast<pse::TokenId>(i)));
  }
  std::vector<pse::TokenId> special;
  for (pse::TokenId i = 128000; i < 128256; ++i) special.push_back(i);
  for (auto _ : state) {
    pse::Vocabulary v(tokens, special, {128001, 128009});
    if (v.n_tokens() != tokens.size()) state.SkipWithError("vocabulary lost tokens");
    benchmark::DoNotOptimize(&v.index());
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(tokens.size()));
}
BENCHMARK(BM_VocabularyPreprocessing)->Unit(benchmark::kMillisecond);

const int kRegistered = [] {
  for (const char* name : {"json", "arithmetic", "c", "regex"}) {
    benchmark::RegisterBenchmark((std::string("BM_GrammarCompile/") + name).c_str(), BM_GrammarCompile,
                                 std::string(name), std::size_t{0})
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
    benchmark::RegisterBenchmark((std::string("BM_GrammarCompileOneThread/") + name).c_str(), BM_GrammarCompile,
                                 std::string(name), std::size_t{1})
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark((std::string("BM_GrammarCompileShared/") + name).c_str(), BM_GrammarCompileShared,
                                 std::string(name))
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark((std::string("BM_GrammarMask/") + name).c_str(), BM_GrammarMask, std::string(name))
        ->Unit(benchmark::kMicrosecond);
  }
  return 0;
}();

}  // namespace

BENCHMARK_MAIN();
