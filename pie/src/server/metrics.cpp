#include "server/metrics.h"

#include <fmt/format.h>

#include <algorithm>

#include "pse/compiler.h"

namespace pie::server {
namespace {

std::string format_bound(double bound) { return fmt::format("{}", bound); }

// Label values escape \, " and newlines (text format 0.0.4).
std::string escape_label(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') { out += "\\n"; continue; }
    out += c;
  }
  return out;
}

void metric(std::string& out, const char* name, const char* type, const char* help, double value) {
  out += fmt::format("# HELP {0} {1}\n# TYPE {0} {2}\n{0} {3}\n", name, help, type, value);
}

}  // namespace

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double value) {
  auto it = std::lower_bound(bounds_.begin(), bounds_.end(), value);
  ++counts_[static_cast<std::size_t>(it - bounds_.begin())];
  sum_ += value;
  ++count_;
}

void Histogram::render(std::string& out, const std::string& name, const std::string& help) const {
  out += fmt::format("# HELP {0} {1}\n# TYPE {0} histogram\n", name, help);
  std::uint64_t cumulative = 0;
  for (std::size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, format_bound(bounds_[i]), cumulative);
  }
  cumulative += counts_.back();
  out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n{}_sum {}\n{}_count {}\n", name, cumulative, name, sum_,
                     name, count_);
}

Metrics::Metrics()
    : ttft_({0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}),
      tpot_({0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}),
      duration_({0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120}) {}

void Metrics::record(const RequestRecord& r) {
  std::lock_guard lock(mutex_);
  ++requests_[{r.route, r.status}];
  prompt_tokens_ += static_cast<std::uint64_t>(std::max<std::int64_t>(r.prompt_tokens, 0));
  completion_tokens_ += static_cast<std::uint64_t>(std::max<std::int64_t>(r.completion_tokens, 0));
  if (r.cancelled) ++cancelled_;
  duration_.observe(r.duration_seconds);
  if (r.ttft_seconds >= 0) {
    ttft_.observe(r.ttft_seconds);
    // Time per output token after the first, as vLLM reports it.
    if (r.completion_tokens > 1) {
      tpot_.observe((r.duration_seconds - r.ttft_seconds) / static_cast<double>(r.completion_tokens - 1));
    }
  }
}

std::string Metrics::render(const EngineStats& s, std::int64_t in_flight) const {
  std::string out;
  {
    std::lock_guard lock(mutex_);
    out += "# HELP orchard_http_requests_total HTTP requests answered, by route and status.\n"
           "# TYPE orchard_http_requests_total counter\n";
    for (const auto& [key, count] : requests_) {
      out += fmt::format("orchard_http_requests_total{{route=\"{}\",status=\"{}\"}} {}\n",
                         escape_label(key.first), key.second, count);
    }
    metric(out, "orchard_http_requests_in_flight", "gauge", "Requests being answered now.",
           static_cast<double>(in_flight));
    metric(out, "orchard_http_requests_cancelled_total", "counter",
           "Requests cancelled because the client went away.", static_cast<double>(cancelled_));
    metric(out, "orchard_prompt_tokens_total", "counter", "Prompt tokens of answered requests.",
           static_cast<double>(prompt_tokens_));
    metric(out, "orchard_completion_tokens_total", "counter", "Tokens generated for answered requests.",
           static_cast<double>(completion_tokens_));
    ttft_.render(out, "orchard_time_to_first_token_seconds", "Time from request to its first token.");
    tpot_.render(out, "orchard_time_per_output_token_seconds", "Mean time per output token after the first.");
    duration_.render(out, "orchard_request_duration_seconds", "Time from request to its last byte.");
  }
  auto u = [](auto v) { return static_cast<double>(v); };
  metric(out, "orchard_engine_requests_total", "counter", "Requests the engine accepted.", u(s.requests));
  metric(out, "orchard_engine_requests_failed_total", "counter", "Requests that ended in an error.",
         u(s.requests_failed));
  metric(out, "orchard_engine_requests_running", "gauge", "Sequences being generated.", u(s.requests_running));
  metric(out, "orchard_engine_requests_queued", "gauge", "Requests waiting for a slot.", u(s.requests_queued));
  metric(out, "orchard_engine_prompt_tokens_total", "counter", "Prompt tokens prefilled.", u(s.prompt_tokens));
  metric(out, "orchard_engine_generated_tokens_total", "counter", "Tokens sampled.", u(s.generated_tokens));
  metric(out, "orchard_engine_forced_tokens_total", "counter", "Tokens appended by jump-forward.",
         u(s.forced_tokens));
  metric(out, "orchard_engine_draft_tokens_total", "counter", "Speculative decoding: tokens drafted and scored.",
         u(s.draft_tokens));
  metric(out, "orchard_engine_accepted_draft_tokens_total", "counter",
         "Speculative decoding: drafted tokens kept.", u(s.accepted_draft_tokens));
  metric(out, "orchard_engine_preemptions_total", "counter", "Sequences preempted for KV space.",
         u(s.preemptions));
  metric(out, "orchard_kv_pages", "gauge", "KV cache pages in the pool.", u(s.kv_pages));
  metric(out, "orchard_kv_pages_used", "gauge", "KV pages held by running sequences.", u(s.kv_pages_used));
  metric(out, "orchard_kv_pages_cached", "gauge", "KV pages kept by the prefix cache.", u(s.kv_pages_cached));
  metric(out, "orchard_kv_pages_free", "gauge", "KV pages free.", u(s.kv_pages_free));
  metric(out, "orchard_prefix_cache_lookup_tokens_total", "counter", "Prompt tokens looked up in the prefix cache.",
         u(s.prefix_lookup_tokens));
  metric(out, "orchard_prefix_cache_hit_tokens_total", "counter", "Prompt tokens served from the prefix cache.",
         u(s.prefix_hit_tokens));
  metric(out, "orchard_prefix_cache_hit_rate", "gauge", "Prefix-cache hit tokens over looked-up tokens.",
         s.prefix_lookup_tokens == 0 ? 0.0 : u(s.prefix_hit_tokens) / u(s.prefix_lookup_tokens));
  metric(out, "orchard_grammar_compiles_total", "counter", "Grammars compiled.", u(s.grammar_compiles));
  metric(out, "orchard_grammar_cache_hits_total", "counter", "Compiled grammars reused from the cache.",
         u(s.grammar_cache_hits));
  metric(out, "orchard_grammar_compile_seconds_total", "counter", "Time spent compiling grammars.",
         s.grammar_compile_seconds);
  metric(out, "orchard_grammar_cache_bytes", "gauge", "Bytes of the compiled grammars kept for reuse.",
         u(s.grammar_cache_bytes));
  metric(out, "orchard_grammar_shared_tables_bytes", "gauge",
         "Bytes of the token tables grammars share (process-wide, kept for reuse).",
         u(pse::shared_table_cache_bytes()));
  metric(out, "orchard_mask_seconds_total", "counter", "Time spent filling token masks.", s.mask_seconds);
  metric(out, "orchard_forward_seconds_total", "counter", "Time spent in the forward pass.", s.forward_seconds);
  metric(out, "orchard_engine_steps_total", "counter", "Engine steps.", u(s.steps));
  return out;
}

}  // namespace pie::server
