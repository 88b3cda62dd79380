// Error mapping: what each exception becomes on the wire (status, type, param, code).
#include <gtest/gtest.h>

#include "pie/error.h"
#include "pse/error.h"
#include "server/api_error.h"

namespace pie::server {
namespace {

using Json = nlohmann::ordered_json;

template <typename E>
ApiError map(E error, const std::string& constraint_param = {}) {
  return api_error_from_exception(std::make_exception_ptr(std::move(error)), constraint_param);
}

TEST(ApiError, BodyHasOpenAIShape) {
  Json body = error_body(ApiError::invalid("bad", "temperature"));
  EXPECT_EQ(body["error"]["message"], "bad");
  EXPECT_EQ(body["error"]["type"], "invalid_request_error");
  EXPECT_EQ(body["error"]["param"], "temperature");
  EXPECT_TRUE(body["error"]["code"].is_null());
  Json no_param = error_body(ApiError(500, "server_error", "x"));
  EXPECT_TRUE(no_param["error"]["param"].is_null());
}

TEST(ApiError, RequestErrorIs400WithItsParam) {
  ApiError e = map(RequestError("[request] temperature must be in [0, 100], got -1", "temperature"));
  EXPECT_EQ(e.status(), 400);
  EXPECT_EQ(e.param(), "temperature");
  // The engine names "grammar" for constraint failures: the server names the request field instead.
  EXPECT_EQ(map(RequestError("bad grammar", "grammar"), "response_format").param(), "response_format");
}

TEST(ApiError, SchemaErrorNamesKeywordAndPointer) {
  ApiError e = map(pse::SchemaError("[json_schema] /properties/a: unsupported", "/properties/a", "dependentSchemas"),
                   "response_format.json_schema.schema");
  EXPECT_EQ(e.status(), 400);
  EXPECT_EQ(e.param(), "response_format.json_schema.schema");
  EXPECT_EQ(e.code(), "unsupported_schema_keyword");
  EXPECT_NE(std::string(e.what()).find("dependentSchemas"), std::string::npos);
  EXPECT_NE(std::string(e.what()).find("/properties/a"), std::string::npos);
  Json body = error_body(e);
  EXPECT_EQ(body["error"]["location"], (Json{{"pointer", "/properties/a"}, {"keyword", "dependentSchemas"}}));
}

// A grammar error's place goes to the body's "location"; an error with no place has none.
TEST(ApiError, GrammarErrorLocation) {
  Json body = error_body(map(pse::GrammarError("[gbnf] line 3, column 14: expected ')'", 3, 14), "grammar"));
  EXPECT_EQ(body["error"]["location"], (Json{{"line", 3}, {"column", 14}}));
  EXPECT_EQ(body["error"]["param"], "grammar");
  Json nowhere = error_body(map(pse::GrammarError("[gbnf] the root rule 'root' is not defined"), "grammar"));
  EXPECT_FALSE(nowhere["error"].contains("location"));
  EXPECT_FALSE(error_body(ApiError::invalid("bad", "temperature"))["error"].contains("location"));
}

TEST(ApiError, OtherMappings) {
  EXPECT_EQ(map(pse::GrammarError("[gbnf] line 1", 1, 2), "grammar").code(), "invalid_grammar");
  EXPECT_EQ(map(pse::LimitError("too big"), "regex").status(), 400);
  ApiError capacity = map(CapacityError("queue full"));
  EXPECT_EQ(capacity.status(), 503);
  EXPECT_EQ(capacity.type(), "server_error");
  EXPECT_EQ(map(std::runtime_error("boom")).status(), 500);
  EXPECT_EQ(map(ApiError(404, "invalid_request_error", "no", "model", "model_not_found")).status(), 404);
  EXPECT_EQ(api_error_from_exception(std::make_exception_ptr(42)).status(), 500);
}

// A full queue is worth retrying (429, the headers say when); a client that went away is 499 (logged
// only); every constraint error has a code, the engine's compile errors included.
TEST(ApiError, QueueCancellationAndConstraintCodes) {
  ApiError full = map(QueueFullError("[engine] the queue is full (4 requests waiting)"));
  EXPECT_EQ(full.status(), 429);
  EXPECT_EQ(full.code(), "queue_full");
  EXPECT_EQ(map(CancelledError("[request] cancelled")).status(), 499);
  EXPECT_EQ(map(pse::Error("[compile] something"), "grammar").code(), "invalid_grammar");
  EXPECT_EQ(map(pse::LimitError("too big"), "regex").code(), "constraint_too_large");
  ApiError compile =
      map(RequestError("[request] grammar: [compile] too many states", "grammar", "constraint_too_large"), "lark");
  EXPECT_EQ(compile.param(), "lark");
  EXPECT_EQ(compile.code(), "constraint_too_large");
}

}  // namespace
}  // namespace pie::server
