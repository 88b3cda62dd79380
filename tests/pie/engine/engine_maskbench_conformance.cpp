// Constrained generation over real-world schemas: the default model (random weights) generates one output
// for each of a sample of MaskBench's dev schemas (those that compile), and Python jsonschema, an
// independent implementation, validates every output that the grammar finished
// (tools/validate_constrained_outputs.py). Outputs cut by max_tokens are counted, not judged.
// ORCHARD_ENGINE_MASKBENCH_STRIDE=n takes every n-th schema (default 40: about 70 schemas).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine_test_util.h"
#include "pie/engine.h"
#include "pse/error.h"
#include "pse/json_schema.h"
#include "shared_data.h"

namespace pie {
namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

TEST(EngineMaskBench, OutputsValidateWithJsonschema) {
  ORCHARD_REQUIRE_SHARED_DATA("maskbench-dev");
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(orchard::testing::shared_data("maskbench-dev"))) {
    if (e.path().extension() == ".json") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  const char* env = std::getenv("ORCHARD_ENGINE_MASKBENCH_STRIDE");
  const std::size_t stride = env != nullptr && *env != '\0' ? std::max(1ul, std::stoul(env)) : 40;

  EngineOptions options;
  options.n_threads = 2;
  options.context_length = 2048;
  options.grammar_compile_ms = 5000;
  options.max_queued = static_cast<std::int32_t>(files.size());  // every sampled request queued at once
  Engine engine(random_model(), options);
  struct Job {
    std::string name;
    ojson schema;
    std::shared_ptr<RequestStream> stream;
  };
  std::vector<Job> jobs;
  std::size_t n_schemas = 0, n_unsupported = 0;
  for (std::size_t i = 0; i < files.size(); i += stride) {
    ++n_schemas;
    std::ifstream in(files[i]);
    ojson doc = ojson::parse(in);
    GenerateRequest r;
    r.prompt = {*engine.model().tokenizer->special_tokens().bos};
    r.sampling.temperature = 1.0f;
    r.sampling.seed = i;
    r.max_tokens = 1000;
    try {
      // Unknown keywords as annotations, as jsonschema reads them too (pse's default rejects them).
      pse::JsonSchemaOptions schema_options;
      schema_options.unknown_keywords = pse::JsonSchemaOptions::UnknownKeywords::kIgnore;
      r.grammar = pse::json_schema_to_grammar(doc["schema"], schema_options);
      jobs.push_back({files[i].stem().string(), doc["schema"], engine.submit(std::move(r))});
    } catch (const pse::Error&) {
      ++n_unsupported;  // a schema feature pse rejects (listed in pse's own conformance ledger)
    } catch (const RequestError&) {
      ++n_unsupported;  // compile bound hit
    }
  }
  const fs::path out_path = fs::temp_directory_path() / "orchard-engine-maskbench.jsonl";
  std::ofstream out(out_path);
  std::size_t n_error = 0;
  for (Job& job : jobs) {
    testing::RunResult res = testing::collect(*job.stream, std::chrono::seconds(300));
    ASSERT_EQ(res.samples.size(), 1u) << job.name;
    const auto& s = res.samples[0];
    if (s.finish == FinishReason::error) {
      ++n_error;
      ADD_FAILURE() << job.name << ": " << s.error;
    }
    ojson rec = {{"name", job.name}, {"schema", job.schema}, {"output", s.text},
                 {"finish", finish_reason_name(s.finish)}, {"error", s.error}};
    out << rec.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  }
  out.close();
  std::printf("[maskbench] %zu schemas sampled, %zu not supported by pse, %zu generated, %zu errors; outputs in %s\n",
              n_schemas, n_unsupported, jobs.size(), n_error, out_path.c_str());
  EXPECT_GT(jobs.size(), n_schemas / 2);

  const fs::path python = orchard::testing::source_dir() / ".venv/bin/python";
  if (!fs::exists(python)) GTEST_SKIP() << ".venv absent: outputs not validated with jsonschema (" << python << ")";
  const std::string cmd = python.string() + " " +
                          (orchard::testing::source_dir() / "tools/validate_constrained_outputs.py").string() + " " +
                          out_path.string() + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string report;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, p) != nullptr) report += buf;
  const int status = pclose(p);
  std::printf("[maskbench] %s", report.c_str());
  EXPECT_EQ(status, 0) << report;
}

}  // namespace
}  // namespace pie
