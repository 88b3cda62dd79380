// The server's additions for its web page, over loopback on the random-weight model: the page's files
// (GET /, /ui/...: no key needed, gzip as embedded or inflated, ETag and 304, 404s), the compile-only route
// POST /v1/grammar/compile (statistics, the cache, the text check, every error with its location), and the
// token_detail extension (sampled and forced tokens and the mask counts, streamed and not).
#include <gtest/gtest.h>
#include <httplib.h>
#include <zlib.h>

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "loopback_server.h"
#include "pie/engine.h"
#include "pie/server.h"
#include "server/web_assets.h"
#include "server/web_routes.h"

namespace pie {
namespace {

using Json = nlohmann::ordered_json;

std::string gunzip(const std::string& gz) {
  z_stream z{};
  EXPECT_EQ(inflateInit2(&z, 16 + MAX_WBITS), Z_OK);
  std::string out;
  char buf[1 << 16];
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(gz.data()));
  z.avail_in = static_cast<uInt>(gz.size());
  int rc = Z_OK;
  while (rc == Z_OK) {
    z.next_out = reinterpret_cast<Bytef*>(buf);
    z.avail_out = sizeof buf;
    rc = inflate(&z, Z_NO_FLUSH);
    out.append(buf, sizeof buf - z.avail_out);
  }
  inflateEnd(&z);
  EXPECT_EQ(rc, Z_STREAM_END) << "not a whole gzip stream";
  return out;
}

class WebRoutesTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    EngineOptions eo;
    eo.n_threads = 2;
    eo.context_length = 512;
    eo.max_running = 4;
    engine_ = std::make_shared<Engine>(random_model(), eo);
    ServerOptions so = orchard::testing::loopback_server_options("test-model");
    so.api_key = "secret";
    so.max_body_bytes = 4u << 20;
    server_ = std::make_unique<orchard::testing::LoopbackServer>(engine_, so);
  }
  static void TearDownTestSuite() {
    server_.reset();
    engine_.reset();
  }

  static std::unique_ptr<httplib::Client> client(bool with_key = true) {
    auto c = std::make_unique<httplib::Client>(server_->client(with_key ? "secret" : ""));
    c->set_decompress(false);  // the bytes as sent
    return c;
  }
  static httplib::Result post(const std::string& path, const Json& body) {
    return client()->Post(path.c_str(), body.dump(), "application/json");
  }
  static Json compile(const Json& body, int expect_status) {
    auto r = post("/v1/grammar/compile", body);
    EXPECT_TRUE(r);
    if (!r) return Json();
    EXPECT_EQ(r->status, expect_status) << body.dump() << " -> " << r->body;
    return Json::parse(r->body);
  }
  static std::int32_t eos() {
    const auto& st = engine_->model().tokenizer->special_tokens();
    return st.end_of_generation.empty() ? *st.eos : st.end_of_generation.front();
  }

  static inline std::shared_ptr<Engine> engine_;
  static inline std::unique_ptr<orchard::testing::LoopbackServer> server_;
};

// --- the page's files ----------------------------------------------------------------------------------

TEST(WebAssets, AcceptEncodingIsRead) {
  using server::accepts_gzip;
  EXPECT_TRUE(accepts_gzip("gzip"));
  EXPECT_TRUE(accepts_gzip("gzip, deflate, br, zstd"));
  EXPECT_TRUE(accepts_gzip("br;q=1.0, gzip;q=0.8"));
  EXPECT_TRUE(accepts_gzip("*"));
  EXPECT_TRUE(accepts_gzip("x-gzip"));
  EXPECT_FALSE(accepts_gzip(""));
  EXPECT_FALSE(accepts_gzip("identity"));
  EXPECT_FALSE(accepts_gzip("br"));
  EXPECT_FALSE(accepts_gzip("gzip;q=0"));
  EXPECT_FALSE(accepts_gzip("gzip; q=0.000, deflate"));
  EXPECT_FALSE(accepts_gzip("gzipped"));
}

TEST(WebAssets, ThePageAndItsOwnFilesAreEmbedded) {
  ASSERT_FALSE(server::web_assets().empty()) << "built with ORCHARD_WEB_UI=OFF?";
  for (const char* path : {"/", "/ui/app.js", "/ui/app.css", "/ui/api.js", "/ui/chat.js", "/ui/playground.js",
                           "/ui/dashboard.js", "/ui/icon.svg"}) {
    EXPECT_NE(server::find_web_asset(path), nullptr) << path;
  }
  EXPECT_EQ(server::find_web_asset("/ui/none.js"), nullptr);
  const server::WebAsset& page = *server::find_web_asset("/");
  EXPECT_EQ(page.content_type, "text/html; charset=utf-8");
  const std::string html = gunzip(std::string(page.gzip));
  EXPECT_EQ(html.size(), page.size);
  // The library line became one tag per embedded library, and no other library is asked for.
  EXPECT_EQ(html.find("orchard:libraries"), std::string::npos);
  for (const server::WebAsset& a : server::web_assets()) {
    EXPECT_EQ(gunzip(std::string(a.gzip)).size(), a.size) << a.path;
    EXPECT_TRUE(a.etag.starts_with("\"") && a.etag.ends_with("\"")) << a.etag;
    if (a.path.starts_with("/ui/lib/")) {
      EXPECT_NE(html.find(std::string(a.path)), std::string::npos) << a.path;
    }
  }
  std::size_t at = 0;
  while ((at = html.find("/ui/lib/", at)) != std::string::npos) {
    const std::string path = html.substr(at, html.find('"', at) - at);
    EXPECT_NE(server::find_web_asset(path), nullptr) << path;
    at += path.size();
  }
}

// No key needed for the files (they hold no data); gzip to a client that takes it, the bytes inflated to
// one that does not; the same strong ETag, and 304 for it.
TEST_F(WebRoutesTest, PageIsServedWithoutTheKey) {
  auto c = client(false);
  auto plain = c->Get("/", {{"Accept-Encoding", "identity"}});
  ASSERT_TRUE(plain);
  ASSERT_EQ(plain->status, 200) << plain->body;
  EXPECT_EQ(plain->get_header_value("Content-Type"), "text/html; charset=utf-8");
  EXPECT_FALSE(plain->has_header("Content-Encoding"));
  EXPECT_NE(plain->body.find("<title>Orchard</title>"), std::string::npos);
  EXPECT_NE(plain->get_header_value("Content-Security-Policy").find("script-src 'self'"), std::string::npos);
  const std::string etag = plain->get_header_value("ETag");
  EXPECT_FALSE(etag.empty());

  auto gz = c->Get("/", {{"Accept-Encoding", "gzip, deflate, br"}});
  ASSERT_EQ(gz->status, 200);
  EXPECT_EQ(gz->get_header_value("Content-Encoding"), "gzip");
  EXPECT_EQ(gunzip(gz->body), plain->body);
  EXPECT_EQ(gz->get_header_value("ETag"), etag);

  auto again = c->Get("/", {{"If-None-Match", etag}});
  EXPECT_EQ(again->status, 304);
  EXPECT_TRUE(again->body.empty());
  EXPECT_EQ(c->Get("/", {{"If-None-Match", "\"other\""}})->status, 200);

  auto script = c->Get("/ui/app.js", {{"Accept-Encoding", "identity"}});
  ASSERT_EQ(script->status, 200);
  EXPECT_EQ(script->get_header_value("Content-Type"), "text/javascript; charset=utf-8");
  EXPECT_EQ(script->body.size(), server::find_web_asset("/ui/app.js")->size);

  auto missing = c->Get("/ui/none.js");
  EXPECT_EQ(missing->status, 404);
  EXPECT_EQ(Json::parse(missing->body)["error"]["code"], "not_found");
  // The data is still behind the key.
  EXPECT_EQ(c->Get("/v1/models")->status, 401);
  EXPECT_EQ(c->Post("/v1/grammar/compile", R"({"regex": "a"})", "application/json")->status, 401);
}

// --- POST /v1/grammar/compile -------------------------------------------------------------------------

TEST_F(WebRoutesTest, CompileAnswersStatisticsAndUsesTheEnginesCache) {
  const Json schema{{"type", "object"},
                    {"properties", Json{{"n", Json{{"type", "integer"}, {"minimum", 0}, {"maximum", 99}}}}},
                    {"required", Json::array({"n"})}};
  const std::uint64_t compiles_before = engine_->stats().grammar_compiles;
  Json first = compile(Json{{"model", "test-model"}, {"json_schema", schema}}, 200);
  EXPECT_EQ(first["object"], "grammar.compile");
  EXPECT_EQ(first["model"], "test-model");
  EXPECT_EQ(first["param"], "json_schema");
  EXPECT_FALSE(first["cached"].get<bool>());
  EXPECT_GT(first["stats"]["states"].get<int>(), 1);
  EXPECT_GT(first["stats"]["token_tables"].get<int>(), 0);
  EXPECT_GE(first["ready_ms"].get<double>(), first["compile_ms"].get<double>());
  EXPECT_EQ(first["vocabulary"]["tokens"].get<int>(), engine_->model().tokenizer->vocab_size());
  EXPECT_FALSE(first.contains("check"));
  EXPECT_EQ(engine_->stats().grammar_compiles, compiles_before + 1);
  // The same schema as JSON text, and then in a chat request: both from the cache.
  Json second = compile(Json{{"json_schema", schema.dump()}}, 200);
  EXPECT_TRUE(second["cached"].get<bool>());
  Json format{{"type", "json_schema"}, {"json_schema", Json{{"name", "n"}, {"schema", schema}}}};
  EXPECT_TRUE(compile(Json{{"response_format", format}}, 200)["cached"].get<bool>());
  for (const Json& body : {Json{{"grammar", "root ::= [a-z]+"}}, Json{{"lark", "start: \"x\" /[0-9]+/"}},
                           Json{{"regex", "[0-9]{3}-[0-9]{4}"}}, Json{{"response_format", Json{{"type", "json_object"}}}}}) {
    Json r = compile(body, 200);
    EXPECT_EQ(r["param"], body.begin().key()) << r;
  }
}

TEST_F(WebRoutesTest, CompileChecksAText) {
  const Json regex{{"regex", "[0-9]{3}-[0-9]{4}"}};
  auto check = [&](const std::string& text) {
    Json body = regex;
    body["text"] = text;
    return compile(body, 200)["check"];
  };
  Json ok = check("555-1234");
  EXPECT_TRUE(ok["accepted"].get<bool>());
  EXPECT_TRUE(ok["complete"].get<bool>());
  EXPECT_TRUE(ok["rejected_at"].is_null());
  EXPECT_EQ(ok["bytes"], 8);
  Json bad = check("555x1234");
  EXPECT_FALSE(bad["accepted"].get<bool>());
  EXPECT_EQ(bad["rejected_at"], 3);
  EXPECT_NE(bad["message"].get<std::string>().find("byte 3"), std::string::npos) << bad;
  Json incomplete = check("555-12");
  EXPECT_FALSE(incomplete["accepted"].get<bool>());
  EXPECT_FALSE(incomplete["complete"].get<bool>());
  EXPECT_TRUE(incomplete["rejected_at"].is_null());
  EXPECT_NE(incomplete["message"].get<std::string>().find("incomplete"), std::string::npos) << incomplete;
  // A JSON text checked under another layout: indented JSON fits "flexible", not the default compact.
  const Json schema{{"type", "object"}, {"properties", Json{{"a", Json{{"type", "integer"}}}}}};
  const std::string spaced = "{ \"a\": 1 }";
  EXPECT_FALSE(compile(Json{{"json_schema", schema}, {"text", spaced}}, 200)["check"]["accepted"].get<bool>());
  EXPECT_TRUE(compile(Json{{"json_schema", schema}, {"text", spaced}, {"json_layout", "flexible"}}, 200)["check"]["accepted"]
                  .get<bool>());
}

TEST_F(WebRoutesTest, CompileErrorsSayWhatAndWhere) {
  // GBNF: the line and column.
  Json gbnf = compile(Json{{"grammar", "root ::= \"a\" item\nitem ::= ( \"b\" | \"c\" ]"}}, 400)["error"];
  EXPECT_EQ(gbnf["code"], "invalid_grammar");
  EXPECT_EQ(gbnf["param"], "grammar");
  ASSERT_TRUE(gbnf.contains("location")) << gbnf;
  EXPECT_EQ(gbnf["location"]["line"], 2);
  EXPECT_GT(gbnf["location"]["column"].get<int>(), 1);
  EXPECT_NE(gbnf["message"].get<std::string>().find("line 2"), std::string::npos) << gbnf;
  // Regex: a column on line 1.
  Json regex = compile(Json{{"regex", "ab(c"}}, 400)["error"];
  EXPECT_EQ(regex["param"], "regex");
  EXPECT_EQ(regex["location"]["line"], 1);
  // Lark.
  EXPECT_TRUE(compile(Json{{"lark", "start: \"a\"\nstart2 \"b\""}}, 400)["error"].contains("location"));
  // Schema JSON text that does not parse: its line and column (in characters).
  Json text = compile(Json{{"json_schema", "{\"type\": \"object\",\n \"properties\": {\"é\": tru}}"}}, 400)["error"];
  EXPECT_EQ(text["code"], "invalid_json");
  EXPECT_EQ(text["location"]["line"], 2);
  EXPECT_GE(text["location"]["column"].get<int>(), 22);
  EXPECT_LE(text["location"]["column"].get<int>(), 25);
  // Schema text nested past the converter's bound: refused while read (the parser itself recursed).
  const std::string deep = std::string(300000, '[') + std::string(300000, ']');
  Json nested = compile(Json{{"json_schema", "{\"default\": " + deep + "}"}}, 400)["error"];
  EXPECT_EQ(nested["code"], "constraint_too_large");
  EXPECT_EQ(nested["param"], "json_schema");
  EXPECT_NE(nested["message"].get<std::string>().find("more than 1000 levels deep"), std::string::npos) << nested;
  // A schema the converter rejects: the pointer and keyword.
  Json schema = compile(Json{{"json_schema", Json{{"type", "object"}, {"properties", Json{{"a", Json{{"type", "strin"}}}}}}}},
                        400)["error"];
  EXPECT_EQ(schema["param"], "json_schema");
  EXPECT_EQ(schema["location"], (Json{{"pointer", "/properties/a"}, {"keyword", "type"}}));
  // A grammar that parses but cannot compile (an undefined rule): no place, still a 400 naming the field.
  Json undefined = compile(Json{{"grammar", "root ::= item"}}, 400)["error"];
  EXPECT_EQ(undefined["param"], "grammar");
  // Requests that are wrong in themselves.
  EXPECT_EQ(compile(Json::object(), 400)["error"]["message"].get<std::string>().find("one of"), 0u);
  EXPECT_EQ(compile(Json{{"grammar", "root ::= \"a\""}, {"regex", "a"}}, 400)["error"]["type"], "invalid_request_error");
  EXPECT_EQ(compile(Json{{"regex", "a"}, {"json_schema", Json::object()}}, 400)["error"]["param"], "json_schema");
  EXPECT_EQ(compile(Json{{"json_schema", 5}}, 400)["error"]["param"], "json_schema");
  EXPECT_EQ(compile(Json{{"regex", "a"}, {"text", 5}}, 400)["error"]["param"], "text");
  EXPECT_EQ(compile(Json{{"regex", "a"}, {"json_layout", "wide"}}, 400)["error"]["param"], "json_layout");
  EXPECT_EQ(compile(Json{{"regex", "a"}, {"model", 7}}, 400)["error"]["param"], "model");
  EXPECT_EQ(compile(Json{{"regex", "a"}, {"text", std::string((1u << 20) + 1, 'a')}}, 400)["error"]["param"], "text");
  EXPECT_EQ(compile(Json{{"regex", "a"}, {"model", "gpt-9"}}, 404)["error"]["code"], "model_not_found");
  auto not_json = client()->Post("/v1/grammar/compile", "[1]", "application/json");
  EXPECT_EQ(not_json->status, 400);
  // And the server goes on.
  EXPECT_EQ(compile(Json{{"regex", "a"}}, 200)["object"], "grammar.compile");
}

// A generation request's constraint errors carry the same location.
TEST_F(WebRoutesTest, GenerationErrorsCarryTheLocation) {
  auto r = post("/v1/chat/completions", Json{{"messages", Json::array({Json{{"role", "user"}, {"content", "x"}}})},
                                             {"grammar", "root ::= \"a\"\n  | ( \"b\""}});
  ASSERT_EQ(r->status, 400);
  Json error = Json::parse(r->body)["error"];
  EXPECT_EQ(error["location"]["line"], 2) << error;
}

// --- token_detail -------------------------------------------------------------------------------------

// The entries of a choice: each token sampled (with the mask's count) or forced (null count), in order,
// spelling the output; the biased end-of-sequence token closes it as an "end" entry with its own count.
// Unconstrained output may hold special tokens or split characters, which the text does not show as the
// tokens do: there the entries are counted instead.
void expect_detail(const Json& detail, const std::string& content, bool constrained) {
  ASSERT_TRUE(detail.is_array());
  ASSERT_FALSE(detail.empty());
  std::string text;
  int forced = 0;
  for (std::size_t i = 0; i < detail.size(); ++i) {
    const Json& e = detail[i];
    EXPECT_TRUE(e["id"].is_number_integer()) << e;
    const bool end = e.value("end", false);
    if (!end) text += e["token"].get<std::string>();
    if (e["forced"].get<bool>()) {
      ++forced;
      EXPECT_TRUE(e["allowed"].is_null()) << e;
      EXPECT_GT(i, 0u) << "the first token is sampled";
    } else if (constrained) {
      EXPECT_GE(e["allowed"].get<int>(), 1) << e;
    } else {
      EXPECT_TRUE(e["allowed"].is_null()) << e;
    }
    if (end) {
      EXPECT_EQ(i + 1, detail.size()) << "the end entry is the last";
    }
  }
  if (constrained) {
    EXPECT_EQ(text, content);
    EXPECT_GT(forced, 0) << detail;
  }
}

TEST_F(WebRoutesTest, TokenDetailMarksSampledAndForcedTokens) {
  const std::string grammar = R"(root ::= "The answer is " [0-9] [0-9]? "!"?)";
  Json body{{"model", "test-model"},
            {"messages", Json::array({Json{{"role", "user"}, {"content", "Answer"}}})},
            {"grammar", grammar},
            {"max_tokens", 32},
            {"seed", 3},
            {"logit_bias", Json{{std::to_string(eos()), 100}}},
            {"token_detail", true}};
  auto r = post("/v1/chat/completions", body);
  ASSERT_EQ(r->status, 200) << r->body;
  Json choice = Json::parse(r->body)["choices"][0];
  const std::string content = choice["message"]["content"].get<std::string>();
  ASSERT_TRUE(content.starts_with("The answer is ")) << content;
  expect_detail(choice["token_detail"], content, true);
  EXPECT_TRUE(choice["token_detail"].back().value("end", false)) << choice["token_detail"];

  // Streamed: the same entries, spread over the chunks, in order.
  body["stream"] = true;
  auto s = post("/v1/chat/completions", body);
  ASSERT_EQ(s->status, 200);
  Json streamed = Json::array();
  std::string streamed_content;
  std::size_t at = 0;
  while ((at = s->body.find("data: ", at)) != std::string::npos) {
    const std::size_t end = s->body.find("\n\n", at);
    const std::string data = s->body.substr(at + 6, end - at - 6);
    at = end;
    if (data == "[DONE]") break;
    Json chunk = Json::parse(data);
    for (const Json& c : chunk["choices"]) {
      if (c.contains("token_detail")) {
        for (const Json& e : c["token_detail"]) streamed.push_back(e);
      }
      if (c["delta"].contains("content")) streamed_content += c["delta"]["content"].get<std::string>();
    }
  }
  EXPECT_EQ(streamed_content, content);  // same seed, same output
  EXPECT_EQ(streamed, choice["token_detail"]);

  // Not asked: no field. Unconstrained: no counts. Text completions: the same extension.
  body.erase("stream");
  body.erase("token_detail");
  EXPECT_FALSE(Json::parse(post("/v1/chat/completions", body)->body)["choices"][0].contains("token_detail"));
  Json completion{{"prompt", "Once upon a time"}, {"max_tokens", 6}, {"seed", 1}, {"token_detail", true}};
  auto c = post("/v1/completions", completion);
  ASSERT_EQ(c->status, 200) << c->body;
  Json cchoice = Json::parse(c->body)["choices"][0];
  expect_detail(cchoice["token_detail"], cchoice["text"].get<std::string>(), false);
  EXPECT_EQ(cchoice["token_detail"].size(), Json::parse(c->body)["usage"]["completion_tokens"].get<std::size_t>());
  auto wrong = post("/v1/completions", Json{{"prompt", "x"}, {"token_detail", "yes"}});
  EXPECT_EQ(wrong->status, 400);
  EXPECT_EQ(Json::parse(wrong->body)["error"]["param"], "token_detail");
}

}  // namespace
}  // namespace pie
