// Errors as the HTTP APIs report them: an HTTP status and OpenAI's error object
//   {"error": {"message": ..., "type": ..., "param": ..., "code": ...}}
// Every failure a handler meets becomes one of these (api_error_from_exception), so a bad request is a
// 4xx answer to its client and never touches the other requests.
#pragma once

#include <exception>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

namespace pie::server {

class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string type, const std::string& message, std::string param = {},
           std::string code = {})
      : std::runtime_error(message), status_(status), type_(std::move(type)),
        param_(std::move(param)), code_(std::move(code)) {}

  int status() const { return status_; }
  const std::string& type() const { return type_; }
  const std::string& param() const { return param_; }  // the request field at fault, or empty
  const std::string& code() const { return code_; }
  // Where in the constraint the error lies, for a client to point at: {"line", "column"} in grammar text
  // (1-based, columns in characters), or {"pointer", "keyword"} in a JSON Schema; null when nowhere.
  const nlohmann::ordered_json& location() const { return location_; }
  ApiError& with_location(nlohmann::ordered_json location) {
    location_ = std::move(location);
    return *this;
  }

  // 400 invalid_request_error naming the field at fault.
  static ApiError invalid(const std::string& message, std::string param = {}, std::string code = {});

 private:
  int status_;
  std::string type_;
  std::string param_;
  std::string code_;
  nlohmann::ordered_json location_;
};

// {"error": {"message", "type", "param" (null when empty), "code" (null when empty)}}, and "location" when
// the error has one (an extension).
nlohmann::ordered_json error_body(const ApiError& error);

// Maps what a handler threw to the answer: ApiError as is; pie::RequestError -> 400 with its param and
// code; pse::SchemaError -> 400 naming the keyword and its JSON pointer (also as the location);
// pse::GrammarError -> 400 with its line and column as the location when it has them; other pse errors
// (limits) -> 400 with a code; pie::QueueFullError -> 429 (retry later); pie::CapacityError -> 503;
// pie::CancelledError -> 499 (the client closed the connection: logged, never sent); anything else ->
// 500 server_error. `constraint_param` is the request field that held the constraint, named by pse errors.
ApiError api_error_from_exception(std::exception_ptr error, const std::string& constraint_param = {});

}  // namespace pie::server
