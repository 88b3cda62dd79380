// Typed errors of pie. Messages start with what was being done and carry the offending value and its
// place, e.g.
//   [gguf] model.gguf: tensor 'blk.3.attn_q.weight': data ends at byte 91234560, past the file's end (91000000)
//   [request] temperature must be in [0, 100], got -1
#pragma once

#include <stdexcept>
#include <string>

namespace pie {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A model that cannot be loaded or converted: missing, corrupt or truncated files, an unknown
// architecture, a missing or misshapen tensor, an unsupported tensor type.
class ModelError : public Error {
 public:
  using Error::Error;
};

// A request the engine cannot serve as asked: invalid sampling parameters, a prompt longer than the
// context, an invalid constraint. Never affects other requests.
class RequestError : public Error {
 public:
  // param: the request field at fault ("temperature", "messages[2].content"), empty when none. code: a
  // machine-readable kind ("invalid_grammar", "constraint_too_large"), empty when none.
  explicit RequestError(const std::string& message, std::string param = {}, std::string code = {})
      : Error(message), param_(std::move(param)), code_(std::move(code)) {}
  const std::string& param() const { return param_; }
  const std::string& code() const { return code_; }

 private:
  std::string param_;
  std::string code_;
};

// The engine cannot take more work right now (queue full, shutting down).
class CapacityError : public Error {
 public:
  using Error::Error;
};

// Its queue is full: the same request may succeed a little later.
class QueueFullError : public CapacityError {
 public:
  using CapacityError::CapacityError;
};

// The caller gave the request up (GenerateRequest::abandoned) while it was being prepared.
class CancelledError : public Error {
 public:
  using Error::Error;
};

}  // namespace pie
