// Sizes and times as `ollama list` / `ollama ps` print them: "98 MB", "3 minutes ago", "4 minutes
// from now".
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace orchard::cli {

// Decimal units (B, KB, MB, GB, TB); one decimal under 10 ("1.5 GB"), none above ("98 MB").
std::string human_bytes(std::uint64_t bytes);
// "Less than a second", "5 seconds", "1 minute", "3 hours", "2 days", "4 weeks", "7 months", "2
// years"; with " ago" or " from now" after it.
std::string human_duration(std::chrono::seconds d);
std::string time_ago(std::chrono::system_clock::time_point t);
std::string time_until(std::chrono::system_clock::time_point t);

}  // namespace orchard::cli
