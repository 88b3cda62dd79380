// Prometheus text: cumulative histogram buckets, counters by route and status, engine gauges.
#include <gtest/gtest.h>

#include "server/metrics.h"

namespace pie::server {
namespace {

bool has_line(const std::string& text, const std::string& line) {
  return text.find("\n" + line + "\n") != std::string::npos || text.starts_with(line + "\n");
}

TEST(Histogram, BucketsAreCumulative) {
  Histogram h({0.1, 1.0});
  h.observe(0.05);
  h.observe(0.1);  // on the bound: in that bucket (le)
  h.observe(0.5);
  h.observe(7);
  std::string out;
  h.render(out, "x", "help");
  EXPECT_TRUE(has_line(out, "x_bucket{le=\"0.1\"} 2")) << out;
  EXPECT_TRUE(has_line(out, "x_bucket{le=\"1\"} 3")) << out;
  EXPECT_TRUE(has_line(out, "x_bucket{le=\"+Inf\"} 4")) << out;
  EXPECT_TRUE(has_line(out, "x_count 4")) << out;
  EXPECT_TRUE(has_line(out, "# TYPE x histogram")) << out;
}

TEST(Metrics, RendersRequestsTokensAndEngineStats) {
  Metrics m;
  m.record({"/v1/chat/completions", 200, 10, 5, 0.02, 0.1, false});
  m.record({"/v1/chat/completions", 200, 3, 0, -1, 0.01, true});
  m.record({"/v1/chat/completions", 400, 0, 0, -1, 0.001, false});
  EngineStats s;
  s.kv_pages = 100;
  s.kv_pages_used = 30;
  s.kv_pages_free = 70;
  s.prefix_lookup_tokens = 200;
  s.prefix_hit_tokens = 50;
  s.grammar_compiles = 4;
  s.grammar_cache_hits = 6;
  s.mask_seconds = 1.5;
  std::string out = m.render(s, 2);
  EXPECT_TRUE(has_line(out, R"(orchard_http_requests_total{route="/v1/chat/completions",status="200"} 2)")) << out;
  EXPECT_TRUE(has_line(out, R"(orchard_http_requests_total{route="/v1/chat/completions",status="400"} 1)")) << out;
  EXPECT_TRUE(has_line(out, "orchard_http_requests_in_flight 2")) << out;
  EXPECT_TRUE(has_line(out, "orchard_http_requests_cancelled_total 1")) << out;
  EXPECT_TRUE(has_line(out, "orchard_prompt_tokens_total 13")) << out;
  EXPECT_TRUE(has_line(out, "orchard_completion_tokens_total 5")) << out;
  EXPECT_TRUE(has_line(out, "orchard_time_to_first_token_seconds_count 1")) << out;
  EXPECT_TRUE(has_line(out, "orchard_time_per_output_token_seconds_count 1")) << out;
  EXPECT_TRUE(has_line(out, "orchard_kv_pages_used 30")) << out;
  EXPECT_TRUE(has_line(out, "orchard_kv_pages_free 70")) << out;
  EXPECT_TRUE(has_line(out, "orchard_prefix_cache_hit_rate 0.25")) << out;
  EXPECT_TRUE(has_line(out, "orchard_grammar_cache_hits_total 6")) << out;
  EXPECT_TRUE(has_line(out, "orchard_mask_seconds_total 1.5")) << out;
}

}  // namespace
}  // namespace pie::server
