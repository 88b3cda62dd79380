// Ollama's model routes over the server's models (server/model_registry.h) and the store: the list
// (/api/tags, /v1/models), /api/show (details read from the GGUF file, the Modelfile's layers),
// /api/ps (the loaded models and when they unload), /api/create, /api/copy, DELETE /api/delete,
// /api/pull (progress objects as Ollama streams them), and a stored model's Modelfile parameters
// and system prompt applied to a request that leaves them out.
#pragma once

#include <functional>

#include "server/api_request.h"
#include "server/generation.h"
#include "server/model_registry.h"

namespace pie::server {

Json tags_response(const ModelRegistry& registry);
Json openai_models_response(const ModelRegistry& registry);
// Throws ApiError 400 without a model, 404 naming an unknown one.
Json show_response(const ModelRegistry& registry, const Json& body);
Json ps_response(const ModelRegistry& registry);
// The routes that write the store throw ApiError: 400 for a bad body (a Modelfile error with its
// line and column), 404 naming a model that is not stored, 507 when the store cannot be written;
// 501 without a store. /api/create takes 'from' (a stored name or a GGUF path on the server) or
// 'files' (file name -> digest of an uploaded blob: one GGUF), and 'adapters' the same way; 'quantize'
// is refused (400 naming it).
Json create_model_route(ModelRegistry& registry, const Json& body);
void copy_model_route(ModelRegistry& registry, const Json& body);
void delete_model_route(ModelRegistry& registry, const Json& body);
// Pulls body["model"] (an http(s) URL, or a path on the server's machine; a name already stored is
// "success" at once) under body["name"] (default: from the file's name). Each progress object goes
// to `emit` ({"status"}, {"status", "digest", "total", "completed"}); throws as the routes above.
void pull_model_route(ModelRegistry& registry, const Json& body,
                      const std::function<void(const Json&)>& emit);

// Ollama's blob uploads: POST /api/blobs/sha256:<hex> stores `body` once its sha256 is the digest's
// (400 naming both when it is not, or when the digest is not sha256:<64 hex digits>); HEAD answers
// whether the blob is stored. 501 without a store, 507 when it cannot be written.
void put_blob_route(ModelRegistry& registry, const std::string& digest, const std::string& body);
bool blob_stored(const ModelRegistry& registry, const std::string& digest);

// Fills what `body` (a request of `api`) leaves out from the stored model's Modelfile: its sampling
// parameters (Ollama's "options", or OpenAI's fields) and its system prompt (a first system
// message, or /api/generate's "system").
void apply_modelfile_defaults(Json& body, Api api, const StoredModel& model);

}  // namespace pie::server
