// The embedding routes over loopback: POST /v1/embeddings, /api/embed and /api/embeddings on a
// server holding all-MiniLM-L6-v2 alone (skipped when absent; generation routes refused with a 400)
// and on one holding the random-weight generative model (its hidden states); every field's errors.
#include <gtest/gtest.h>
#include <httplib.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "embedding_model.h"
#include "loopback_server.h"
#include "pie/embedding.h"
#include "pie/engine.h"
#include "pie/server.h"

namespace pie {
namespace {

using Json = nlohmann::ordered_json;

// A loopback server of `engine` (null: none) with `embedder` as its embedding model, served as `name`.
struct LiveServer : orchard::testing::LoopbackServer {
  LiveServer(std::shared_ptr<Engine> engine, std::function<std::shared_ptr<Embedder>()> embedder, std::string name)
      : LoopbackServer(std::move(engine), options(std::move(embedder), std::move(name))) {}

  static ServerOptions options(std::function<std::shared_ptr<Embedder>()> embedder, std::string name) {
    ServerOptions so = orchard::testing::loopback_server_options(std::move(name));
    so.embedder = std::move(embedder);
    return so;
  }
  httplib::Result post(const std::string& path, const Json& body) const {
    return client("", 60).Post(path.c_str(), body.dump(), "application/json");
  }
};

double norm(const Json& v) {
  double s = 0;
  for (const Json& x : v) s += x.get<double>() * x.get<double>();
  return std::sqrt(s);
}

class MiniLmServer : public ::testing::Test {
 protected:
  void SetUp() override {
    ORCHARD_REQUIRE_EMBEDDING_MODEL();
    if (!live_) {
      auto embedder = std::make_shared<Embedder>(
          load_embedding_model(orchard::testing::embedding_model_path()), 2);
      live_ = std::make_unique<LiveServer>(
          nullptr, [embedder] { return embedder; }, "minilm");
    }
  }
  static void TearDownTestSuite() { live_.reset(); }
  static Json ok(const std::string& path, const Json& body) {
    auto r = live_->post(path, body);
    EXPECT_TRUE(r);
    if (!r) return {};
    EXPECT_EQ(r->status, 200) << r->body;
    return Json::parse(r->body);
  }
  // A 4xx whose error names `param` and says `text`.
  static void bad(const std::string& path, const Json& body, int status, const std::string& param,
                  const std::string& text) {
    auto r = live_->post(path, body);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, status) << body.dump() << " -> " << r->body;
    const Json e = Json::parse(r->body)["error"];
    // Ollama's routes answer {"error": "message"}; OpenAI's the error object naming the field.
    const std::string message =
        e.is_string() ? e.get<std::string>() : e["message"].get<std::string>();
    if (!e.is_string() && !param.empty()) {
      EXPECT_EQ(e["param"], param) << r->body;
    }
    EXPECT_NE(message.find(text), std::string::npos) << r->body;
  }
  static std::unique_ptr<LiveServer> live_;
};
std::unique_ptr<LiveServer> MiniLmServer::live_;

TEST_F(MiniLmServer, OpenAiEmbeddingsOfStringsAndTokenIds) {
  const Json one =
      ok("/v1/embeddings", {{"model", "minilm"}, {"input", "The cat sat on the mat."}});
  EXPECT_EQ(one["object"], "list");
  EXPECT_EQ(one["model"], "minilm");
  ASSERT_EQ(one["data"].size(), 1u);
  EXPECT_EQ(one["data"][0]["object"], "embedding");
  EXPECT_EQ(one["data"][0]["index"], 0);
  EXPECT_EQ(one["data"][0]["embedding"].size(), 384u);
  EXPECT_NEAR(norm(one["data"][0]["embedding"]), 1.0, 1e-5);
  EXPECT_EQ(one["usage"]["prompt_tokens"], 9);  // [CLS] the cat sat on the mat . [SEP]
  EXPECT_EQ(one["usage"]["total_tokens"], 9);

  const Json many = ok("/v1/embeddings", {{"input", {"first", "second", "third"}}});
  ASSERT_EQ(many["data"].size(), 3u);
  EXPECT_EQ(many["data"][2]["index"], 2);
  EXPECT_NE(many["data"][0]["embedding"], many["data"][1]["embedding"]);

  // "hello world" as ids, with and without the outer list: the same vector as the text.
  const Json text = ok("/v1/embeddings", {{"input", "hello world"}});
  const Json ids = ok("/v1/embeddings", {{"input", {101, 7592, 2088, 102}}});
  const Json id_lists =
      ok("/v1/embeddings",
         {{"input", Json::array({Json::array({101, 7592, 2088, 102}), Json::array({101, 102})})}});
  EXPECT_EQ(ids["data"][0]["embedding"], text["data"][0]["embedding"]);
  EXPECT_EQ(id_lists["data"][0]["embedding"], text["data"][0]["embedding"]);
  EXPECT_EQ(id_lists["usage"]["prompt_tokens"], 6);
}

TEST_F(MiniLmServer, DimensionsAndBase64) {
  const Json full = ok("/v1/embeddings", {{"input", "dimensions"}});
  const Json cut = ok("/v1/embeddings", {{"input", "dimensions"}, {"dimensions", 8}});
  ASSERT_EQ(cut["data"][0]["embedding"].size(), 8u);
  EXPECT_NEAR(norm(cut["data"][0]["embedding"]), 1.0, 1e-6);
  double head = 0;
  for (int i = 0; i < 8; ++i) head += std::pow(full["data"][0]["embedding"][i].get<double>(), 2);
  EXPECT_NEAR(cut["data"][0]["embedding"][0].get<double>(),
              full["data"][0]["embedding"][0].get<double>() / std::sqrt(head), 1e-6);

  const Json b64 = ok("/v1/embeddings",
                      {{"input", "dimensions"}, {"dimensions", 8}, {"encoding_format", "base64"}});
  const std::string text = b64["data"][0]["embedding"].get<std::string>();
  ASSERT_EQ(text.size(), 44u);  // 32 bytes
  static const std::string kAlphabet =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string bytes;
  std::uint32_t acc = 0;
  int bits = 0;
  for (char c : text) {
    if (c == '=') break;
    acc = acc << 6 | static_cast<std::uint32_t>(kAlphabet.find(c));
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      bytes += static_cast<char>(acc >> bits & 0xFF);
    }
  }
  ASSERT_EQ(bytes.size(), 32u);
  for (int i = 0; i < 8; ++i) {
    float x;
    std::memcpy(&x, bytes.data() + 4 * i, 4);
    EXPECT_FLOAT_EQ(x, cut["data"][0]["embedding"][i].get<float>()) << i;
  }
}

TEST_F(MiniLmServer, OllamaEmbedAndEmbeddings) {
  const Json embed = ok("/api/embed", {{"model", "minilm"},
                                       {"input", {"why is the sky blue?", "why is grass green?"}},
                                       {"keep_alive", "5m"},
                                       {"options", {{"temperature", 0}}}});
  EXPECT_EQ(embed["model"], "minilm");
  ASSERT_EQ(embed["embeddings"].size(), 2u);
  EXPECT_EQ(embed["embeddings"][0].size(), 384u);
  EXPECT_GT(embed["total_duration"].get<std::int64_t>(), 0);
  EXPECT_TRUE(embed.contains("load_duration"));
  EXPECT_GT(embed["prompt_eval_count"].get<std::int64_t>(), 10);
  const Json single =
      ok("/api/embed",
         {{"model", "minilm:latest"}, {"input", "why is the sky blue?"}, {"dimensions", 16}});
  EXPECT_EQ(single["embeddings"][0].size(), 16u);
  // Ollama truncates by default; truncate false makes an over-long input a 400.
  std::string long_text;
  for (int i = 0; i < 400; ++i) long_text += "word ";
  EXPECT_EQ(ok("/api/embed", {{"input", long_text}})["prompt_eval_count"], 256);
  bad("/api/embed", {{"input", long_text}, {"truncate", false}}, 400, "input",
      "402 tokens, more than the model's 256");
  // The older route: one prompt, one embedding; no prompt loads the model.
  const Json legacy =
      ok("/api/embeddings", {{"model", "minilm"}, {"prompt", "why is the sky blue?"}});
  EXPECT_EQ(legacy["embedding"], embed["embeddings"][0]);
  EXPECT_EQ(ok("/api/embeddings", {{"model", "minilm"}})["embedding"].size(), 0u);
  EXPECT_EQ(ok("/api/embed", {{"model", "minilm"}})["embeddings"].size(), 0u);
}

TEST_F(MiniLmServer, EveryBadFieldIsA400NamingIt) {
  bad("/v1/embeddings", Json::object(), 400, "input", "'input' is required");
  bad("/v1/embeddings", {{"input", 42}}, 400, "input", "must be a string, a list of strings");
  bad("/v1/embeddings", {{"input", {{"k", "v"}}}}, 400, "input",
      "must be a string, a list of strings");
  bad("/v1/embeddings", {{"input", Json::array()}}, 400, "input", "empty list");
  bad("/v1/embeddings", {{"input", ""}}, 400, "input", "empty string");
  bad("/v1/embeddings", {{"input", {"a", 1}}}, 400, "input",
      "'input[1]' must be a string like the first");
  bad("/v1/embeddings", {{"input", {1, "a"}}}, 400, "input", "'input[1]' must be a token id");
  bad("/v1/embeddings", {{"input", {1, -2}}}, 400, "input", "got -2");
  bad("/v1/embeddings", {{"input", {101, 99999}}}, 400, "input",
      "token id 99999, outside the vocabulary");
  bad("/v1/embeddings", {{"input", Json::array({Json::array({101}), Json::array()})}}, 400, "input",
      "'input[1]' is an empty list");
  bad("/v1/embeddings", {{"input", "x"}, {"encoding_format", "int8"}}, 400, "encoding_format",
      "\"float\" or \"base64\"");
  bad("/v1/embeddings", {{"input", "x"}, {"dimensions", 0}}, 400, "dimensions",
      "positive integer, got 0");
  bad("/v1/embeddings", {{"input", "x"}, {"dimensions", "8"}}, 400, "dimensions",
      "positive integer");
  bad("/v1/embeddings", {{"input", "x"}, {"dimensions", 385}}, 400, "dimensions",
      "385, more than the model's 384");
  bad("/v1/embeddings", {{"input", "x"}, {"model", 3}}, 400, "model", "must be a string");
  bad("/v1/embeddings", {{"input", "x"}, {"model", "gpt-4"}}, 404, "model",
      "'gpt-4' does not exist");
  std::string long_text;
  for (int i = 0; i < 400; ++i) long_text += "word ";
  bad("/v1/embeddings", {{"input", long_text}}, 400, "input", "more than the model's 256");
  bad("/api/embed", {{"input", {1, 2}}}, 400, "input", "'input[0]' must be a string");
  bad("/api/embed", {{"input", "x"}, {"truncate", "yes"}}, 400, "truncate", "true or false");
  bad("/api/embed", {{"input", "x"}, {"keep_alive", Json::array()}}, 400, "keep_alive", "duration");
  bad("/api/embed", {{"input", "x"}, {"options", 1}}, 400, "options", "must be an object");
  bad("/api/embed", {{"input", "x"}, {"model", "nope"}}, 404, "model", "model 'nope' not found");
  bad("/api/embeddings", {{"prompt", 7}}, 400, "prompt", "must be a string");
}

TEST_F(MiniLmServer, GenerationRoutesRefuseAnEmbeddingModel) {
  const Json messages = Json::array({Json{{"role", "user"}, {"content", "hi"}}});
  bad("/v1/chat/completions", {{"model", "minilm"}, {"messages", messages}}, 400, "model",
      "is an embedding model");
  bad("/v1/completions", {{"prompt", "hi"}}, 400, "model", "is an embedding model");
  bad("/api/chat", {{"model", "minilm"}, {"messages", messages}}, 400, "model",
      "is an embedding model");
  bad("/api/generate", {{"model", "minilm"}, {"prompt", "hi"}}, 400, "model",
      "is an embedding model");
  // The store's routes too: such a server holds no store.
  bad("/api/pull", {{"model", "x"}}, 400, "model", "holds no model store");
  bad("/v1/grammar/compile", {{"regex", "a"}}, 400, "model", "is an embedding model");
  // What lists and describes models still answers.
  httplib::Client c = live_->client();
  auto tags = c.Get("/api/tags");
  ASSERT_TRUE(tags);
  EXPECT_EQ(Json::parse(tags->body)["models"][0]["details"]["family"], "bert");
  const Json show = ok("/api/show", {{"model", "minilm"}});
  EXPECT_EQ(show["capabilities"], Json::array({"embedding"}));
  EXPECT_EQ(show["model_info"]["bert.embedding_length"], 384);
  auto ps = c.Get("/api/ps");
  ASSERT_TRUE(ps);
  EXPECT_EQ(Json::parse(ps->body)["models"][0]["name"], "minilm");
  auto health = c.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(Json::parse(health->body)["model"], "minilm");
  auto metrics = c.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->status, 200);
}

// A generative model's server gives its hidden states as embeddings too.
TEST(GenerativeServer, EmbeddingsFromTheDecodersHiddenState) {
  EngineOptions eo;
  eo.n_threads = 1;
  eo.context_length = 256;
  auto model = random_model();
  auto engine = std::make_shared<Engine>(model, eo);
  LiveServer live(
      engine,
      [model] { return std::make_shared<Embedder>(embedding_model_from_decoder(model), 1); },
      "random");
  auto r = live.post("/v1/embeddings", {{"model", "random"}, {"input", {"hello", "hello world"}}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const Json body = Json::parse(r->body);
  ASSERT_EQ(body["data"].size(), 2u);
  EXPECT_EQ(body["data"][0]["embedding"].size(), static_cast<std::size_t>(model->config.n_embd));
  EXPECT_NEAR(norm(body["data"][0]["embedding"]), 1.0, 1e-5);
  EXPECT_NE(body["data"][0]["embedding"], body["data"][1]["embedding"]);
  // Generation still works beside it.
  auto chat =
      live.post("/v1/completions", {{"model", "random"}, {"prompt", "hello"}, {"max_tokens", 2}});
  ASSERT_TRUE(chat);
  EXPECT_EQ(chat->status, 200) << chat->body;
}

// A server given no embedder for its model: the embedding routes answer a 400 naming the model.
TEST(NoEmbedder, EmbeddingsOfAModelThatCannotEmbedAre400NamingIt) {
  EngineOptions eo;
  eo.n_threads = 1;
  eo.context_length = 128;
  LiveServer live(std::make_shared<Engine>(random_model(), eo), nullptr, "random");
  for (const char* path : {"/v1/embeddings", "/api/embed"}) {
    auto r = live.post(path, {{"model", "random"}, {"input", "hello"}});
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << r->body;
    EXPECT_NE(r->body.find("model 'random' gives no embeddings"), std::string::npos) << r->body;
  }
}

}  // namespace
}  // namespace pie
