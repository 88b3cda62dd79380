// The HTTP layer against the default model over loopback: routes, API key, body limit, error bodies,
// constrained output, streaming, and a client that disconnects mid-stream (its request is cancelled and
// its sequence freed). After every error the server keeps serving.
#include <gtest/gtest.h>
#include <httplib.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "loopback_server.h"
#include "pie/engine.h"
#include "pie/server.h"

namespace pie {
namespace {

using Json = nlohmann::ordered_json;

class ServerHttpTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    EngineOptions eo;
    eo.n_threads = 2;
    eo.context_length = 512;
    eo.max_running = 4;
    engine_ = std::make_shared<Engine>(random_model(), eo);
    ServerOptions so = orchard::testing::loopback_server_options("test-model");
    so.api_key = "secret";
    so.max_body_bytes = 64 * 1024;
    server_ = std::make_unique<orchard::testing::LoopbackServer>(engine_, so);
  }
  static void TearDownTestSuite() {
    server_.reset();
    engine_.reset();
  }

  static httplib::Client client(bool with_key = true) { return server_->client(with_key ? "secret" : ""); }
  static httplib::Result post(const std::string& path, const Json& body) {
    return client().Post(path.c_str(), body.dump(), "application/json");
  }
  static Json chat_body(Json extra = Json::object()) {
    Json body{{"model", "test-model"},
              {"messages", Json::array({Json{{"role", "user"}, {"content", "Hello"}}})},
              {"max_tokens", 8},
              {"temperature", 0}};
    for (auto& [k, v] : extra.items()) body[k] = v;
    return body;
  }
  // The server still answers a normal request.
  static void expect_serving() {
    auto r = post("/v1/chat/completions", chat_body({{"max_tokens", 2}}));
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << r->body;
  }
  static Json error_of(const httplib::Result& r) {
    Json body = Json::parse(r->body);
    EXPECT_TRUE(body.contains("error")) << r->body;
    return body["error"];
  }
  static double metric(const std::string& name) {
    auto r = client().Get("/metrics");
    std::string needle = "\n" + name + " ";
    auto at = r->body.find(needle);
    if (at == std::string::npos) return -1;
    return std::stod(r->body.substr(at + needle.size()));
  }

  static inline std::shared_ptr<Engine> engine_;
  static inline std::unique_ptr<orchard::testing::LoopbackServer> server_;
};

TEST_F(ServerHttpTest, HealthModelsAndOllamaInfo) {
  auto health = client(false).Get("/health");  // no key needed
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  auto models = client().Get("/v1/models");
  ASSERT_EQ(models->status, 200);
  EXPECT_EQ(Json::parse(models->body)["data"][0]["id"], "test-model");
  auto tags = client().Get("/api/tags");
  EXPECT_EQ(Json::parse(tags->body)["models"][0]["name"], "test-model");
  auto version = client().Get("/api/version");
  EXPECT_TRUE(Json::parse(version->body).contains("version"));
  auto show = post("/api/show", Json{{"model", "test-model"}});
  EXPECT_EQ(show->status, 200);
  EXPECT_TRUE(Json::parse(show->body).contains("model_info"));
  EXPECT_EQ(post("/api/show", Json{{"model", "test-model:latest"}})->status, 200);  // Ollama's tag
  auto missing = post("/api/show", Json{{"model", "nope"}});
  EXPECT_EQ(missing->status, 404);
  EXPECT_TRUE(Json::parse(missing->body)["error"].is_string());  // Ollama's error shape
}

TEST_F(ServerHttpTest, ApiKeyIsRequired) {
  auto none = client(false).Post("/v1/chat/completions", chat_body().dump(), "application/json");
  ASSERT_TRUE(none);
  EXPECT_EQ(none->status, 401);
  EXPECT_EQ(error_of(none)["code"], "invalid_api_key");
  httplib::Client wrong("127.0.0.1", server_->port());
  wrong.set_default_headers({{"Authorization", "Bearer wrong"}});
  auto bad = wrong.Get("/v1/models");
  EXPECT_EQ(bad->status, 401);
  expect_serving();
}

TEST_F(ServerHttpTest, ErrorsHaveOpenAIShapeAndStatus) {
  auto malformed = client().Post("/v1/chat/completions", "{\"model\": ", "application/json");
  EXPECT_EQ(malformed->status, 400);
  EXPECT_EQ(error_of(malformed)["type"], "invalid_request_error");
  auto unknown_model = post("/v1/chat/completions", chat_body({{"model", "gpt-9"}}));
  EXPECT_EQ(unknown_model->status, 404);
  EXPECT_EQ(error_of(unknown_model)["code"], "model_not_found");
  auto route = client().Get("/v2/nothing");
  EXPECT_EQ(route->status, 404);
  // Unknown paths share one metric label, so a scanner cannot grow the metrics without bound.
  EXPECT_EQ(client().Get("/metrics")->body.find("/v2/nothing"), std::string::npos);
  EXPECT_TRUE(error_of(route)["message"].get<std::string>().find("/v2/nothing") != std::string::npos);
  auto bad_param = post("/v1/chat/completions", chat_body({{"temperature", -1}}));
  EXPECT_EQ(bad_param->status, 400);
  EXPECT_EQ(error_of(bad_param)["param"], "temperature");
  std::string big(100 * 1024, 'x');
  auto too_large = client().Post("/v1/chat/completions", big, "application/json");
  ASSERT_TRUE(too_large);
  EXPECT_EQ(too_large->status, 413);
  // A conversation longer than the context (512 tokens) names the messages.
  Json long_chat = chat_body();
  long_chat["messages"][0]["content"] = std::string(20000, 'x');
  auto too_long = post("/v1/chat/completions", long_chat);
  EXPECT_EQ(too_long->status, 400);
  EXPECT_EQ(error_of(too_long)["param"], "messages");
  auto bad_grammar = post("/v1/chat/completions", chat_body({{"grammar", "root ::= ("}}));
  EXPECT_EQ(bad_grammar->status, 400);
  EXPECT_EQ(error_of(bad_grammar)["param"], "grammar");
  expect_serving();
}

TEST_F(ServerHttpTest, UnsupportedSchemaKeywordIsNamed) {
  Json format{{"type", "json_schema"},
              {"json_schema", Json{{"name", "x"}, {"schema", Json{{"type", "string"}, {"maxlength", 3}}}}}};
  auto r = post("/v1/chat/completions", chat_body({{"response_format", format}}));
  ASSERT_EQ(r->status, 400) << r->body;
  Json error = error_of(r);
  EXPECT_EQ(error["param"], "response_format.json_schema.schema");
  // A miscased validation keyword: named, with the keyword it should be.
  EXPECT_NE(error["message"].get<std::string>().find("maxlength"), std::string::npos) << error;
  EXPECT_NE(error["message"].get<std::string>().find("maxLength"), std::string::npos) << error;
  expect_serving();
}

TEST_F(ServerHttpTest, JsonSchemaOutputParses) {
  Json schema{{"type", "object"},
              {"properties", Json{{"ok", Json{{"type", "boolean"}}}, {"kind", Json{{"enum", Json::array({"a", "b"})}}}}},
              {"required", Json::array({"ok", "kind"})},
              {"additionalProperties", false}};
  Json format{{"type", "json_schema"}, {"json_schema", Json{{"name", "x"}, {"schema", schema}}}};
  auto r = post("/v1/chat/completions", chat_body({{"response_format", format}, {"max_tokens", 64}, {"seed", 1},
                                                   {"temperature", 0.7}}));
  ASSERT_EQ(r->status, 200) << r->body;
  Json body = Json::parse(r->body);
  EXPECT_EQ(body["choices"][0]["finish_reason"], "stop") << r->body;
  Json value = Json::parse(body["choices"][0]["message"]["content"].get<std::string>());
  EXPECT_TRUE(value["ok"].is_boolean());
  EXPECT_TRUE(value["kind"] == "a" || value["kind"] == "b");
  EXPECT_GT(body["usage"]["prompt_tokens"].get<int>(), 0);
}

// The `lark` extension: a Lark grammar with an inline %json schema; its errors name the field.
TEST_F(ServerHttpTest, LarkGrammarOutputFits) {
  const std::string lark =
      "start: \"answer: \" value\nvalue: %json {\"type\": \"object\", \"properties\": {\"n\": "
      "{\"type\": \"integer\", \"minimum\": 1, \"maximum\": 9}}, \"required\": [\"n\"], "
      "\"additionalProperties\": false}\n";
  auto r = post("/v1/chat/completions", chat_body({{"lark", lark}, {"max_tokens", 64}, {"seed", 2}, {"temperature", 1}}));
  ASSERT_EQ(r->status, 200) << r->body;
  Json body = Json::parse(r->body);
  EXPECT_EQ(body["choices"][0]["finish_reason"], "stop") << r->body;
  const std::string content = body["choices"][0]["message"]["content"].get<std::string>();
  ASSERT_TRUE(content.starts_with("answer: ")) << content;
  Json value = Json::parse(content.substr(8));
  EXPECT_GE(value["n"].get<int>(), 1);
  EXPECT_LE(value["n"].get<int>(), 9);
  auto bad = post("/v1/chat/completions", chat_body({{"lark", "start: %json {\"minimum\": \"ten\"}\n"}}));
  EXPECT_EQ(bad->status, 400);
  EXPECT_EQ(error_of(bad)["param"], "lark");
  expect_serving();
}

TEST_F(ServerHttpTest, StreamEndsWithDone) {
  std::string received;
  auto c = client();
  auto r = c.Post("/v1/chat/completions", {{"Authorization", "Bearer secret"}},
                  chat_body({{"stream", true}, {"stream_options", Json{{"include_usage", true}}}}).dump(),
                  "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_NE(r->body.find("\"role\":\"assistant\""), std::string::npos);
  EXPECT_NE(r->body.find("\"finish_reason\":\"length\""), std::string::npos) << r->body;
  EXPECT_NE(r->body.find("\"completion_tokens\":8"), std::string::npos) << r->body;
  EXPECT_TRUE(r->body.ends_with("data: [DONE]\n\n"));
}

// Sends a streaming chat request on a raw socket (so the test decides when the client goes away) and
// returns the socket. The regex cannot end before 1000 letters: the stream outlives whatever the test
// does next (no early end of sequence).
int open_stream(int port, const std::string& key, int max_tokens) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return -1;
  }
  Json chat{{"messages", Json::array({Json{{"role", "user"}, {"content", "Hello"}}})},
            {"stream", true}, {"max_tokens", max_tokens}, {"temperature", 1}, {"regex", "[a-z]{1000}"}};
  std::string body = chat.dump();
  std::string request = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + key +
                        "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
                        "\r\n\r\n" + body;
  if (::send(fd, request.data(), request.size(), 0) != static_cast<ssize_t>(request.size())) {
    ::close(fd);
    return -1;
  }
  return fd;
}

TEST_F(ServerHttpTest, DisconnectedStreamIsCancelledAndFreed) {
  int fd = open_stream(server_->port(), "secret", 400);
  ASSERT_GE(fd, 0);
  char buf[4096];
  std::string got;
  while (got.find("\"content\":\"") == std::string::npos || got.find("data:") == got.rfind("data:")) {
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    ASSERT_GT(n, 0);
    got.append(buf, static_cast<std::size_t>(n));
  }
  EXPECT_EQ(metric("orchard_http_requests_in_flight"), 1);
  ::close(fd);
  // The next writes fail; the request is cancelled and its pages go back.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline &&
         (metric("orchard_http_requests_in_flight") != 0 || engine_->stats().requests_running != 0)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(metric("orchard_http_requests_in_flight"), 0);
  EXPECT_EQ(engine_->stats().requests_running, 0u);
  EXPECT_EQ(engine_->stats().kv_pages_used, 0);
  EXPECT_GE(metric("orchard_http_requests_cancelled_total"), 1);
  expect_serving();
}

// An engine that refuses work (CapacityError: queue full, or shutting down, as here) is a 503 with
// Retry-After, and the server keeps answering the routes that need no generation.
TEST(ServerCapacity, EngineRefusalIs503) {
  EngineOptions eo;
  eo.n_threads = 1;
  eo.context_length = 256;
  auto engine = std::make_shared<Engine>(random_model(), eo);
  ServerOptions so;
  so.log_requests = false;
  orchard::testing::LoopbackServer server(engine, so);
  engine->shutdown(/*cancel_running=*/false);
  httplib::Client c = server.client("", 300);
  Json body{{"messages", Json::array({Json{{"role", "user"}, {"content", "Hi"}}})}, {"max_tokens", 2}};
  auto r = c.Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503) << r->body;
  EXPECT_EQ(Json::parse(r->body)["error"]["code"], "server_overloaded");
  EXPECT_EQ(r->get_header_value("Retry-After"), "1");
  EXPECT_EQ(c.Get("/health")->status, 200);
}

TEST_F(ServerHttpTest, OllamaChatStreamsNdjson) {
  Json body{{"model", "test-model"},
            {"messages", Json::array({Json{{"role", "user"}, {"content", "Hi"}}})},
            {"options", Json{{"num_predict", 5}, {"temperature", 0}}}};
  auto r = post("/api/chat", body);
  ASSERT_EQ(r->status, 200) << r->body;
  std::size_t lines = 0;
  Json last;
  std::size_t start = 0;
  for (std::size_t end; (end = r->body.find('\n', start)) != std::string::npos; start = end + 1) {
    last = Json::parse(r->body.substr(start, end - start));
    ++lines;
  }
  EXPECT_GE(lines, 2u);
  EXPECT_EQ(last["done"], true);
  EXPECT_EQ(last["eval_count"], 5);
  EXPECT_EQ(last["done_reason"], "length");
}

}  // namespace
}  // namespace pie
