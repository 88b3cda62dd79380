// A backend that fails chosen steps: every operation goes to the backend it wraps (ForwardingBackend), and wait() of the steps
// named in ORCHARD_INJECT_STEP_FAULTS throws as a device fault inside the step would (the step's own work
// done and discarded). It lets the engine's and the server's handling of a fault inside a step (the step's
// requests end with an error, the rest keep being served, /health says so) be exercised on any backend,
// on a machine without a GPU too.
#include <fmt/format.h>

#include <charconv>
#include <cstdlib>
#include <set>
#include <string_view>

#include "pie/backend.h"
#include "pie/error.h"
#include "pie/forwarding_backend.h"

namespace pie {
namespace {

class FaultInjectingBackend final : public ForwardingBackend {
 public:
  FaultInjectingBackend(std::unique_ptr<Backend> inner, std::set<std::uint64_t> steps)
      : ForwardingBackend(std::move(inner)), steps_(std::move(steps)) {}

  void begin(std::function<void()> step) override {
    ++step_;
    inner().begin(std::move(step));
  }
  void wait() override {
    inner().wait();
    if (steps_.count(step_) != 0) {
      steps_.erase(step_);
      throw Error(fmt::format("[backend:{}] injected device fault in step {} (ORCHARD_INJECT_STEP_FAULTS)",
                              inner().name(), step_));
    }
  }

 private:
  std::set<std::uint64_t> steps_;
  std::uint64_t step_ = 0;
};

}  // namespace

std::unique_ptr<Backend> with_injected_faults(std::unique_ptr<Backend> backend) {
  const char* env = std::getenv("ORCHARD_INJECT_STEP_FAULTS");
  if (env == nullptr || *env == '\0') return backend;
  std::set<std::uint64_t> steps;
  std::string_view rest(env);
  for (bool more = true; more;) {
    const std::size_t comma = rest.find(',');
    more = comma != std::string_view::npos;
    const std::string_view item = rest.substr(0, comma);
    std::uint64_t step = 0;
    const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), step);
    if (ec != std::errc() || end != item.data() + item.size() || step == 0) {
      throw Error(fmt::format("[backend] ORCHARD_INJECT_STEP_FAULTS='{}': expected step numbers from 1, comma "
                              "separated, got '{}'",
                              env, item));
    }
    steps.insert(step);
    if (more) rest = rest.substr(comma + 1);
  }
  return std::make_unique<FaultInjectingBackend>(std::move(backend), std::move(steps));
}

}  // namespace pie
