// POST /v1/grammar/compile, an extension: compiles a constraint against the served model's vocabulary as a
// completion request with it would be compiled (through the engine's compile cache), without generating,
// and answers its statistics; with "text", also whether that text fits it. A constraint that does not
// compile is the same 400 a generation request gets, with the error's location (line and column in
// grammar text, or the JSON pointer in a schema; JSON text that does not parse: its line and column).
//
//   request:  {"model"?, one of "json_schema" (an object, or its JSON text), "response_format", "grammar",
//              "lark", "regex" (as in chat requests), "text"?: a text to check,
//              "json_layout"?: "compact" | "flexible" | "indented" (default: the server's --json-layout)}
//   response: {"object": "grammar.compile", "model", "param", "cached", "compile_ms", "ready_ms",
//              "stats": {"rules", "states", "scan_states", "token_tables", "shared_token_tables",
//                        "uncertain_tokens", "memory_bytes"},
//              "vocabulary": {"tokens", "rows"},
//              "check"?: {"accepted", "complete", "bytes", "rejected_at", "message"}}
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "server/api_request.h"
#include "server/served_model.h"

namespace pie::server {

struct CompileRequest {
  std::string model;                // as asked (empty: the served model)
  Constraint constraint;
  std::optional<std::string> text;  // to check against the constraint
  std::optional<pse::JsonLayout> json_layout;  // of a JSON constraint (default: the server's)
};

// Throws ApiError 400 naming the field: no constraint or more than one, a field of the wrong type, JSON
// Schema text that does not parse (with its location), a text over 1 MiB.
CompileRequest parse_compile_request(const Json& body);

// Compiles and checks. Throws ApiError 400 for a constraint that does not compile (with its location).
Json compile_response(const ServedModel& model, const CompileRequest& request,
                      const std::function<bool()>& client_gone = {});  // polled by the compile: a 499 when true

}  // namespace pie::server
