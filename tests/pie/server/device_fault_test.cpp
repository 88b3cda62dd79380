// A device fault inside a step (injected: ORCHARD_INJECT_STEP_FAULTS, on the CPU backend, so it runs
// without a GPU): the requests of that step end with an error (500, or an error chunk when streaming), the
// engine goes on and the server keeps serving other requests, the engine's stats and /health report the
// fault. A malformed variable is an error at the engine's start that names it.
#include <gtest/gtest.h>
#include <httplib.h>

#include <cstdlib>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "loopback_server.h"
#include "pie/engine.h"
#include "pie/error.h"
#include "pie/server.h"

namespace pie {
namespace {

using Json = nlohmann::ordered_json;

// The engine under an injected fault at the given steps (the variable is read when the engine starts).
std::shared_ptr<Engine> engine_with_faults(const char* steps) {
  setenv("ORCHARD_INJECT_STEP_FAULTS", steps, 1);
  EngineOptions options;
  options.n_threads = 2;
  options.context_length = 256;
  options.max_running = 2;
  std::shared_ptr<Engine> engine;
  try {
    engine = std::make_shared<Engine>(random_model(), options);
  } catch (...) {
    unsetenv("ORCHARD_INJECT_STEP_FAULTS");
    throw;
  }
  unsetenv("ORCHARD_INJECT_STEP_FAULTS");
  return engine;
}

Json chat(int max_tokens, bool stream = false) {
  return Json{{"model", "test-model"},
              {"messages", Json::array({Json{{"role", "user"}, {"content", "Hello there"}}})},
              {"max_tokens", max_tokens},
              {"temperature", 0},
              {"stream", stream}};
}

TEST(DeviceFault, StepRequestsFailTheServerKeepsServingAndHealthSaysSo) {
  // Step 1: the first request's prefill; step 2: its first decode step, which faults. The streamed request
  // comes later: its steps are 3 (prefill) and 4 (faults).
  auto engine = engine_with_faults("2,4");
  orchard::testing::LoopbackServer server(engine, orchard::testing::loopback_server_options("test-model"));
  httplib::Client c = server.client("", 60);

  auto health = c.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(Json::parse(health->body)["status"], "ok");

  auto failed = c.Post("/v1/chat/completions", chat(4).dump(), "application/json");
  ASSERT_TRUE(failed);
  EXPECT_EQ(failed->status, 500) << failed->body;
  EXPECT_NE(failed->body.find("injected device fault in step 2"), std::string::npos) << failed->body;

  auto streamed = c.Post("/v1/chat/completions", chat(4, true).dump(), "application/json");
  ASSERT_TRUE(streamed);
  EXPECT_EQ(streamed->status, 200);  // the headers went out before the fault
  EXPECT_NE(streamed->body.find("\"error\""), std::string::npos) << streamed->body;
  EXPECT_NE(streamed->body.find("injected device fault in step 4"), std::string::npos) << streamed->body;

  auto served = c.Post("/v1/chat/completions", chat(4).dump(), "application/json");
  ASSERT_TRUE(served);
  EXPECT_EQ(served->status, 200) << served->body;
  EXPECT_EQ(Json::parse(served->body)["choices"][0]["finish_reason"], "length") << served->body;

  const EngineStats stats = engine->stats();
  EXPECT_EQ(stats.forward_failures, 2u);
  EXPECT_NE(stats.last_forward_error.find("step 4"), std::string::npos) << stats.last_forward_error;
  health = c.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  const Json h = Json::parse(health->body);
  EXPECT_EQ(h["status"], "degraded") << health->body;
  EXPECT_EQ(h["forward_failures"], 2) << health->body;
  EXPECT_NE(h["last_forward_error"].get<std::string>().find("injected device fault"), std::string::npos);
}

TEST(DeviceFault, MalformedStepListIsAnErrorNamingTheVariable) {
  for (const char* bad : {"x", "0", "2,", "3;4", "-1"}) {
    try {
      engine_with_faults(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("ORCHARD_INJECT_STEP_FAULTS"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace pie
