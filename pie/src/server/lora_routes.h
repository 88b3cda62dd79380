// The server's LoRA adapters, in vLLM's and llama.cpp's conventions over one Engine's attached adapters:
//   - the `model` field naming an attached adapter selects it at scale 1 (vLLM); the base's name selects
//     none;
//   - the per-request `lora` field, [{"id": N or "NAME", "scale": S}] (llama.cpp; N indexes the list of
//     GET /lora-adapters), replaces the server's default scales for that request;
//   - POST /v1/load_lora_adapter and /v1/unload_lora_adapter {lora_name, lora_path} (vLLM);
//   - GET /lora-adapters lists [{id, name, path, scale}] and POST /lora-adapters [{id, scale}] sets the
//     default scales applied to requests without `lora` (llama.cpp; 0, the start, applies nothing);
//   - /v1/models lists the adapters after the base, with "parent" naming it.
// Errors are ApiErrors: 404 (code lora_not_found) naming an adapter that is not loaded, 400 for malformed
// fields or an adapter that cannot be read or does not fit the base. Thread-safe.
#pragma once

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "pie/engine.h"
#include "server/api_request.h"

namespace pie::server {

class LoraRoutes {
 public:
  explicit LoraRoutes(Engine& engine, const std::vector<std::pair<std::string, float>>& default_scales = {})
      : engine_(engine), default_scales_(default_scales.begin(), default_scales.end()) {}

  // Whether `model` names an attached adapter.
  bool names_adapter(const std::string& model) const;
  // The adapters of a request whose body is `body` and whose `model` field is `model`.
  std::vector<LoraRequest> select(const Json& body, const std::string& model) const;

  Json list() const;                     // GET /lora-adapters
  Json set_scales(const std::string& body);  // POST /lora-adapters (a JSON array)
  Json load(const Json& body);           // POST /v1/load_lora_adapter
  Json unload(const Json& body);         // POST /v1/unload_lora_adapter
  // /v1/models entries of the adapters, under the base's name.
  std::vector<Json> model_entries(const std::string& parent) const;

 private:
  // The attached adapter `id` names (an index into loras() or a name), or an ApiError naming `where`.
  std::string resolve_id(const Json& id, const std::vector<LoraInfo>& loras, const std::string& where) const;

  Engine& engine_;
  mutable std::mutex mutex_;
  std::map<std::string, float> default_scales_;  // by name; absent: 0
};

}  // namespace pie::server
