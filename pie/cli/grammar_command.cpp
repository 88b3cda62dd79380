// `orchard grammar`: compile a grammar, check a text against it token by token, list the tokens a
// grammar allows after a prefix, and benchmark the per-token masks. Grammars come from GBNF, Lark or a
// regex or a JSON Schema.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "arg_parser.h"
#include "commands.h"
#include "grammar_maskbench.h"
#include "grammar_source.h"
#include "pie/grammar_vocabulary.h"
#include "pse/compiler.h"
#include "pse/matcher.h"
#include "read_input.h"
#include "tokenizers/tokenizer.h"

namespace orchard::cli {

using pie::grammar_vocabulary;

namespace {

// Printable ASCII as is; quotes, backslash and control bytes escaped.
std::string escape(std::string_view bytes) {
  std::string out;
  for (unsigned char c : bytes) {
    switch (c) {
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      default:
        if (c >= 0x20 && c < 0x7F) {
          out.push_back(static_cast<char>(c));
        } else {
          out += fmt::format("\\x{:02x}", c);
        }
    }
  }
  return out;
}

void print_stats(const pse::CompiledGrammar& cg, double compile_ms) {
  const pse::CompileStats& s = cg.stats();
  fmt::print("rules              {}\n", s.n_rules);
  fmt::print("automaton states   {}\n", s.n_states);
  fmt::print("scanning states    {}\n", s.n_scan_states);
  fmt::print("token tables       {} (one per class of scanning states with the same future)\n", s.n_tables);
  fmt::print("uncertain tokens   {} (checked against the stack at run time)\n", s.n_uncertain);
  fmt::print("memory             {:.1f} KiB\n", s.memory_bytes / 1024.0);
  fmt::print("compile            {:.2f} ms (automaton {:.2f} ms, state classes {:.2f} ms, shared rules {:.2f} ms, "
             "token tables {:.2f} ms, {} of them shared)\n",
             compile_ms, s.automaton_ms, s.classes_ms, s.closures_ms, s.tables_ms, s.n_shared_tables);
  fmt::print("vocabulary         {} tokens, {} rows\n", cg.vocabulary().n_tokens(), cg.vocabulary().n_rows());
}

constexpr const char* kSpecialHelp =
    "special-token text in the input (<|python_tag|>) is that token, for grammars that read whole tokens";

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// 256 one-byte tokens: the automaton statistics of a grammar when no tokenizer is given.
std::shared_ptr<const pse::Vocabulary> byte_vocabulary() {
  std::vector<std::string> t;
  for (int b = 0; b < 256; ++b) t.push_back(std::string(1, static_cast<char>(b)));
  return std::make_shared<pse::Vocabulary>(std::move(t), std::vector<pse::TokenId>{},
                                           std::vector<pse::TokenId>{});
}

int grammar_compile(std::span<const std::string> args) {
  GrammarSource src;
  std::optional<std::string> tokenizer_path;
  ArgParser p(fmt::format("orchard grammar compile {} [-t TOKENIZER]", kGrammarSynopsis),
              "Compiles the grammar and prints its statistics, or the error (exit status 2). Without a\n"
              "tokenizer it compiles against the 256 one-byte tokens.");
  src.add_options(p);
  p.option("tokenizer", 't', "TOKENIZER", "compile against this tokenizer's vocabulary", &tokenizer_path);
  if (!p.parse(args)) return 0;
  pse::Grammar g = src.load();
  auto vocab = tokenizer_path ? grammar_vocabulary(tokenizers::Tokenizer::load(*tokenizer_path))
                              : byte_vocabulary();
  const auto t0 = std::chrono::steady_clock::now();
  pse::CompiledGrammar cg = pse::compile_grammar(g, vocab);
  print_stats(cg, ms_since(t0));
  return 0;
}

int grammar_check(std::span<const std::string> args) {
  GrammarSource src;
  std::optional<std::string> tokenizer_path, input;
  bool special = false;
  ArgParser p(fmt::format("orchard grammar check -t TOKENIZER {} [--special] [INPUT|-]", kGrammarSynopsis),
              "Tokenizes INPUT (standard input for '-' or none; special tokens only with --special) and\n"
              "feeds it to the grammar token by token. Exit status: 0 every token was allowed and the\n"
              "grammar may stop there; 1 rejected (says at which token and byte) or incomplete; 2 a bad\n"
              "grammar or arguments.");
  src.add_options(p);
  p.option("tokenizer", 't', "TOKENIZER", "tokenizer file or folder (required)", &tokenizer_path)
      .flag("special", 0, kSpecialHelp, &special)
      .positional("INPUT", "the text to check; '-' or absent for standard input", false, &input);
  if (!p.parse(args)) return 0;
  if (!tokenizer_path) throw UsageError("missing option --tokenizer/-t TOKENIZER");
  pse::Grammar g = src.load();
  const tokenizers::Tokenizer tok = tokenizers::Tokenizer::load(*tokenizer_path);
  pse::Matcher m(pse::compile_grammar(g, grammar_vocabulary(tok)));
  const std::string text = read_input(input);
  const std::vector<tokenizers::TokenId> ids = tok.encode(text, {.parse_special = special});
  std::size_t offset = 0;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const std::string& bytes = tok.token_bytes(ids[i]);
    if (!m.accept_token(ids[i])) {
      if (tok.is_special(ids[i])) {  // a whole token: no byte of it to blame
        fmt::print("rejected: token {} of {} (id {}, special \"{}\") at byte {}: not allowed after \"{}\"\n", i,
                   ids.size(), ids[i], escape(bytes), offset,
                   escape(std::string_view(text).substr(offset >= 40 ? offset - 40 : 0, std::min<std::size_t>(offset, 40))));
        return 1;
      }
      // Say which byte of the token broke it.
      std::size_t k = 0;
      pse::Matcher probe = m.fork();
      while (k < bytes.size() && probe.accept_bytes(std::string_view(bytes).substr(k, 1))) ++k;
      fmt::print("rejected: token {} of {} (id {}, \"{}\") at byte {}: byte {} \"{}\" is not allowed after "
                 "\"{}\"\n",
                 i, ids.size(), ids[i], escape(bytes), offset, offset + k,
                 escape(std::string_view(bytes).substr(k, 1)),
                 escape(std::string_view(text).substr(offset + k >= 40 ? offset + k - 40 : 0,
                                                      std::min<std::size_t>(offset + k, 40))));
      return 1;
    }
    offset += bytes.size();
  }
  if (!m.can_stop()) {
    const std::string forced = m.forced_continuation(64);
    fmt::print("incomplete: all {} tokens allowed, but the grammar cannot stop after byte {}{}\n", ids.size(),
               offset, forced.empty() ? "" : fmt::format(" (it continues with \"{}\")", escape(forced)));
    return 1;
  }
  fmt::print("accepted: {} tokens, {} bytes\n", ids.size(), offset);
  return 0;
}

int grammar_mask(std::span<const std::string> args) {
  GrammarSource src;
  std::optional<std::string> tokenizer_path, prefix, limit_text;
  bool special = false;
  ArgParser p(fmt::format("orchard grammar mask -t TOKENIZER {} [--prefix TEXT] [--special] [--limit N]",
                          kGrammarSynopsis),
              "Tokenizes the prefix (special tokens only with --special), feeds it, and lists the tokens\n"
              "the grammar allows next: how many, then id and bytes of the first N. Exit status 1 when the\n"
              "prefix is rejected.");
  src.add_options(p);
  p.option("tokenizer", 't', "TOKENIZER", "tokenizer file or folder (required)", &tokenizer_path)
      .option("prefix", 0, "TEXT", "the output so far (default: empty)", &prefix)
      .flag("special", 0, kSpecialHelp, &special)
      .option("limit", 'n', "N", "list at most N tokens (default 50; 0 for all)", &limit_text);
  if (!p.parse(args)) return 0;
  if (!tokenizer_path) throw UsageError("missing option --tokenizer/-t TOKENIZER");
  const long long limit = limit_text ? parse_int(*limit_text, "--limit", 0, 1LL << 40) : 50;
  pse::Grammar g = src.load();
  const tokenizers::Tokenizer tok = tokenizers::Tokenizer::load(*tokenizer_path);
  pse::Matcher m(pse::compile_grammar(g, grammar_vocabulary(tok)));
  const std::vector<tokenizers::TokenId> ids = tok.encode(prefix.value_or(""), {.parse_special = special});
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (!m.accept_token(ids[i])) {
      fmt::print("rejected: prefix token {} (id {}, \"{}\") is not allowed\n", i, ids[i],
                 escape(tok.token_bytes(ids[i])));
      return 1;
    }
  }
  std::vector<std::uint32_t> mask(m.mask_words());
  m.fill_next_token_bitmask(mask);
  std::vector<pse::TokenId> allowed;
  for (std::size_t id = 0; id < mask.size() * 32; ++id)
    if ((mask[id >> 5] >> (id & 31)) & 1) allowed.push_back(static_cast<pse::TokenId>(id));
  fmt::print("{} tokens allowed{}{}\n", allowed.size(), m.can_stop() ? " (end of sequence among them)" : "",
             m.forced_continuation(64).empty() ? ""
                                               : fmt::format("; forced continuation \"{}\"",
                                                             escape(m.forced_continuation(64))));
  for (std::size_t i = 0; i < allowed.size() && (limit == 0 || static_cast<long long>(i) < limit); ++i) {
    fmt::print("{:>8} \"{}\"\n", allowed[i], escape(tok.token_bytes(allowed[i])));
  }
  return 0;
}

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t i = std::min(v.size() - 1, static_cast<std::size_t>(q * (v.size() - 1) + 0.5));
  return v[i];
}

int grammar_bench(std::span<const std::string> args) {
  if (wants_maskbench(args)) return grammar_maskbench(args);
  GrammarSource src;
  std::optional<std::string> tokenizer_path, docs_path, repeat_text, save_tokens, json_out, tables, prefill_text;
  ArgParser p(fmt::format("orchard grammar bench -t TOKENIZER {} --docs FILE [--repeat N] [--save-tokens FILE] "
                          "[--tables compile|background|first-use] [--prefill-ms MS]",
                          kGrammarSynopsis),
              "Times the grammar's compile (median of 5, cold: no compile cache, no shared token tables;\n"
              "and again with the shared tables of earlier compiles; with tables built in the background,\n"
              "also until they are all built) and the next-token mask at every token of every document\n"
              "(one thread; the masks start right after a fresh compile, or --prefill-ms later), then\n"
              "prints p50/p99/p99.9/max. FILE is a JSON array of strings, each a valid document; each is\n"
              "tokenized without special tokens and followed by an end-of-sequence token. --save-tokens\n"
              "writes the token ids used (a JSON array of arrays) for peers\n"
              "(tests/bench/peers/grammar_peers.py) to replay.");
  src.add_options(p);
  p.option("tokenizer", 't', "TOKENIZER", "tokenizer file or folder (required)", &tokenizer_path)
      .option("docs", 0, "FILE", "JSON array of documents (required)", &docs_path)
      .option("repeat", 'r', "N", "passes over the documents (default 3)", &repeat_text)
      .option("save-tokens", 0, "FILE", "write the token ids of the documents here", &save_tokens)
      .option("json", 0, "FILE", "also write the figures as JSON here", &json_out);
  add_table_build_options(p, &tables, &prefill_text);
  if (!p.parse(args)) return 0;
  if (!tokenizer_path) throw UsageError("missing option --tokenizer/-t TOKENIZER");
  if (!docs_path) throw UsageError("missing option --docs FILE");
  const long long repeat = repeat_text ? parse_int(*repeat_text, "--repeat", 1, 1000) : 3;
  const pse::TableBuild table_build = table_build_option(tables, "--tables");
  const double prefill_ms = prefill_ms_option(prefill_text);
  pse::Grammar g = src.load();
  const tokenizers::Tokenizer tok = tokenizers::Tokenizer::load(*tokenizer_path);
  auto vocab = grammar_vocabulary(tok);
  const nlohmann::json docs = nlohmann::json::parse(read_input(*docs_path));
  if (!docs.is_array()) throw UsageError("--docs: the file must hold a JSON array of strings");
  std::vector<std::vector<tokenizers::TokenId>> tokens;
  for (const auto& d : docs) {
    if (!d.is_string()) throw UsageError("--docs: the file must hold a JSON array of strings");
    tokens.push_back(tok.encode(d.get<std::string>()));
  }
  if (save_tokens) {
    std::ofstream out(*save_tokens);
    out << nlohmann::json(tokens).dump() << "\n";
    if (!out) throw std::runtime_error(fmt::format("cannot write {}", *save_tokens));
  }
  // Cold: nothing shared with earlier compiles. Shared: the token tables of rules compiled before are
  // taken from the process-wide cache (here the grammar's own, from the first compile), as in a server
  // that has seen the same building blocks.
  // Ready: until every table is built (the same as compile but in the background).
  std::vector<double> compile_ms, ready_ms, shared_compile_ms;
  pse::CompileOptions cold;
  cold.shared_tables = false;
  cold.tables = table_build;
  pse::CompileOptions shared;
  shared.tables = table_build;
  (void)pse::compile_grammar(g, vocab, cold).wait_for_tables();
  for (int i = 0; i < 5; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    const pse::CompiledGrammar timed = pse::compile_grammar(g, vocab, cold);
    compile_ms.push_back(ms_since(t0));
    (void)timed.wait_for_tables();
    ready_ms.push_back(ms_since(t0));
  }
  (void)pse::compile_grammar(g, vocab, shared).wait_for_tables();
  for (int i = 0; i < 5; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    const pse::CompiledGrammar timed = pse::compile_grammar(g, vocab, shared);
    shared_compile_ms.push_back(ms_since(t0));
    (void)timed.wait_for_tables();
  }
  const pse::CompiledGrammar cg = pse::compile_grammar(g, vocab, cold);
  std::this_thread::sleep_for(std::chrono::microseconds(static_cast<std::int64_t>(prefill_ms * 1000)));
  const pse::TokenId eos = vocab->eos_ids().empty() ? -1 : vocab->eos_ids()[0];
  std::vector<double> mask_us;
  std::vector<std::uint32_t> mask;
  std::size_t n_rejected_docs = 0;
  for (long long r = 0; r < repeat; ++r) {
    for (std::size_t d = 0; d < tokens.size(); ++d) {
      pse::Matcher m(cg);
      mask.assign(m.mask_words(), 0);
      bool ok = true;
      for (std::size_t i = 0; i <= tokens[d].size() && ok; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        m.fill_next_token_bitmask(mask);
        mask_us.push_back(ms_since(t0) * 1000);
        const pse::TokenId next = i < tokens[d].size() ? tokens[d][i] : eos;
        if (next < 0) break;
        ok = ((mask[next >> 5] >> (next & 31)) & 1) && m.accept_token(next);
      }
      if (!ok && r == 0) {
        ++n_rejected_docs;
        std::fprintf(stderr, "warning: document %zu is not accepted by the grammar\n", d);
      }
    }
  }
  const double p50 = percentile(mask_us, 0.5), p99 = percentile(mask_us, 0.99),
               p999 = percentile(mask_us, 0.999), mx = percentile(mask_us, 1.0);
  double mean = 0;
  for (double v : mask_us) mean += v;
  mean /= std::max<std::size_t>(1, mask_us.size());
  const double compile_median = percentile(compile_ms, 0.5);
  fmt::print("documents      {} ({} rejected), {} masks over {} passes\n", tokens.size(), n_rejected_docs,
             mask_us.size(), repeat);
  const double shared_compile_median = percentile(shared_compile_ms, 0.5);
  const double ready_median = percentile(ready_ms, 0.5);
  fmt::print("compile        {:.2f} ms cold, {:.2f} ms with shared tables (medians of 5; states {}, token tables {}, "
             "built {})\n",
             compile_median, shared_compile_median, cg.stats().n_states, cg.stats().n_tables,
             table_build_words(table_build));
  if (table_build == pse::TableBuild::kInBackground)
    fmt::print("tables built   {:.2f} ms after the compile began (median of 5, cold)\n", ready_median);
  fmt::print("mask           p50 {:.1f} us  p99 {:.1f} us  p99.9 {:.1f} us  max {:.1f} us  mean {:.1f} us\n",
             p50, p99, p999, mx, mean);
  if (json_out) {
    nlohmann::json j = {{"documents", tokens.size()}, {"rejected_documents", n_rejected_docs},
                        {"masks", mask_us.size()},    {"compile_ms", compile_median},
                        {"compile_shared_ms", shared_compile_median},
                        {"p50_us", p50},              {"p99_us", p99},
                        {"p999_us", p999},            {"max_us", mx},
                        {"mean_us", mean},            {"tables", table_build_words(table_build)},
                        {"tables_ready_ms", ready_median}, {"prefill_ms", prefill_ms}};
    std::ofstream out(*json_out);
    out << j.dump(2) << "\n";
  }
  return n_rejected_docs == 0 ? 0 : 1;
}

void print_grammar_help() {
  std::fputs(
      "usage: orchard grammar <compile|check|mask|bench> [options]\n\n"
      "  compile   compile a grammar and print its statistics (or the error)\n"
      "  check     feed a text token by token; exit 0 accepted, 1 rejected, 2 bad grammar/arguments\n"
      "  mask      list the tokens allowed after a prefix\n"
      "  bench     time compile and per-token masks along documents (--maskbench: the MaskBench run)\n\n"
      "`orchard grammar <subcommand> --help` describes each.\n",
      stdout);
}

}  // namespace

int run_grammar(std::span<const std::string> args) {
  if (args.empty()) {
    print_grammar_help();
    return 2;
  }
  const std::string& sub = args[0];
  auto rest = args.subspan(1);
  if (sub == "--help" || sub == "-h" || sub == "help") {
    print_grammar_help();
    return 0;
  }
  if (sub == "compile") return grammar_compile(rest);
  if (sub == "check") return grammar_check(rest);
  if (sub == "mask") return grammar_mask(rest);
  if (sub == "bench") return grammar_bench(rest);
  throw UsageError(fmt::format("unknown subcommand '{}' (compile, check, mask, bench)", sub));
}

}  // namespace orchard::cli
