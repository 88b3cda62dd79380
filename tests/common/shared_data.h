// Locates ../shared/data (real test material that is never copied into the repo).
// ORCHARD_SHARED_DATA overrides the default, which is ../shared/data beside the source tree.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>

namespace orchard::testing {

inline std::filesystem::path shared_data_dir() {
  if (const char* env = std::getenv("ORCHARD_SHARED_DATA"); env != nullptr && *env != '\0') {
    return env;
  }
  return ORCHARD_DEFAULT_SHARED_DATA;
}

inline std::filesystem::path shared_data(std::string_view relative) {
  return shared_data_dir() / std::filesystem::path(relative);
}

inline std::filesystem::path source_dir() { return ORCHARD_SOURCE_DIR; }

}  // namespace orchard::testing

// Skips the current test, with a one-line reason, when a shared-data path is absent.
#define ORCHARD_REQUIRE_SHARED_DATA(relative)                                            \
  do {                                                                                   \
    if (!std::filesystem::exists(::orchard::testing::shared_data(relative))) {           \
      GTEST_SKIP() << "shared data absent: " << ::orchard::testing::shared_data(relative) \
                   << " (set ORCHARD_SHARED_DATA)";                                      \
    }                                                                                    \
  } while (0)
