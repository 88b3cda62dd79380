// When a compile must stop: a point in time (CompileOptions::max_compile_ms), or earlier when the caller's
// cancellation predicate says so (Compiler::compile's `cancelled`: the client went away). Every bounded
// step of a compile polls passed() where it used to compare the clock.
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>

namespace pse::detail {

struct Deadline {
  std::chrono::steady_clock::time_point at = std::chrono::steady_clock::time_point::max();
  // Not owned; must outlive the compile. Never kept past compile() (background builds get none).
  const std::function<bool()>* cancelled = nullptr;

  bool passed() const {
    return std::chrono::steady_clock::now() > at || (cancelled != nullptr && *cancelled && (*cancelled)());
  }
  // The same cancellation, by `t` at the latest.
  Deadline by(std::chrono::steady_clock::time_point t) const { return Deadline{std::min(at, t), cancelled}; }
};

}  // namespace pse::detail
