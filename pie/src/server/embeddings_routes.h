// The embedding routes: OpenAI POST /v1/embeddings, Ollama POST /api/embed and the older
// /api/embeddings. Parsing (every field checked, errors naming it), the Embedder call, and the
// response bodies.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "pie/embedding.h"
#include "server/api_request.h"

namespace pie::server {

enum class EmbeddingsApi { openai, ollama_embed, ollama_embeddings };

struct EmbeddingsRequest {
  EmbeddingsApi api = EmbeddingsApi::openai;
  std::string model;
  std::vector<std::string> texts;                 // or
  std::vector<std::vector<std::int32_t>> tokens;  // token ids (OpenAI), when texts is empty
  bool base64 = false;                            // OpenAI encoding_format "base64"
  std::int32_t dimensions = 0;                    // 0: all
  bool truncate = true;    // Ollama's default; OpenAI never truncates (400 instead)
  bool load_only = false;  // Ollama: no input at all loads the model
  std::optional<double> keep_alive;  // Ollama: seconds the model stays loaded after (0 unloads it)
};

// Throws ApiError 400 naming the field: input of another type (a number, an object, a list mixing
// strings and ids), an empty list, ids outside int32, encoding_format other than float / base64,
// dimensions not a positive integer, truncate not a boolean, a keep_alive Ollama would not take.
EmbeddingsRequest parse_embeddings_request(const Json& body, EmbeddingsApi api);

// Runs the request on `embedder` and returns the response body of its API; `model_name` is echoed.
// Throws what Embedder throws (RequestError -> 400), ApiError for dimensions past the model's.
std::string answer_embeddings(const EmbeddingsRequest& request, Embedder& embedder,
                              const std::string& model_name);

}  // namespace pie::server
