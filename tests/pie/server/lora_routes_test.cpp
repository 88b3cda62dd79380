// The server's LoRA routes over loopback on the random-weight model with generated adapters: `model`
// naming an adapter selects it, the per-request `lora` field (by index or name, with a scale), default
// scales through POST /lora-adapters, load and unload (vLLM's routes), /v1/models listing the adapters,
// and every error: 404 naming an unknown adapter or model, 400 for malformed fields, an adapter already
// loaded or one that does not fit; the server keeps serving after each.
#include <gtest/gtest.h>
#include <httplib.h>

#include <filesystem>
#include <memory>
#include <random>
#include <string>

#include <nlohmann/json.hpp>

#include "loopback_server.h"
#include "pie/engine.h"
#include "pie/lora.h"
#include "pie/server.h"

namespace pie {
namespace {

using Json = nlohmann::ordered_json;

// A rank-8 adapter on every q and down projection of `model`, drawn from `seed`, large enough to change
// greedy outputs.
std::shared_ptr<LoraAdapter> random_adapter(const Model& model, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto adapter = std::make_shared<LoraAdapter>();
  adapter->name = "random";
  adapter->alpha = 16;
  for (std::int32_t layer = 0; layer < model.config.n_layer; ++layer) {
    const LayerWeights& l = model.weights.layers[static_cast<std::size_t>(layer)];
    for (auto [site, w] : {std::pair{ProjectionSite::q, &l.wq}, std::pair{ProjectionSite::down, &l.w_down}}) {
      LoraPair p;
      p.site = site;
      p.layer = layer;
      p.rank = 8;
      p.n_in = n_in(*w);
      p.n_out = n_out(*w);
      p.scale = 2;
      p.a.resize(static_cast<std::size_t>(p.rank * p.n_in));
      p.b.resize(static_cast<std::size_t>(p.n_out * p.rank));
      for (float& x : p.a) x = normal(rng) / std::sqrt(static_cast<float>(p.n_in));
      for (float& x : p.b) x = normal(rng);
      adapter->pairs.push_back(std::move(p));
    }
  }
  return adapter;
}

class LoraRoutesTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::filesystem::temp_directory_path() / ("orchard-lora-routes-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    EngineOptions eo;
    eo.n_threads = 2;
    eo.context_length = 256;
    engine_ = std::make_shared<Engine>(random_model(), eo);
    for (const auto& [name, seed] : {std::pair{"x", 1u}, std::pair{"y", 2u}}) {
      auto a = random_adapter(engine_->model(), seed);
      fit_lora_adapter(*a, engine_->model());
      write_gguf_adapter(*a, engine_->model(), dir_ / (std::string(name) + ".gguf"));
    }
    engine_->attach_lora("x", dir_ / "x.gguf");
    server_ = std::make_unique<orchard::testing::LoopbackServer>(engine_,
                                                                 orchard::testing::loopback_server_options("base-model"));
  }
  static void TearDownTestSuite() {
    server_.reset();
    engine_.reset();
    std::filesystem::remove_all(dir_);
  }

  static httplib::Result post(const std::string& path, const Json& body) {
    return server_->client().Post(path.c_str(), body.dump(), "application/json");
  }
  static httplib::Result get(const std::string& path) { return server_->client().Get(path.c_str()); }
  // The greedy completion of a fixed prompt with `extra` fields; its text, or the error body.
  static std::pair<int, Json> complete(Json extra) {
    Json body{{"model", "base-model"}, {"prompt", "Once upon a time"}, {"max_tokens", 12}, {"temperature", 0}};
    for (auto& [k, v] : extra.items()) body[k] = v;
    auto r = post("/v1/completions", body);
    EXPECT_TRUE(r);
    return {r->status, Json::parse(r->body)};
  }
  static std::string text(Json extra) {
    auto [status, body] = complete(std::move(extra));
    EXPECT_EQ(status, 200) << body.dump();
    return status == 200 ? body["choices"][0]["text"].get<std::string>() : "";
  }
  static std::string code_of(const Json& body) { return body["error"]["code"].get<std::string>(); }

  static inline std::filesystem::path dir_;
  static inline std::shared_ptr<Engine> engine_;
  static inline std::unique_ptr<orchard::testing::LoopbackServer> server_;
};

TEST_F(LoraRoutesTest, ModelNamingAnAdapterSelectsIt) {
  const std::string base = text({});
  const std::string with_x = text({{"model", "x"}});
  EXPECT_NE(with_x, base);
  EXPECT_EQ(text({{"lora", Json::array({Json{{"id", 0}, {"scale", 1.0}}})}}), with_x);
  EXPECT_EQ(text({{"lora", Json::array({Json{{"id", "x"}}})}}), with_x);
  EXPECT_NE(text({{"lora", Json::array({Json{{"id", "x"}, {"scale", 0.3}}})}}), with_x);
  EXPECT_EQ(text({{"lora", Json::array()}}), base);
  // The chat route too.
  Json chat{{"model", "x"}, {"messages", Json::array({Json{{"role", "user"}, {"content", "Hi"}}})}, {"max_tokens", 4}};
  auto r = post("/v1/chat/completions", chat);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
}

TEST_F(LoraRoutesTest, UnknownAdaptersAndModelsAre404) {
  auto [status, body] = complete({{"model", "nope"}});
  EXPECT_EQ(status, 404);
  EXPECT_EQ(code_of(body), "model_not_found");
  std::tie(status, body) = complete({{"lora", Json::array({Json{{"id", "nope"}}})}});
  EXPECT_EQ(status, 404);
  EXPECT_EQ(code_of(body), "lora_not_found");
  EXPECT_NE(body["error"]["message"].get<std::string>().find("'nope'"), std::string::npos);
  std::tie(status, body) = complete({{"lora", Json::array({Json{{"id", 7}}})}});
  EXPECT_EQ(status, 404);
  EXPECT_EQ(code_of(body), "lora_not_found");
  for (const Json& bad : {Json("x"), Json::array({Json{{"scale", 1}}}), Json::array({Json{{"id", true}}}),
                          Json::array({Json{{"id", 0}, {"scale", "big"}}}), Json::array({Json{{"id", 0}, {"scale", 1e300}}})}) {
    std::tie(status, body) = complete({{"lora", bad}});
    EXPECT_EQ(status, 400) << bad.dump();
    EXPECT_NE(body["error"]["param"].get<std::string>().find("lora"), std::string::npos) << body.dump();
  }
  EXPECT_EQ(complete({}).first, 200);
}

TEST_F(LoraRoutesTest, LoadAndUnloadAdapters) {
  auto r = post("/v1/load_lora_adapter", {{"lora_name", "y"}, {"lora_path", (dir_ / "y.gguf").string()}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  auto models = Json::parse(get("/v1/models")->body)["data"];
  ASSERT_EQ(models.size(), 3u);
  EXPECT_EQ(models[0]["id"], "base-model");
  EXPECT_EQ(models[2]["id"], "y");
  EXPECT_EQ(models[2]["parent"], "base-model");
  EXPECT_EQ(Json::parse(get("/v1/models/y")->body)["id"], "y");
  const std::string with_y = text({{"model", "y"}});
  EXPECT_NE(with_y, text({{"model", "x"}}));
  // Loaded again, a bad path, missing fields.
  r = post("/v1/load_lora_adapter", {{"lora_name", "y"}, {"lora_path", (dir_ / "y.gguf").string()}});
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(code_of(Json::parse(r->body)), "lora_already_loaded");
  r = post("/v1/load_lora_adapter", {{"lora_name", "z"}, {"lora_path", (dir_ / "missing").string()}});
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(Json::parse(r->body)["error"]["param"], "lora_path");
  r = post("/v1/load_lora_adapter", {{"lora_name", "z"}});
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(Json::parse(r->body)["error"]["param"], "lora_path");
  r = post("/v1/unload_lora_adapter", {{"lora_name", "y"}});
  EXPECT_EQ(r->status, 200) << r->body;
  r = post("/v1/unload_lora_adapter", {{"lora_name", "y"}});
  EXPECT_EQ(r->status, 404);
  EXPECT_EQ(code_of(Json::parse(r->body)), "lora_not_found");
  EXPECT_EQ(complete({{"model", "y"}}).first, 404);
  EXPECT_EQ(Json::parse(get("/v1/models")->body)["data"].size(), 2u);
}

TEST_F(LoraRoutesTest, DefaultScalesThroughLoraAdapters) {
  auto list = Json::parse(get("/lora-adapters")->body);
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0]["id"], 0);
  EXPECT_EQ(list[0]["name"], "x");
  EXPECT_EQ(list[0]["scale"], 0.0);
  const std::string base = text({});
  auto r = post("/lora-adapters", Json::array({Json{{"id", 0}, {"scale", 0.5}}}));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(Json::parse(r->body)[0]["scale"], 0.5);
  // Requests without `lora` get the defaults; `lora` replaces them.
  EXPECT_EQ(text({}), text({{"lora", Json::array({Json{{"id", 0}, {"scale", 0.5}}})}}));
  EXPECT_NE(text({}), base);
  EXPECT_EQ(text({{"lora", Json::array()}}), base);
  r = post("/lora-adapters", Json::array({Json{{"id", 3}, {"scale", 1}}}));
  EXPECT_EQ(r->status, 404);
  r = post("/lora-adapters", Json::object());
  EXPECT_EQ(r->status, 400);
  r = post("/lora-adapters", Json::array());
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(text({}), base);
}

}  // namespace
}  // namespace pie
