// The command-line checks of the engine-level benchmark programs (orchard_bench_runner, orchard_bench_lora,
// orchard_bench_spec_oracle):
// a bad value is a message naming the flag and the value, the usage line, and exit status 2.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace orchard::bench {

class BenchArgs {
 public:
  BenchArgs(std::string program, std::string usage) : program_(std::move(program)), usage_(std::move(usage)) {}

  [[noreturn]] void fail(const std::string& why) const {
    std::fprintf(stderr, "%s: %s\nusage: %s %s\n", program_.c_str(), why.c_str(), program_.c_str(), usage_.c_str());
    std::exit(2);
  }

  // `text` as an integer in [1, max], or fail naming `flag`.
  std::int32_t positive(const std::string& flag, const std::string& text, long max = 1'000'000) const {
    char* end = nullptr;
    const long v = std::strtol(text.c_str(), &end, 10);
    if (end == text.c_str() || *end != '\0' || v <= 0 || v > max) {
      fail(flag + " wants a positive integer, got '" + text + "'");
    }
    return static_cast<std::int32_t>(v);
  }

  // `text` as a number in [lo, hi], or fail naming `flag`.
  double number(const std::string& flag, const std::string& text, double lo, double hi) const {
    char* end = nullptr;
    const double v = std::strtod(text.c_str(), &end);
    if (end == text.c_str() || *end != '\0' || !(v >= lo && v <= hi)) {
      std::ostringstream why;
      why << flag << " wants a number in [" << lo << ", " << hi << "], got '" << text << "'";
      fail(why.str());
    }
    return v;
  }

  // `text` as comma-separated numbers in [lo, hi] (at least one).
  std::vector<double> number_list(const std::string& flag, const std::string& text, double lo, double hi) const {
    std::vector<double> out;
    std::stringstream ss(text);
    for (std::string item; std::getline(ss, item, ',');) out.push_back(number(flag, item, lo, hi));
    if (out.empty()) fail(flag + " wants a comma-separated list");
    return out;
  }

  // `text` as comma-separated positive integers (at least one).
  std::vector<std::int32_t> positive_list(const std::string& flag, const std::string& text, long max = 1'000'000) const {
    std::vector<std::int32_t> out;
    std::stringstream ss(text);
    for (std::string item; std::getline(ss, item, ',');) out.push_back(positive(flag, item, max));
    if (out.empty()) fail(flag + " wants a comma-separated list");
    return out;
  }

 private:
  std::string program_;
  std::string usage_;
};

}  // namespace orchard::bench
