#include "server/embeddings_routes.h"

#include <fmt/format.h>

#include <chrono>
#include <cstring>
#include <limits>

#include "pie/error.h"
#include "server/api_error.h"
#include "server/model_registry.h"
#include "server/openai_format.h"

namespace pie::server {
namespace {

constexpr std::size_t kMaxInputs = 2048;  // OpenAI's bound on one request's inputs

std::int32_t token_id(const Json& v, const std::string& field) {
  if (!v.is_number_integer() || v.get<std::int64_t>() < 0 ||
      v.get<std::int64_t>() > std::numeric_limits<std::int32_t>::max()) {
    throw ApiError::invalid(
        fmt::format("'{}' must be a token id (a non-negative integer), got {}", field, v.dump()),
        "input");
  }
  return static_cast<std::int32_t>(v.get<std::int64_t>());
}

// input: a string, a list of strings, a list of token ids, or a list of lists of token ids.
void read_input(const Json& input, const std::string& field, bool ids_allowed,
                EmbeddingsRequest& out) {
  if (input.is_string()) {
    out.texts.push_back(input.get<std::string>());
    return;
  }
  const std::string expected =
      ids_allowed
          ? "a string, a list of strings, a list of token ids or a list of lists of token ids"
          : "a string or a list of strings";
  if (!input.is_array())
    throw ApiError::invalid(
        fmt::format("'{}' must be {}, got {}", field, expected, input.type_name()), field);
  if (input.empty()) throw ApiError::invalid(fmt::format("'{}' is an empty list", field), field);
  if (input.size() > kMaxInputs) {
    throw ApiError::invalid(
        fmt::format("'{}' holds {} inputs, more than {}", field, input.size(), kMaxInputs), field);
  }
  if (input[0].is_string()) {
    for (std::size_t i = 0; i < input.size(); ++i) {
      if (!input[i].is_string()) {
        throw ApiError::invalid(fmt::format("'{}[{}]' must be a string like the first, got {}",
                                            field, i, input[i].type_name()),
                                field);
      }
      out.texts.push_back(input[i].get<std::string>());
    }
    return;
  }
  if (!ids_allowed) {
    throw ApiError::invalid(
        fmt::format("'{}[0]' must be a string, got {}", field, input[0].type_name()), field);
  }
  if (input[0].is_number()) {
    std::vector<std::int32_t> ids;
    for (std::size_t i = 0; i < input.size(); ++i)
      ids.push_back(token_id(input[i], fmt::format("{}[{}]", field, i)));
    out.tokens.push_back(std::move(ids));
    return;
  }
  if (input[0].is_array()) {
    for (std::size_t i = 0; i < input.size(); ++i) {
      const Json& list = input[i];
      if (!list.is_array()) {
        throw ApiError::invalid(
            fmt::format("'{}[{}]' must be a list of token ids like the first, got {}", field, i,
                        list.type_name()),
            field);
      }
      if (list.empty())
        throw ApiError::invalid(fmt::format("'{}[{}]' is an empty list", field, i), field);
      std::vector<std::int32_t> ids;
      for (std::size_t t = 0; t < list.size(); ++t)
        ids.push_back(token_id(list[t], fmt::format("{}[{}][{}]", field, i, t)));
      out.tokens.push_back(std::move(ids));
    }
    return;
  }
  throw ApiError::invalid(fmt::format("'{}' must be {}; its first element is {}", field, expected,
                                      input[0].type_name()),
                          field);
}

std::string base64_floats(const std::vector<float>& v) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string bytes(v.size() * sizeof(float), '\0');
  std::memcpy(bytes.data(), v.data(), bytes.size());  // little-endian float32, as OpenAI's base64
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (std::size_t i = 0; i < bytes.size(); i += 3) {
    const std::uint32_t b0 = static_cast<unsigned char>(bytes[i]);
    const std::uint32_t b1 = i + 1 < bytes.size() ? static_cast<unsigned char>(bytes[i + 1]) : 0;
    const std::uint32_t b2 = i + 2 < bytes.size() ? static_cast<unsigned char>(bytes[i + 2]) : 0;
    const std::uint32_t n = b0 << 16 | b1 << 8 | b2;
    out += kAlphabet[n >> 18 & 63];
    out += kAlphabet[n >> 12 & 63];
    out += i + 1 < bytes.size() ? kAlphabet[n >> 6 & 63] : '=';
    out += i + 2 < bytes.size() ? kAlphabet[n & 63] : '=';
  }
  return out;
}

}  // namespace

EmbeddingsRequest parse_embeddings_request(const Json& body, EmbeddingsApi api) {
  EmbeddingsRequest r;
  r.api = api;
  r.truncate = api != EmbeddingsApi::openai;
  if (body.contains("model") && !body["model"].is_null()) {
    if (!body["model"].is_string()) throw ApiError::invalid("'model' must be a string", "model");
    r.model = body["model"].get<std::string>();
  }
  if (api == EmbeddingsApi::ollama_embeddings) {
    if (!body.contains("prompt") || body["prompt"].is_null()) {
      r.load_only = true;
    } else if (!body["prompt"].is_string()) {
      throw ApiError::invalid(
          fmt::format("'prompt' must be a string, got {}", body["prompt"].type_name()), "prompt");
    } else if (body["prompt"].get<std::string>().empty()) {
      r.load_only = true;  // Ollama answers an empty prompt with an empty embedding
    } else {
      r.texts.push_back(body["prompt"].get<std::string>());
    }
  } else if (!body.contains("input") || body["input"].is_null()) {
    if (api == EmbeddingsApi::openai) throw ApiError::invalid("'input' is required", "input");
    r.load_only = true;
  } else {
    read_input(body["input"], "input", api == EmbeddingsApi::openai, r);
  }
  if (body.contains("encoding_format") && !body["encoding_format"].is_null()) {
    const Json& f = body["encoding_format"];
    if (api != EmbeddingsApi::openai || !f.is_string() || (f != "float" && f != "base64")) {
      throw ApiError::invalid(
          fmt::format("'encoding_format' must be \"float\" or \"base64\", got {}", f.dump()),
          "encoding_format");
    }
    r.base64 = f == "base64";
  }
  if (body.contains("dimensions") && !body["dimensions"].is_null()) {
    const Json& d = body["dimensions"];
    if (!d.is_number_integer() || d.get<std::int64_t>() < 1 || d.get<std::int64_t>() > (1 << 20)) {
      throw ApiError::invalid(
          fmt::format("'dimensions' must be a positive integer, got {}", d.dump()), "dimensions");
    }
    r.dimensions = static_cast<std::int32_t>(d.get<std::int64_t>());
  }
  if (body.contains("truncate") && !body["truncate"].is_null()) {
    if (api == EmbeddingsApi::openai || !body["truncate"].is_boolean()) {
      throw ApiError::invalid(
          fmt::format("'truncate' must be true or false, got {}", body["truncate"].dump()),
          "truncate");
    }
    r.truncate = body["truncate"].get<bool>();
  }
  if (api != EmbeddingsApi::openai) {
    if (body.contains("keep_alive") && !body["keep_alive"].is_null()) {
      r.keep_alive = ModelRegistry::parse_keep_alive(body["keep_alive"], "keep_alive");
    }
    if (body.contains("options") && !body["options"].is_null() && !body["options"].is_object()) {
      throw ApiError::invalid("'options' must be an object", "options");
    }
  }
  if (body.contains("user") && !body["user"].is_null() && !body["user"].is_string()) {
    throw ApiError::invalid("'user' must be a string", "user");
  }
  return r;
}

std::string answer_embeddings(const EmbeddingsRequest& request, Embedder& embedder,
                              const std::string& model_name) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  const std::int32_t n_dims = embedder.model().n_dims;
  if (request.dimensions > n_dims) {
    throw ApiError::invalid(
        fmt::format("'dimensions' is {}, more than the model's {}", request.dimensions, n_dims),
        "dimensions");
  }
  EmbedResult result;
  if (!request.load_only) {
    const EmbedOptions options{.truncate = request.truncate, .dimensions = request.dimensions};
    result = request.texts.empty() ? embedder.embed_tokens(request.tokens, options)
                                   : embedder.embed(request.texts, options);
  }
  const auto ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count();
  Json out;
  switch (request.api) {
    case EmbeddingsApi::openai: {
      Json data = Json::array();
      for (std::size_t i = 0; i < result.embeddings.size(); ++i) {
        Json item{{"object", "embedding"}, {"index", i}};
        if (request.base64) {
          item["embedding"] = base64_floats(result.embeddings[i]);
        } else {
          item["embedding"] = result.embeddings[i];
        }
        data.push_back(std::move(item));
      }
      out = Json{
          {"object", "list"},
          {"data", std::move(data)},
          {"model", model_name},
          {"usage", Json{{"prompt_tokens", result.n_tokens}, {"total_tokens", result.n_tokens}}}};
      break;
    }
    case EmbeddingsApi::ollama_embed:
      out = Json{{"model", model_name},
                 {"embeddings", result.embeddings},
                 {"total_duration", ns},
                 {"load_duration", 0},
                 {"prompt_eval_count", result.n_tokens}};
      break;
    case EmbeddingsApi::ollama_embeddings:
      out = Json{
          {"embedding", result.embeddings.empty() ? std::vector<float>{} : result.embeddings[0]}};
      break;
  }
  return dump_json(out);
}

}  // namespace pie::server
