#include <cmath>
#include <cstdio>
#include <string>

#include "pie/error.h"
#include "pie/sampling.h"

namespace pie {

namespace {

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// Throws RequestError unless lo <= v <= hi (or lo < v when lo_open); NaN and infinities always fail.
void check_range(const std::string& name, double v, double lo, double hi, bool lo_open = false) {
  const bool ok = std::isfinite(v) && (lo_open ? v > lo : v >= lo) && v <= hi;
  if (!ok) {
    throw RequestError("[request] " + name + " must be in " + (lo_open ? "(" : "[") + num(lo) + ", " +
                           num(hi) + "], got " + num(v),
                       name);
  }
}

}  // namespace

void SamplingParams::validate(std::int32_t n_vocab) const {
  if (n_vocab <= 0) throw Error("[sampling] validate: n_vocab must be > 0, got " + std::to_string(n_vocab));
  check_range("temperature", temperature, 0, 100);
  if (top_k < 0) {
    throw RequestError("[request] top_k must be >= 0 (0: off), got " + std::to_string(top_k), "top_k");
  }
  check_range("top_p", top_p, 0, 1, /*lo_open=*/true);
  check_range("min_p", min_p, 0, 1);
  if (!std::isfinite(repetition_penalty) || repetition_penalty <= 0) {
    throw RequestError("[request] repetition_penalty must be a finite number > 0, got " + num(repetition_penalty),
                       "repetition_penalty");
  }
  check_range("frequency_penalty", frequency_penalty, -2, 2);
  check_range("presence_penalty", presence_penalty, -2, 2);
  for (const auto& [token, bias] : logit_bias) {
    const std::string name = "logit_bias[" + std::to_string(token) + "]";
    if (token < 0 || token >= n_vocab) {
      throw RequestError("[request] " + name + ": token " + std::to_string(token) + " is outside the vocabulary [0, " +
                             std::to_string(n_vocab) + ")",
                         name);
    }
    check_range(name, bias, -100, 100);
  }
  if (top_logprobs < 0 || top_logprobs > 20) {
    throw RequestError("[request] top_logprobs must be in [0, 20], got " + std::to_string(top_logprobs),
                       "top_logprobs");
  }
}

}  // namespace pie
