// The server's Prometheus metrics (GET /metrics, text format 0.0.4): requests by route and status,
// tokens, time to first token, time per output token and request duration histograms, plus the engine's
// gauges and counters (KV pages, prefix-cache hits, grammar compiles and cache hits, mask time).
// Thread-safe: handlers record from many threads while /metrics renders.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "pie/engine.h"

namespace pie::server {

// A cumulative histogram with fixed upper bounds (seconds).
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double value);
  // Appends the _bucket, _sum and _count lines of `name` (with HELP/TYPE).
  void render(std::string& out, const std::string& name, const std::string& help) const;
  std::uint64_t count() const { return count_; }

 private:
  std::vector<double> bounds_;
  std::vector<std::uint64_t> counts_;  // per bucket (not cumulative), last one +Inf
  double sum_ = 0;
  std::uint64_t count_ = 0;
};

struct RequestRecord {
  std::string route;                 // "/v1/chat/completions"
  int status = 200;
  std::int64_t prompt_tokens = 0;
  std::int64_t completion_tokens = 0;
  double ttft_seconds = -1;          // < 0: no token was produced
  double duration_seconds = 0;
  bool cancelled = false;            // the client went away
};

class Metrics {
 public:
  Metrics();
  void record(const RequestRecord& record);
  // in_flight: generation requests being answered now (streams included).
  std::string render(const EngineStats& stats, std::int64_t in_flight) const;

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, std::uint64_t> requests_;  // (route, status) -> count
  std::uint64_t prompt_tokens_ = 0, completion_tokens_ = 0, cancelled_ = 0;
  Histogram ttft_, tpot_, duration_;
};

}  // namespace pie::server
