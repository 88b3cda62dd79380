// The OpenAI- and Ollama-compatible HTTP server over one Engine (`orchard serve`), and over every model of
// the model store when ServerOptions::store_root is set (each loaded on its first request, unloaded after
// its keep_alive or when the limits need room; server/model_registry.h).
//   OpenAI: POST /v1/chat/completions, POST /v1/completions, GET /v1/models
//   Ollama: POST /api/chat, POST /api/generate, GET /api/tags, POST /api/show, GET /api/version, GET /api/ps,
//           POST /api/create, POST /api/copy, DELETE /api/delete, POST /api/pull
//   Embeddings: POST /v1/embeddings (OpenAI), POST /api/embed and /api/embeddings (Ollama), from the
//   model the server starts with (a generative model's last hidden state), or from an embedding model
//   served alone (no engine: only the embedding routes and those describing the model answer; the rest
//   answer 400, model_not_generative)
//   GET /health, GET /metrics (Prometheus text)
//   Extensions: POST /v1/grammar/compile (compile or check a constraint), "token_detail" in OpenAI requests
//   GET / (and /ui/...): the web page (chat, structured-output playground, dashboard), embedded at build time
// HTTP/1.1 with keep-alive; streams as server-sent events (OpenAI) or NDJSON (Ollama). A bad request is a
// 4xx with OpenAI's error object and never touches the others; every request is bounded as it is read
// (body, headers, JSON nesting); a client that goes away has its request cancelled (streaming or not,
// while its grammar compiles too) and its KV pages freed; a full engine queue is 429; /health and /metrics
// answer on a thread of their own. docs/server.md, "Limits and safety". One JSON log line per request on
// stderr.
//
//   auto engine = std::make_shared<pie::Engine>(pie::random_model(), pie::EngineOptions{});
//   pie::Server server(engine, {.port = 8080});
//   server.bind();      // throws pie::Error when the address is taken
//   server.serve();     // until stop() (another thread, e.g. on SIGTERM)
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "pie/embedding.h"
#include "pie/engine.h"
#include "pse/json_schema.h"

namespace pie {

struct ServerOptions {
  std::string host = "127.0.0.1";    // loopback unless told otherwise
  int port = 8080;                   // 0: any free port (Server::port() says which)
  // Non-empty: every route but /health and the web page's files needs "Authorization: Bearer KEY".
  std::string api_key;
  std::size_t max_body_bytes = 16u << 20;  // larger bodies are refused with 413
  std::int32_t http_threads = 0;     // connections served at once; 0: max(128, 4 * engine max_running)
  // The name clients use; empty: the slug of the model file's stem (llama.cpp's choice; a folder's name).
  // Names hold no whitespace or control characters.
  std::string model_name;
  // More names the request's `model` field accepts; /v1/models and /api/tags list them after the name.
  // "default" (and an absent model) always names the one model served.
  std::vector<std::string> aliases;
  // Default scales of attached LoRA adapters (name, scale), applied to requests that give no `lora` field
  // (POST /lora-adapters changes them); an adapter not listed applies only when a request selects it.
  std::vector<std::pair<std::string, float>> lora_scales;
  // How response_format / Ollama format JSON is laid out: compact (the default, as llama.cpp answers),
  // flexible (bounded whitespace runs where JSON allows them) or indented (json.dumps(indent=2)).
  pse::JsonLayout json_layout = pse::JsonLayout::kCompact;
  // Special-token text in messages and tools ("<|im_end|>") read as the control token it spells. Off by
  // default: it is plain text, so a user cannot close their turn and open another role's (only for
  // clients trusted to write the prompt's markup).
  bool special_tokens_in_messages = false;
  // The model store whose models are served too, by their stored names; empty: only the engine's model.
  std::string store_root;
  // How long a stored model stays loaded after its last request (Ollama's keep_alive; a request's own
  // "keep_alive" wins): negative keeps it loaded, 0 unloads it at once. The engine's model stays loaded.
  double keep_alive_seconds = 300;
  // The engine options of the models loaded on demand, as given (each engine derives its context length
  // and KV pool from its own model); nullopt: the engine's, less what it derived from its model.
  std::optional<EngineOptions> engine_options;
  std::size_t max_loaded_models = 0;       // models loaded at once, the engine's included; 0: no limit
  std::uint64_t memory_budget_bytes = 0;   // bytes of model files and KV pools loaded at once; 0: no limit
  double shutdown_grace_seconds = 10;  // stop(): how long running requests may finish, the cut included
  bool log_requests = true;          // one JSON line per request on stderr
  std::string version = "0.1.0";     // reported by /api/version and /health
  // The embedder of the embedding routes, made on their first request (at construction when there is no
  // engine); empty: those routes answer 400.
  std::function<std::shared_ptr<Embedder>()> embedder;
};

class Server {
 public:
  // Throws pie::Error on bad options or a chat template that does not parse. `engine` may be null when
  // options.embedder is set: an embedding model served alone.
  Server(std::shared_ptr<Engine> engine, ServerOptions options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds the listening socket; returns the port. Throws pie::Error when it cannot.
  int bind();
  // Serves until stop() (binds first when bind() was not called). Returns once every connection closed.
  void serve();
  // Thread-safe. Refuses new requests (503), lets running ones finish for most of the grace period, cuts
  // the rest short (a stream ends with an error event saying so, a non-streaming request gets 503), and
  // makes serve() return by the end of the grace period.
  void stop();
  int port() const;
  const std::string& model_name() const;
  // A keep_alive as Ollama takes it ("5m", "1h30m", "-1", "300"), in seconds. Throws pie::Error.
  static double parse_keep_alive(const std::string& text);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace pie
