// `orchard grammar bench --maskbench`: the MaskBench protocol of guidance-ai/jsonschemabench
// (maskbench/maskbench/runner.py), field for field, over MaskBench schema files
// ({description, meta, schema, tests: [{description, valid, data, text}]}).
#include "grammar_maskbench.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "arg_parser.h"
#include "grammar_source.h"
#include "pie/grammar_vocabulary.h"
#include "pse/compiler.h"
#include "pse/json_schema.h"
#include "pse/matcher.h"
#include "read_input.h"
#include "tokenizers/tokenizer.h"

namespace orchard::cli {

using pie::grammar_vocabulary;

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using ordered_json = nlohmann::ordered_json;

constexpr double kDefaultTimeLimitS = 60;

struct MaskbenchTest {
  bool valid = false;
  std::string text;
};

struct MaskbenchFile {
  std::string id;  // the file name, as MaskBench's runner names it
  ordered_json schema;
  std::vector<MaskbenchTest> tests;
};

// What one schema came to, beyond its status line.
struct SchemaOutcome {
  bool compiled = false;
  bool passed = false;
  bool timed_out = false;
  bool crashed = false;
  std::size_t validation_errors = 0;    // valid tests rejected
  std::size_t invalidation_errors = 0;  // invalid tests accepted
};

double us_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

// Microseconds rounded to 0.001 for the status line.
double round_us(double us) { return std::round(us * 1000) / 1000; }

// "--maskbench A B C" -> "--maskbench A --maskbench B --maskbench C", so ArgParser's repeatable
// option collects every path; the paths after --maskbench run up to the next argument that starts
// with '-'.
std::vector<std::string> expand_path_lists(std::span<const std::string> args) {
  std::vector<std::string> out;
  bool in_paths = false;  // after --maskbench's own value
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") {  // the rest is positional: ArgParser handles it
      out.insert(out.end(), args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
      break;
    }
    if (in_paths && !a.empty() && a[0] != '-') {
      out.push_back("--maskbench");
      out.push_back(a);
      continue;
    }
    out.push_back(a);
    in_paths = false;
    if (a == "--maskbench" && i + 1 < args.size()) {
      out.push_back(args[++i]);  // its value, whatever it is (ArgParser's rule)
      in_paths = true;
    } else if (a.rfind("--maskbench=", 0) == 0) {
      in_paths = true;
    }
  }
  return out;
}

// Each FILE as is; each DIR as its *.json files, sorted by name.
std::vector<fs::path> list_files(const std::vector<std::string>& paths) {
  std::vector<fs::path> files;
  for (const std::string& p : paths) {
    std::error_code ec;
    if (fs::is_directory(p, ec)) {
      std::vector<fs::path> in_dir;
      for (const auto& e : fs::directory_iterator(p, ec)) {
        if (e.path().extension() == ".json") in_dir.push_back(e.path());
      }
      if (ec)
        throw std::runtime_error(
            fmt::format("[maskbench] {}: cannot list the folder: {}", p, ec.message()));
      std::sort(in_dir.begin(), in_dir.end());
      files.insert(files.end(), in_dir.begin(), in_dir.end());
    } else if (fs::exists(p, ec)) {
      files.emplace_back(p);
    } else {
      throw std::runtime_error(fmt::format("[maskbench] {}: no such file or folder", p));
    }
  }
  return files;
}

// Reads and checks one MaskBench file; throws std::runtime_error naming the file and the fault.
MaskbenchFile load_file(const fs::path& path) {
  const std::string name = path.string();
  const std::string text = read_input(name);
  ordered_json j;
  try {
    j = ordered_json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    std::string what = e.what();
    std::replace(what.begin(), what.end(), '\n', ' ');
    throw std::runtime_error(fmt::format("[maskbench] {}: not JSON: {}", name, what));
  }
  auto bad = [&](const std::string& why) {
    return std::runtime_error(fmt::format("[maskbench] {}: not a MaskBench file: {}", name, why));
  };
  if (!j.is_object()) throw bad(fmt::format("expected an object, got {}", j.type_name()));
  if (!j.contains("schema")) throw bad("no \"schema\"");
  if (!j.contains("tests") || !j["tests"].is_array()) throw bad("no \"tests\" array");
  MaskbenchFile f;
  f.id = path.filename().string();
  f.schema = j["schema"];
  const ordered_json& tests = j["tests"];
  for (std::size_t i = 0; i < tests.size(); ++i) {
    const ordered_json& t = tests[i];
    if (!t.is_object() || !t.contains("valid") || !t["valid"].is_boolean()) {
      throw bad(fmt::format("tests[{}] has no boolean \"valid\"", i));
    }
    if (!t.contains("text") || !t["text"].is_string()) {
      throw bad(fmt::format("tests[{}] has no string \"text\"", i));
    }
    f.tests.push_back({t["valid"].get<bool>(), t["text"].get<std::string>()});
  }
  return f;
}

// Runs one schema through the protocol, appending its mask times to all_tbm_us. Never throws for
// the schema's own faults: they land in `status` and the outcome.
SchemaOutcome run_schema(const MaskbenchFile& file, const tokenizers::Tokenizer& tok,
                         const std::shared_ptr<const pse::Vocabulary>& vocab, const pse::CompileOptions& base,
                         const pse::JsonSchemaOptions& schema_options, double time_limit_s, double prefill_ms,
                         ordered_json& status, std::vector<double>& all_tbm_us, double& ttfm_us) {
  SchemaOutcome out;
  std::vector<double> mask_us;
  std::size_t n_valid_ok = 0, n_invalid_ok = 0;
  status = ordered_json{{"id", file.id},
                        {"ttfm_us", 0},
                        {"max_ttfm_us", 0},
                        {"masks_us", 0},
                        {"max_mask_us", 0},
                        {"num_tokens", 0},
                        {"num_tests", file.tests.size()},
                        {"all_mask_us", ordered_json::array()},
                        {"num_valid_tests", 0},
                        {"num_invalid_tests", 0}};
  auto start = Clock::now();
  const double limit_us = time_limit_s * 1e6;

  std::optional<pse::Matcher> matcher;
  double convert_us = 0;
  try {
    pse::CompileOptions options = base;  // the engine's defaults (or --tables, --cold), with the time left
    const pse::Grammar g = pse::json_schema_to_grammar(file.schema, schema_options);
    convert_us = us_since(start);
    const double left_ms = (limit_us - us_since(start)) / 1000;
    if (left_ms <= 0)
      throw pse::LimitError("[maskbench] the schema's conversion used up the time limit");
    options.max_compile_ms = left_ms;
    matcher.emplace(pse::compile_grammar(g, vocab, options));
  } catch (const std::exception& e) {
    if (us_since(start) >= limit_us) {
      out.timed_out = true;
      status["timeout"] =
          fmt::format("compile: over the {} s time limit: {}", time_limit_s, e.what());
    } else {
      status["compile_error"] = e.what();
    }
    return out;
  }
  out.compiled = true;
  ttfm_us = us_since(start);
  status["ttfm_us"] = round_us(ttfm_us);
  status["max_ttfm_us"] = round_us(ttfm_us);
  {
    // Where the compile time went (Orchard's own fields; MaskBench's scripts ignore them).
    const pse::CompileStats& st = matcher->grammar().stats();
    status["compile_stats"] = ordered_json{{"convert_us", round_us(convert_us)},
                                           {"automaton_us", round_us(st.automaton_ms * 1000)},
                                           {"classes_us", round_us(st.classes_ms * 1000)},
                                           {"closures_us", round_us(st.closures_ms * 1000)},
                                           {"tables_us", round_us(st.tables_ms * 1000)},
                                           {"states", st.n_states},
                                           {"tables", st.n_tables},
                                           {"shared_tables", st.n_shared_tables}};
  }

  if (prefill_ms > 0) {  // (not counted in the time limit)
    const auto pause = std::chrono::microseconds(static_cast<std::int64_t>(prefill_ms * 1000));
    std::this_thread::sleep_for(pause);
    start += pause;
  }
  pse::Matcher& m = *matcher;
  std::vector<std::uint32_t> mask(m.mask_words());
  double masks_total = 0, max_mask = 0;
  for (std::size_t i = 0; i < file.tests.size() && !out.timed_out; ++i) {
    const MaskbenchTest& test = file.tests[i];
    try {
      m.reset();
      const std::vector<tokenizers::TokenId> tokens = tok.encode(test.text);
      bool accepted = true;
      for (std::size_t k = 0; k < tokens.size(); ++k) {
        const pse::TokenId t = tokens[k];
        const auto t0 = Clock::now();
        m.fill_next_token_bitmask(mask);
        const bool allowed = (mask[t >> 5] >> (t & 31)) & 1;
        const bool ok = m.accept_token(t);
        const double dt = us_since(t0);
        mask_us.push_back(dt);
        masks_total += dt;
        max_mask = std::max(max_mask, dt);
        if (allowed != ok) {
          throw std::runtime_error(
              fmt::format("token {} (id {}): the mask says {} but the commit says {}", k, t,
                          allowed ? "allowed" : "not allowed", ok ? "accepted" : "rejected"));
        }
        if (!ok) {
          accepted = false;
          break;
        }
        if (us_since(start) >= limit_us) {
          out.timed_out = true;
          break;
        }
      }
      if (out.timed_out) {
        status["timeout"] = fmt::format("test #{}: over the {} s time limit", i, time_limit_s);
        break;
      }
      accepted = accepted && m.can_stop();
      if (accepted && !test.valid) {
        ++out.invalidation_errors;
        if (!status.contains("validation_error")) {
          status["validation_error"] = fmt::format("test #{}: should reject but didn't", i);
        }
      } else if (!accepted && test.valid) {
        ++out.validation_errors;
        if (!status.contains("validation_error")) {
          status["validation_error"] = fmt::format("test #{}: should accept but didn't", i);
        }
      } else if (test.valid) {
        ++n_valid_ok;
      } else {
        ++n_invalid_ok;
      }
    } catch (const std::exception& e) {
      out.crashed = true;
      status["validation_error"] = fmt::format("test #{}: EXN {}", i, e.what());
      break;
    }
  }
  ordered_json all = ordered_json::array();
  for (double v : mask_us) all.push_back(round_us(v));
  status["masks_us"] = round_us(masks_total);
  status["max_mask_us"] = round_us(max_mask);
  status["num_tokens"] = mask_us.size();
  status["all_mask_us"] = std::move(all);
  status["num_valid_tests"] = n_valid_ok;
  status["num_invalid_tests"] = n_invalid_ok;
  all_tbm_us.insert(all_tbm_us.end(), mask_us.begin(), mask_us.end());
  out.passed =
      !out.timed_out && !out.crashed && out.validation_errors == 0 && out.invalidation_errors == 0;
  return out;
}

// Nearest-rank percentile of sorted values (q in [0, 1]); 0 when empty.
double percentile_sorted(const std::vector<double>& v, double q) {
  if (v.empty()) return 0;
  const double rank = std::ceil(q * static_cast<double>(v.size()));
  const std::size_t i = rank < 1 ? 0 : std::min(v.size() - 1, static_cast<std::size_t>(rank) - 1);
  return v[i];
}

std::string percentile_line(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  std::string s;
  for (const auto& [name, q] : {std::pair{"p25", 0.25},
                                {"p50", 0.5},
                                {"p75", 0.75},
                                {"p90", 0.9},
                                {"p95", 0.95},
                                {"p99", 0.99},
                                {"p99.9", 0.999}}) {
    s += fmt::format(" {} {:.1f}", name, percentile_sorted(v, q));
  }
  s += fmt::format(" max {:.1f}", v.empty() ? 0.0 : v.back());
  return s;
}

}  // namespace

bool wants_maskbench(std::span<const std::string> args) {
  for (const std::string& a : args) {
    if (a == "--") break;
    if (a == "--maskbench" || a.rfind("--maskbench=", 0) == 0) return true;
  }
  return false;
}

int grammar_maskbench(std::span<const std::string> raw_args) {
  std::vector<std::string> paths;
  std::optional<std::string> tokenizer_path, jsonl_path, time_limit_text, tables, prefill_text;
  bool cold = false, any_order = false;
  ArgParser p(
      "orchard grammar bench --maskbench DIR|FILE... -t TOKENIZER [--jsonl OUT] [--time-limit S]\n"
      "                      [--tables compile|background|first-use] [--prefill-ms MS] [--cold] [--any-order]",
      "Runs the MaskBench protocol (guidance-ai/jsonschemabench maskbench) on MaskBench schema "
      "files\n"
      "(each DIR: its *.json files). Per file: convert and compile the schema (TTFM; a failure is "
      "a\n"
      "compile error); per test: reset, tokenize `text` without special tokens, and for each "
      "token\n"
      "fill the mask and commit the token (TBM), stopping at the first rejected token. A test is\n"
      "accepted when every token is and the grammar may then stop; a valid test rejected is a\n"
      "validation error, an invalid one accepted an invalidation error. Prints one JSON status "
      "line\n"
      "per schema (MaskBench's fields) and a summary. Exit status 0 when the run completed, 2 on\n"
      "bad arguments or a file that is not MaskBench JSON (all files are checked first).");
  p.multi_option("maskbench", 0, "DIR|FILE...",
                 "MaskBench schema files or folders of them (required)", &paths)
      .option("tokenizer", 't', "TOKENIZER", "tokenizer file or folder (required)", &tokenizer_path)
      .option("jsonl", 0, "OUT", "write the JSON status lines here instead of standard output",
              &jsonl_path)
      .option("time-limit", 0, "S",
              fmt::format("seconds per schema, compile and tests together, not --prefill-ms (default {:g})",
                          kDefaultTimeLimitS),
              &time_limit_text)
      .flag("cold", 0, "share no token tables between schemas (each compile as if it were the process's first)",
            &cold)
      .flag("any-order", 0, "object members in any order (default: the order of `properties`, as MaskBench's peers)",
            &any_order);
  add_table_build_options(p, &tables, &prefill_text);
  const std::vector<std::string> args = expand_path_lists(raw_args);
  if (!p.parse(args)) return 0;
  if (paths.empty()) throw UsageError("missing option --maskbench DIR|FILE...");
  if (!tokenizer_path) throw UsageError("missing option --tokenizer/-t TOKENIZER");
  const pse::TableBuild table_build = table_build_option(tables, "--tables");
  const double prefill_ms = prefill_ms_option(prefill_text);
  double time_limit_s = kDefaultTimeLimitS;
  if (time_limit_text) {
    time_limit_s = parse_double(*time_limit_text, "--time-limit");
    if (!(time_limit_s > 0)) {
      throw UsageError(fmt::format("--time-limit: expected a positive number of seconds, got '{}'",
                                   *time_limit_text));
    }
  }

  std::vector<MaskbenchFile> files;
  for (const fs::path& f : list_files(paths)) files.push_back(load_file(f));
  if (files.empty()) throw UsageError("--maskbench: no *.json files found");

  const tokenizers::Tokenizer tok = tokenizers::Tokenizer::load(*tokenizer_path);
  const auto vocab = grammar_vocabulary(tok);

  std::ofstream jsonl_file;
  if (jsonl_path) {
    jsonl_file.open(*jsonl_path);
    if (!jsonl_file)
      throw std::runtime_error(fmt::format("[maskbench] {}: cannot open for writing", *jsonl_path));
  }

  pse::CompileOptions base;
  base.tables = table_build;
  base.shared_tables = !cold;
  pse::JsonSchemaOptions schema_options;
  if (any_order) schema_options.property_order = pse::JsonPropertyOrder::kAnyOrder;
  std::vector<double> tbm_us, ttfm_us;
  std::size_t n_passing = 0, n_compile_errors = 0, n_validation_errors = 0,
              n_invalidation_errors = 0, n_timeouts = 0, n_crashes = 0, n_tests = 0;
  for (const MaskbenchFile& f : files) {
    ordered_json status;
    double ttfm = 0;
    SchemaOutcome o;
    try {
      o = run_schema(f, tok, vocab, base, schema_options, time_limit_s, prefill_ms, status, tbm_us, ttfm);
    } catch (const std::exception& e) {  // a fault of the runner itself (e.g. out of memory)
      o = SchemaOutcome{};
      o.crashed = true;
      status = ordered_json{{"id", f.id}, {"crash", e.what()}};
    }
    n_tests += f.tests.size();
    if (o.compiled) ttfm_us.push_back(ttfm);
    if (!o.compiled && !o.timed_out && !o.crashed) ++n_compile_errors;
    n_passing += o.passed ? 1 : 0;
    n_validation_errors += o.validation_errors;
    n_invalidation_errors += o.invalidation_errors;
    n_timeouts += o.timed_out ? 1 : 0;
    n_crashes += o.crashed ? 1 : 0;
    status["passed"] = o.passed;
    const std::string line =
        status.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    if (jsonl_path) {
      jsonl_file << line << std::flush;
    } else {
      std::fputs(line.c_str(), stdout);
      std::fflush(stdout);
    }
  }
  if (jsonl_path && !jsonl_file) {
    throw std::runtime_error(fmt::format("[maskbench] {}: write failed", *jsonl_path));
  }
  fmt::print(
      "maskbench: {} schemas, {} passing, {} compile errors, {} validation errors, {} invalidation "
      "errors, {} timeouts, {} crashes ({} tests)\n",
      files.size(), n_passing, n_compile_errors, n_validation_errors, n_invalidation_errors,
      n_timeouts, n_crashes, n_tests);
  fmt::print("token tables built {}\n", table_build_words(table_build));
  fmt::print("TBM us ({} masks):{}\n", tbm_us.size(), percentile_line(tbm_us));
  std::vector<double> ttfm_ms;
  for (double v : ttfm_us) ttfm_ms.push_back(v / 1000);
  fmt::print("TTFM ms ({} schemas):{}\n", ttfm_ms.size(), percentile_line(ttfm_ms));
  return 0;
}

}  // namespace orchard::cli
