#include "server/api_error.h"

#include "pie/engine.h"
#include "pie/lora.h"

#include <fmt/format.h>

#include "pie/error.h"
#include "pse/error.h"

namespace pie::server {

ApiError ApiError::invalid(const std::string& message, std::string param, std::string code) {
  return ApiError(400, "invalid_request_error", message, std::move(param), std::move(code));
}

nlohmann::ordered_json error_body(const ApiError& error) {
  nlohmann::ordered_json inner;
  inner["message"] = error.what();
  inner["type"] = error.type();
  inner["param"] = error.param().empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(error.param());
  inner["code"] = error.code().empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(error.code());
  if (!error.location().is_null()) inner["location"] = error.location();
  nlohmann::ordered_json body;
  body["error"] = std::move(inner);
  return body;
}

ApiError api_error_from_exception(std::exception_ptr error, const std::string& constraint_param) {
  try {
    std::rethrow_exception(error);
  } catch (const ApiError& e) {
    return e;
  } catch (const pse::SchemaError& e) {
    // The keyword and pointer are what a client needs to fix its schema.
    std::string message = e.what();
    if (!e.keyword().empty() && message.find(e.keyword()) == std::string::npos) {
      message += fmt::format(" (keyword \"{}\")", e.keyword());
    }
    return ApiError::invalid(message, constraint_param,
                             e.keyword().empty() ? "invalid_schema" : "unsupported_schema_keyword")
        .with_location(nlohmann::ordered_json{{"pointer", e.pointer()}, {"keyword", e.keyword()}});
  } catch (const pse::GrammarError& e) {
    ApiError out = ApiError::invalid(e.what(), constraint_param, "invalid_grammar");
    if (e.line() > 0) out.with_location(nlohmann::ordered_json{{"line", e.line()}, {"column", e.column()}});
    return out;
  } catch (const pse::LimitError& e) {
    return ApiError::invalid(e.what(), constraint_param, "constraint_too_large");
  } catch (const pse::Error& e) {
    return ApiError::invalid(e.what(), constraint_param, "invalid_grammar");
  } catch (const pie::LoraNotFoundError& e) {
    return ApiError(404, "invalid_request_error", e.what(), e.param(), e.code());
  } catch (const pie::LoraError& e) {
    return ApiError::invalid(e.what(), "lora", "invalid_lora_adapter");
  } catch (const pie::RequestError& e) {
    std::string param = e.param();
    if (param == "grammar" && !constraint_param.empty()) param = constraint_param;
    return ApiError::invalid(e.what(), param, e.code());
  } catch (const pie::QueueFullError& e) {
    return ApiError(429, "rate_limit_error", e.what(), {}, "queue_full");
  } catch (const pie::CapacityError& e) {
    return ApiError(503, "server_error", e.what(), {}, "server_overloaded");
  } catch (const pie::CancelledError& e) {
    return ApiError(499, "invalid_request_error", e.what(), {}, "client_closed_request");
  } catch (const std::exception& e) {
    return ApiError(500, "server_error", e.what());
  } catch (...) {
    return ApiError(500, "server_error", "unknown error");
  }
}

}  // namespace pie::server
