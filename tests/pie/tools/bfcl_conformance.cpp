// BFCL sample: random walks through the "required" tool grammar of a few entries of each category
// must end, parse back into calls of the entry's functions (one call unless parallel), and (when
// the project's .venv has jsonschema) validate against the normalised parameters. The full counts:
// tools/bfcl_check.py.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "bfcl_walks.h"
#include "shared_data.h"

namespace pie {
namespace {

namespace fs = std::filesystem;

constexpr int kEntriesPerCategory = 6;

// The arguments with every number outside strings replaced by 0: random walks write numbers past
// the double range, which nlohmann::json refuses, and only the keys are checked here (the values
// are checked by jsonschema in tools/bfcl_check.py, whose Python numbers have no such limit).
std::string numbers_zeroed(const std::string& json) {
  std::string out;
  bool in_string = false, escaped = false;
  for (std::size_t i = 0; i < json.size(); ++i) {
    const char c = json[i];
    if (in_string) {
      out.push_back(c);
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      while (i + 1 < json.size() &&
             std::string_view("0123456789.eE+-").find(json[i + 1]) != std::string_view::npos)
        ++i;
      out.push_back('0');
    } else {
      out.push_back(c);
      if (c == '"') in_string = true;
    }
  }
  return out;
}

class BfclSample : public ::testing::TestWithParam<ToolCallFormat> {};

TEST_P(BfclSample, WalksParseAndValidate) {
  ORCHARD_REQUIRE_SHARED_DATA("bfcl/BFCL_v4_simple_python.json");
  ORCHARD_REQUIRE_SHARED_DATA("tokenizers/llama3/encoder.json");
  const std::string encoder =
      orchard::testing::shared_data("tokenizers/llama3/encoder.json").string();
  testing::WalkOptions options;
  options.format = GetParam();
  options.walks = 2;
  options.seed = 11;
  const fs::path out_path =
      fs::temp_directory_path() /
      (std::string("orchard_bfcl_sample_") + tool_call_format_name(options.format) + ".jsonl");
  std::ofstream out(out_path);
  int entries = 0, walks = 0;
  for (const char* category : {"simple_python", "multiple", "parallel", "parallel_multiple"}) {
    std::ifstream in(
        orchard::testing::shared_data(std::string("bfcl/BFCL_v4_") + category + ".json"));
    const bool parallel = std::string(category).find("parallel") != std::string::npos;
    std::string line;
    for (int n = 0; n < kEntriesPerCategory && std::getline(in, line); ++n) {
      const auto entry = nlohmann::ordered_json::parse(line);
      const testing::EntryResult r = testing::walk_entry(entry, parallel, encoder, options);
      ++entries;
      ASSERT_TRUE(r.compiled) << r.id << ": " << r.error;
      for (const testing::WalkResult& w : r.walks) {
        ++walks;
        EXPECT_TRUE(w.finished) << r.id << ": " << w.text;
        EXPECT_EQ(w.parsed.content, "") << r.id << ": " << w.text;
        ASSERT_FALSE(w.parsed.tool_calls.empty()) << r.id << ": " << w.text;
        if (!parallel) {
          EXPECT_EQ(w.parsed.tool_calls.size(), 1u) << r.id;
        }
        for (const ToolCall& c : w.parsed.tool_calls) {
          ASSERT_TRUE(r.tools.contains(c.name)) << r.id << ": " << c.name;
          const auto args = nlohmann::json::parse(numbers_zeroed(c.arguments), nullptr, false);
          ASSERT_TRUE(args.is_object()) << r.id << ": " << c.arguments;
          for (const auto& key :
               r.tools[c.name].value("required", nlohmann::ordered_json::array())) {
            EXPECT_TRUE(args.contains(key.get<std::string>())) << r.id << ": " << c.arguments;
          }
        }
      }
      out << testing::entry_json(r, options)
                 .dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace)
          << "\n";
    }
  }
  out.close();
  EXPECT_EQ(entries, 4 * kEntriesPerCategory);
  EXPECT_EQ(walks, entries * options.walks);
  const fs::path python = orchard::testing::source_dir() / ".venv/bin/python";
  if (!fs::exists(python))
    GTEST_SKIP() << "no .venv (scripts/requirements-test.txt): jsonschema validation skipped";
  const std::string command =
      python.string() + " " + (orchard::testing::source_dir() / "tools/bfcl_check.py").string() +
      " --input " + out_path.string() + " --require-all-valid > " + out_path.string() + ".log 2>&1";
  const int rc = std::system(command.c_str());
  std::ifstream log(out_path.string() + ".log");
  const std::string report((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  EXPECT_EQ(rc, 0) << report;
}

INSTANTIATE_TEST_SUITE_P(Formats, BfclSample,
                         ::testing::Values(ToolCallFormat::hermes, ToolCallFormat::llama3_json,
                                           ToolCallFormat::mistral, ToolCallFormat::generic),
                         [](const auto& info) {
                           return std::string(tool_call_format_name(info.param));
                         });

}  // namespace
}  // namespace pie
