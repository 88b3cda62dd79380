// Locates the real default model (SmolLM2-135M-Instruct, Q4_1 GGUF) that scripts/fetch-models.sh puts in
// the model store: $ORCHARD_HOME/models (default ~/.cache/orchard/models), blob named by its manifest.
// Tests that need it skip with a one-line reason when it is absent; CI's set-up always fetches it.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace orchard::testing {

inline constexpr const char* kDefaultModelName = "smollm2:135m-instruct-q4_1";

inline std::filesystem::path model_store_dir() {
  if (const char* env = std::getenv("ORCHARD_HOME"); env != nullptr && *env != '\0') {
    return std::filesystem::path(env) / "models";
  }
  const char* home = std::getenv("HOME");
  return std::filesystem::path(home != nullptr ? home : "/") / ".cache" / "orchard" / "models";
}

// The default model's file, or an empty path when the store does not hold it.
inline std::filesystem::path default_model_path() {
  const std::filesystem::path manifest = model_store_dir() / "manifests" / "smollm2" / "135m-instruct-q4_1";
  std::ifstream in(manifest);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string key = "\"digest\": \"sha256:";
  const std::size_t at = text.find(key);
  if (at == std::string::npos || at + key.size() + 64 > text.size()) return {};
  std::filesystem::path blob = model_store_dir() / "blobs" / ("sha256-" + text.substr(at + key.size(), 64));
  return std::filesystem::exists(blob) ? blob : std::filesystem::path();
}

}  // namespace orchard::testing

// Skips the current test, with a one-line reason, when the default model is not in the store.
#define ORCHARD_REQUIRE_DEFAULT_MODEL()                                                                   \
  do {                                                                                                  \
    if (::orchard::testing::default_model_path().empty()) {                                             \
      GTEST_SKIP() << "default model absent from " << ::orchard::testing::model_store_dir()             \
                   << " (run scripts/fetch-models.sh)";                                                 \
    }                                                                                                   \
  } while (0)
