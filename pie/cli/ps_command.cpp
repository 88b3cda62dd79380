// `orchard ps`: the models a running server has loaded (its GET /api/ps), as `ollama ps` prints
// them.
#include <fmt/format.h>
#include <httplib.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "arg_parser.h"
#include "commands.h"
#include "human_units.h"

namespace orchard::cli {
namespace {

// "2026-11-27T18:45:24Z" (or with fractions and an offset of Z) -> system time; nullopt otherwise.
std::optional<std::chrono::system_clock::time_point> parse_utc(const std::string& text) {
  std::tm tm{};
  if (strptime(text.c_str(), "%Y-%m-%dT%H:%M:%S", &tm) == nullptr) return std::nullopt;
  if (tm.tm_year + 1900 > 2200)
    return std::nullopt;  // "never" is written far ahead (past system_clock's range)
  return std::chrono::system_clock::from_time_t(timegm(&tm));
}

}  // namespace

int run_ps(std::span<const std::string> args) {
  std::optional<std::string> host, api_key;
  ArgParser parser(
      "orchard ps [--host http://127.0.0.1:8080] [--api-key KEY]",
      "Lists the models a running `orchard serve` has loaded: name, ID, size, and until when it\n"
      "stays loaded (its keep_alive). The host may also come from ORCHARD_HOST, the key from\n"
      "ORCHARD_API_KEY.\n\n"
      "Exit status: 0 success; 2 no server answered, or it answered with an error.");
  parser.option("host", 0, "URL", "the server (default http://127.0.0.1:8080)", &host)
      .option("api-key", 0, "KEY", "its API key", &api_key);
  if (!parser.parse(args)) return 0;
  const char* env_host = std::getenv("ORCHARD_HOST");
  std::string url =
      host.value_or(env_host != nullptr && *env_host != '\0' ? env_host : "http://127.0.0.1:8080");
  if (url.find("://") == std::string::npos) url = "http://" + url;
  const char* env_key = std::getenv("ORCHARD_API_KEY");
  const std::string key = api_key.value_or(env_key != nullptr ? env_key : "");
  httplib::Client client(url);
  client.set_connection_timeout(5);
  client.set_read_timeout(30);
  httplib::Headers headers;
  if (!key.empty()) headers.emplace("Authorization", "Bearer " + key);
  const httplib::Result result = client.Get("/api/ps", headers);
  if (!result)
    throw std::runtime_error(
        fmt::format("no server at {}: {}", url, httplib::to_string(result.error())));
  if (result->status != 200) {
    throw std::runtime_error(
        fmt::format("{}/api/ps answered HTTP {}: {}", url, result->status, result->body));
  }
  const nlohmann::json body = nlohmann::json::parse(result->body, nullptr, false);
  if (!body.is_object() || !body.contains("models") || !body["models"].is_array()) {
    throw std::runtime_error(
        fmt::format("{}/api/ps answered something other than a list of models", url));
  }
  std::string out =
      fmt::format("{:<40} {:<14} {:<10} {:<10} {}\n", "NAME", "ID", "SIZE", "PROCESSOR", "UNTIL");
  for (const nlohmann::json& m : body["models"]) {
    const std::string expires = m.value("expires_at", std::string());
    std::string until = "Forever";
    if (const auto t = parse_utc(expires)) {
      until = *t <= std::chrono::system_clock::now() ? "Stopping..." : time_until(*t);
    }
    const std::string digest = m.value("digest", std::string());
    out += fmt::format("{:<40} {:<14} {:<10} {:<10} {}\n", m.value("name", std::string()),
                       digest.substr(0, 12), human_bytes(m.value("size", std::uint64_t{0})),
                       "100% CPU", until);
  }
  std::fputs(out.c_str(), stdout);
  return 0;
}

}  // namespace orchard::cli
