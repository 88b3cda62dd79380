// JSON-Schema-Test-Suite conformance of json_schema_to_grammar, judged by the reference recognizer.
// For every group whose schema compiles, every instance is written twice (compact, and with Python's ", "
// / ": " separators) and must be accepted exactly when it is valid. Keys of instance objects are written in
// the order the schema declares them (the contract of JsonPropertyOrder::kSchemaOrder), other keys after.
// An invalid instance accepted is a failure; a valid one rejected only counts against the pass rate, which
// must reach 75% on the core draft2020-12 suite. The suite's remotes/ are passed as
// JsonSchemaOptions::documents; core format.json runs with "format" as an annotation (its intent). Groups that do not compile are listed, with the reason,
// in json_schema_conformance_ledger.tsv; a group outside the ledger that fails to compile, or a ledger entry
// that now compiles, is a failure (the ledger only shrinks). ORCHARD_WRITE_LEDGER=1 rewrites the ledger.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "pse/error.h"
#include "pse/json_schema.h"
#include "reference_recognizer.h"
#include "shared_data.h"

namespace {

using ojson = nlohmann::ordered_json;
namespace fs = std::filesystem;

constexpr const char* kSuite = "json-schema-test-suite/tests";

// Python json.dumps(indent=None) separators: ", " and ": ".
std::string dump_spaced(const ojson& v) {
  if (v.is_object()) {
    std::string s = "{";
    bool first = true;
    for (auto& [k, x] : v.items()) {
      if (!first) s += ", ";
      first = false;
      s += ojson(k).dump() + ": " + dump_spaced(x);
    }
    return s + "}";
  }
  if (v.is_array()) {
    std::string s = "[";
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (i) s += ", ";
      s += dump_spaced(v[i]);
    }
    return s + "]";
  }
  return v.dump();
}

// Keys in the order of their first declaration in the schema text, undeclared keys after, in their order.
ojson reorder(const ojson& v, const std::string& schema_text) {
  if (v.is_array()) {
    ojson out = ojson::array();
    for (const auto& x : v) out.push_back(reorder(x, schema_text));
    return out;
  }
  if (!v.is_object()) return v;
  std::vector<std::pair<std::size_t, std::string>> keys;
  std::size_t n = 0;
  for (auto& [k, x] : v.items()) {
    std::size_t pos = schema_text.find(ojson(k).dump() + ":");
    keys.emplace_back(pos == std::string::npos ? std::string::npos - 100000 + n : pos, k);
    ++n;
  }
  std::stable_sort(keys.begin(), keys.end());
  ojson out = ojson::object();
  for (const auto& [pos, k] : keys) out[k] = reorder(v.at(k), schema_text);
  return out;
}

std::map<std::string, std::string> read_ledger(const fs::path& path) {
  std::map<std::string, std::string> ledger;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    auto t1 = line.find('\t');
    auto t2 = line.find('\t', t1 + 1);
    if (t1 == std::string::npos || t2 == std::string::npos) continue;
    ledger[line.substr(0, t2)] = line.substr(t2 + 1);
  }
  return ledger;
}

struct Tally {
  std::size_t cases = 0;
  std::size_t passed = 0;
  std::size_t groups = 0;
  std::size_t compiled = 0;
};

struct SuiteResult {
  std::map<std::string, Tally> by_area;  // "draft2020-12", "draft2020-12/optional", ...
  std::vector<std::string> unsound;      // invalid instances accepted
  std::vector<std::string> unexpected;   // compile failures outside the ledger
  std::vector<std::string> stale;        // ledger entries that compile now
  std::vector<std::string> rejected_valid;
  std::vector<std::pair<std::string, std::string>> failures;  // key -> reason (for the ledger)
};

void run_suite(const std::string& draft, int default_draft, const std::map<std::string, std::string>& ledger,
               SuiteResult& result) {
  const fs::path root = orchard::testing::shared_data(kSuite) / draft;
  std::vector<fs::path> files;
  for (const auto& e : fs::recursive_directory_iterator(root)) {
    if (e.is_regular_file() && e.path().extension() == ".json") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  pse::JsonSchemaOptions base_options;
  base_options.default_draft = default_draft;
  // The suite's remote documents, at the URIs its tests expect them to be served from.
  const fs::path remotes = orchard::testing::shared_data("json-schema-test-suite/remotes");
  for (const auto& e : fs::recursive_directory_iterator(remotes)) {
    if (!e.is_regular_file() || e.path().extension() != ".json") continue;
    std::ifstream in(e.path());
    std::stringstream text;
    text << in.rdbuf();
    base_options.documents["http://localhost:1234/" + fs::relative(e.path(), remotes).generic_string()] = text.str();
  }
  for (const auto& file : files) {
    const std::string rel = fs::relative(file, orchard::testing::shared_data(kSuite)).generic_string();
    pse::JsonSchemaOptions options = base_options;
    // Core format.json checks that "format" is an annotation by default (2020-12); optional/format
    // checks each format as an assertion.
    if (rel == draft + "/format.json") options.format = pse::JsonSchemaOptions::Format::kAnnotate;
    std::string area = fs::relative(file.parent_path(), orchard::testing::shared_data(kSuite)).generic_string();
    if (area.find("/optional/format") != std::string::npos) area = draft + "/optional";
    std::ifstream in(file);
    ojson groups = ojson::parse(in);
    for (const auto& group : groups) {
      const std::string key = rel + "\t" + group.at("description").get<std::string>();
      Tally& t = result.by_area[area];
      ++t.groups;
      t.cases += group.at("tests").size();
      std::optional<pse::Grammar> grammar;
      std::string error;
      try {
        grammar = pse::json_schema_to_grammar(group.at("schema"), options);
      } catch (const pse::Error& e) {
        error = e.what();
      }
      const bool in_ledger = ledger.count(key) > 0;
      if (!grammar) {
        std::string reason = error.substr(0, 300);
        std::replace(reason.begin(), reason.end(), '\t', ' ');
        std::replace(reason.begin(), reason.end(), '\n', ' ');
        result.failures.emplace_back(key, reason);
        if (!in_ledger) result.unexpected.push_back(key + ": " + reason);
        continue;
      }
      if (in_ledger) result.stale.push_back(key);
      ++t.compiled;
      const std::string schema_text = group.at("schema").dump();
      for (const auto& test : group.at("tests")) {
        const bool valid = test.at("valid").get<bool>();
        const ojson data = reorder(test.at("data"), schema_text);
        bool ok = true;
        for (const std::string& text : {data.dump(), dump_spaced(data)}) {
          const bool accepted = pse::testing::accepts(*grammar, text);
          if (accepted != valid) ok = false;
          if (accepted && !valid) {
            result.unsound.push_back(key + " / " + test.at("description").get<std::string>() + ": " + text);
          }
          if (!accepted && valid) {
            result.rejected_valid.push_back(key + " / " + test.at("description").get<std::string>() + ": " + text);
          }
        }
        if (ok) ++t.passed;
      }
    }
  }
}

std::string report(const SuiteResult& r) {
  std::ostringstream os;
  for (const auto& [area, t] : r.by_area) {
    os << area << ": groups " << t.compiled << "/" << t.groups << " compile, cases " << t.passed << "/" << t.cases
       << " pass (" << (t.cases ? 100.0 * t.passed / t.cases : 0.0) << "%)\n";
  }
  return os.str();
}

TEST(JsonSchemaConformance, TestSuite) {
  ORCHARD_REQUIRE_SHARED_DATA(kSuite);
  const fs::path ledger_path = orchard::testing::source_dir() / "tests/pse/json_schema_conformance_ledger.tsv";
  const auto ledger = read_ledger(ledger_path);
  SuiteResult result;
  run_suite("draft2020-12", 2020, ledger, result);
  run_suite("draft7", 7, ledger, result);
  std::cout << report(result);
  if (std::getenv("ORCHARD_WRITE_LEDGER") != nullptr) {
    std::ofstream out(ledger_path);
    out << "# JSON-Schema-Test-Suite groups whose schema does not compile: file<TAB>group<TAB>reason.\n"
        << "# Written by ORCHARD_WRITE_LEDGER=1 pse_conformance_tests --gtest_filter=JsonSchemaConformance.*; it may only shrink.\n";
    for (const auto& [key, reason] : result.failures) out << key << "\t" << reason << "\n";
  }
  if (std::getenv("ORCHARD_VERBOSE") != nullptr) {
    for (const auto& s : result.rejected_valid) std::cout << "valid rejected: " << s << "\n";
  }
  for (const auto& s : result.unsound) ADD_FAILURE() << "invalid instance accepted: " << s;
  if (std::getenv("ORCHARD_WRITE_LEDGER") == nullptr) {
    for (const auto& s : result.unexpected) ADD_FAILURE() << "group outside the ledger does not compile: " << s;
    for (const auto& s : result.stale) ADD_FAILURE() << "ledger entry compiles now (remove it): " << s;
  }
  const Tally& core = result.by_area["draft2020-12"];
  EXPECT_GE(static_cast<double>(core.passed), 0.75 * static_cast<double>(core.cases))
      << "core draft2020-12 pass rate " << core.passed << "/" << core.cases;
}

}  // namespace
