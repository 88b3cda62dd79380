// A first pass of json_schema_to_grammar over MaskBench's dev schemas (shared data maskbench-dev): how many
// compile, and for how many every instance text (as the MaskBench runner writes it) is accepted exactly
// when valid, judged by the reference recognizer. Prints the figures and the most frequent reasons for
// SchemaError; fails when an invalid instance is accepted. ORCHARD_MASKBENCH_STRIDE=n takes every n-th
// schema (default 4, about 40 s; 1 for all 2,783, about 160 s), ORCHARD_MASKBENCH_MAX_TEXT skips instance
// texts longer than that (default 4096), ORCHARD_MASKBENCH_STRICT_KEYWORDS=1 converts with
// UnknownKeywords::kError (keywords of no draft are errors) instead of the default kIgnore,
// ORCHARD_MASKBENCH_ANY_ORDER=1 with JsonPropertyOrder::kAnyOrder.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <re2/re2.h>

#include "pse/error.h"
#include "pse/json_schema.h"
#include "reference_recognizer.h"
#include "shared_data.h"

namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

std::size_t env_or(const char* name, std::size_t fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? static_cast<std::size_t>(std::stoull(v)) : fallback;
}

// "[json_schema] /a/b: message" -> the keyword of the error and the message with values blanked out.
std::string reason_of(const pse::Error& e) {
  std::string what = e.what();
  std::string keyword;
  if (const auto* se = dynamic_cast<const pse::SchemaError*>(&e)) keyword = se->keyword();
  auto colon = what.find(": ");
  std::string message = colon == std::string::npos ? what : what.substr(colon + 2);
  static const RE2 kQuoted("\"[^\"]*\"");
  static const RE2 kBraced("\\{.*\\}");
  RE2::GlobalReplace(&message, kQuoted, "\"..\"");
  RE2::GlobalReplace(&message, kBraced, "{..}");
  if (message.size() > 120) message = message.substr(0, 120);
  return (keyword.empty() ? std::string("-") : keyword) + ": " + message;
}

TEST(JsonSchemaMaskBench, DevSchemas) {
  ORCHARD_REQUIRE_SHARED_DATA("maskbench-dev");
  const fs::path dir = orchard::testing::shared_data("maskbench-dev");
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() == ".json") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  const std::size_t stride = std::max<std::size_t>(1, env_or("ORCHARD_MASKBENCH_STRIDE", 4));
  const std::size_t max_text = env_or("ORCHARD_MASKBENCH_MAX_TEXT", 4096);
  std::size_t n_schemas = 0, n_compiled = 0, n_right = 0, n_tests = 0, n_tests_right = 0, n_skipped_tests = 0;
  std::size_t n_valid_rejected = 0;
  std::map<std::string, std::size_t> reasons;
  std::vector<std::string> unsound;
  const auto start = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < files.size(); i += stride) {
    std::ifstream in(files[i]);
    ojson doc = ojson::parse(in);
    ++n_schemas;
    std::optional<pse::Grammar> grammar;
    try {
      pse::JsonSchemaOptions options;
      if (env_or("ORCHARD_MASKBENCH_STRICT_KEYWORDS", 0) != 0) {
        options.unknown_keywords = pse::JsonSchemaOptions::UnknownKeywords::kError;
      }
      if (env_or("ORCHARD_MASKBENCH_ANY_ORDER", 0) != 0) options.property_order = pse::JsonPropertyOrder::kAnyOrder;
      grammar = pse::json_schema_to_grammar(doc.at("schema"), options);
    } catch (const pse::Error& e) {
      ++reasons[reason_of(e)];
      continue;
    }
    ++n_compiled;
    bool right = true;
    for (const auto& test : doc.at("tests")) {
      const std::string text = test.at("text").get<std::string>();
      if (text.size() > max_text) {
        ++n_skipped_tests;
        right = false;
        continue;
      }
      ++n_tests;
      const bool valid = test.at("valid").get<bool>();
      const bool accepted = pse::testing::accepts(*grammar, text);
      if (accepted == valid) {
        ++n_tests_right;
      } else {
        right = false;
        if (accepted) unsound.push_back(files[i].filename().string() + ": " + text.substr(0, 200));
        if (!accepted) ++n_valid_rejected;
      }
    }
    if (right) ++n_right;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << "maskbench-dev (every " << stride << "th of " << files.size() << " schemas): " << n_schemas
            << " schemas, " << n_compiled << " compile, " << n_right << " fully right; instances " << n_tests_right
            << "/" << n_tests << " right (" << n_valid_rejected << " valid rejected, " << unsound.size()
            << " invalid accepted, " << n_skipped_tests << " longer than " << max_text << " bytes skipped); "
            << seconds << " s\n";
  std::vector<std::pair<std::size_t, std::string>> top;
  for (const auto& [r, n] : reasons) top.emplace_back(n, r);
  std::sort(top.rbegin(), top.rend());
  for (std::size_t k = 0; k < top.size() && k < 25; ++k) std::cout << "  " << top[k].first << "  " << top[k].second << "\n";
  for (const auto& s : unsound) ADD_FAILURE() << "invalid instance accepted: " << s;
}

}  // namespace
