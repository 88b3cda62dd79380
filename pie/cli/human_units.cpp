#include "human_units.h"

#include <fmt/format.h>

namespace orchard::cli {

std::string human_bytes(std::uint64_t bytes) {
  static const char* kUnits[] = {"B", "KB", "MB", "GB", "TB"};
  double v = static_cast<double>(bytes);
  int unit = 0;
  while (v >= 1000 && unit < 4) {
    v /= 1000;
    ++unit;
  }
  if (unit == 0) return fmt::format("{} B", bytes);
  return v < 10 ? fmt::format("{:.1f} {}", v, kUnits[unit])
                : fmt::format("{:.0f} {}", v, kUnits[unit]);
}

std::string human_duration(std::chrono::seconds d) {
  const long long s = d.count();
  auto plural = [](long long n, const char* unit) {
    return fmt::format("{} {}{}", n, unit, n == 1 ? "" : "s");
  };
  if (s < 1) return "Less than a second";
  if (s < 60) return plural(s, "second");
  if (s < 3600) return plural(s / 60, "minute");
  if (s < 86400) return plural(s / 3600, "hour");
  if (s < 86400 * 14) return plural(s / 86400, "day");
  if (s < 86400 * 60) return plural(s / (86400 * 7), "week");
  if (s < 86400 * 730) return plural(s / (86400 * 30), "month");
  return plural(s / (86400 * 365), "year");
}

std::string time_ago(std::chrono::system_clock::time_point t) {
  const auto d =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now() - t);
  return human_duration(d) + " ago";
}

std::string time_until(std::chrono::system_clock::time_point t) {
  const auto d =
      std::chrono::duration_cast<std::chrono::seconds>(t - std::chrono::system_clock::now());
  return human_duration(d) + " from now";
}

}  // namespace orchard::cli
