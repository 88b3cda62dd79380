// The HTTP layer: routes, API-key check, request framing checks, error bodies, cancellation when the
// client goes away (streaming or not), graceful stop, the request log and the metrics. Requests are parsed
// and formatted by the other files of this folder, and read from the sockets by http_transport; this one
// wires them to cpp-httplib's parser and router.
#include "pie/server.h"

#include <httplib.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <ctime>
#include <map>
#include <mutex>
#include <regex>
#include <vector>

#include "server/api_error.h"
#include "server/api_request.h"
#include "server/generation.h"
#include "server/grammar_compile.h"
#include "server/embeddings_routes.h"
#include "server/http_transport.h"
#include "server/lora_routes.h"
#include "server/metrics.h"
#include "server/model_registry.h"
#include "server/request_head.h"
#include "server/served_model.h"
#include "server/store_routes.h"
#include "server/web_routes.h"

namespace pie {

using server::Api;
using server::ApiError;
using server::Generation;
using server::Json;

namespace {

using Clock = std::chrono::steady_clock;

// What the request log and the metrics need of the request a worker thread is answering. httplib calls
// the pre-routing handler, the route handler, the content provider and the logger of one request on the
// same thread, one request at a time.
struct RequestContext {
  Clock::time_point start = Clock::now();
  std::string route = "unmatched";
  std::string id;
  std::string error;
  bool stream = false;
  std::shared_ptr<Generation> generation;
};
thread_local RequestContext t_context;

bool is_ollama_path(const std::string& path) { return path.starts_with("/api/"); }

std::string utc_now_iso() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// A client that went away, noticed with a poll of its socket at most every 20 ms (the compile of a
// grammar asks far more often).
std::function<bool()> client_gone_check() {
  server::Connection* connection = server::current_connection();
  if (connection == nullptr) return {};
  auto last = std::make_shared<Clock::time_point>();
  auto gone = std::make_shared<bool>(false);
  return [connection, last, gone] {
    if (*gone) return true;
    const Clock::time_point now = Clock::now();
    if (now - *last < std::chrono::milliseconds(20)) return false;
    *last = now;
    *gone = connection->peer_gone();
    return *gone;
  };
}

}  // namespace

struct Server::Impl {
  ServerOptions options;
  std::shared_ptr<Engine> engine;
  std::shared_ptr<server::ServedModel> model;  // the first model (always loaded)
  std::unique_ptr<server::ModelRegistry> registry;  // it and the store's models, loaded on demand
  // An embedding model served alone (no engine: model, registry and loras stay null): its names, served
  // name first. Only the routes that describe a model or embed answer then (embedding_only_routes).
  std::vector<std::string> embedding_names;
  std::once_flag embedder_made;
  std::shared_ptr<Embedder> embedder;  // the embedding routes' (options.embedder's), made once
  std::unique_ptr<server::LoraRoutes> loras;  // the first model's LoRA adapters through the API
  // httplib parses and routes each request; the transport owns the sockets and threads (http_transport.h)
  // and hands it each request's stream through process_request, which httplib keeps protected.
  struct HttpServer : httplib::Server {
    // httplib ends streamed responses once its listening socket is invalid (its stop()); the transport
    // listens instead, so a placeholder stands for it until the server stops.
    HttpServer() { svr_sock_ = 0; }
    void end_streams() { svr_sock_ = INVALID_SOCKET; }
    bool serve_request(httplib::Stream& stream, bool close_connection, bool& connection_closed) {
      return process_request(stream, close_connection, connection_closed, nullptr);
    }
  };
  HttpServer http;
  std::unique_ptr<server::HttpTransport> transport;
  // (method, path pattern) of every route, for 405 answers.
  std::vector<std::pair<std::string, std::regex>> routes;
  server::Metrics metrics;
  std::mutex log_mutex;

  std::atomic<bool> draining{false};
  std::atomic<bool> stopped{false};
  std::mutex active_mutex;
  std::condition_variable active_changed;
  std::map<Generation*, std::shared_ptr<Generation>> active;  // generation requests in progress
  int port = -1;

  Impl(std::shared_ptr<Engine> e, ServerOptions o) : options(std::move(o)), engine(std::move(e)) {
    if (engine) {
      serve_engine();
    } else {
      serve_embedding_model();
    }
    setup_http();
    server::TransportOptions transport_options;
    transport_options.max_body_bytes = options.max_body_bytes;
    transport_options.n_workers = static_cast<std::size_t>(
        options.http_threads > 0 ? options.http_threads : std::max(128, engine ? 4 * engine->options().max_running : 0));
    transport = std::make_unique<server::HttpTransport>(
        transport_options, [this](server::Connection& connection, bool close_connection, bool& connection_closed) {
          return http.serve_request(connection, close_connection, connection_closed);
        });
  }

  void serve_embedding_model() {
    if (!options.embedder) throw Error("[server] no engine and no embedder");
    std::call_once(embedder_made, [this] { embedder = options.embedder(); });
    if (!embedder) throw Error("[server] no embedder");
    Model described;  // named as a generative model would be: its file's or folder's slug
    described.path = embedder->model().path;
    described.name = embedder->model().name;
    embedding_names.push_back(options.model_name.empty() ? server::served_model_name(described) : options.model_name);
    for (const std::string& alias : options.aliases) {
      if (std::find(embedding_names.begin(), embedding_names.end(), alias) == embedding_names.end()) {
        embedding_names.push_back(alias);
      }
    }
    for (const std::string& n : embedding_names) {
      if (n.empty() || std::any_of(n.begin(), n.end(), [](unsigned char c) { return c <= ' ' || c == 0x7F; })) {
        throw Error(
            fmt::format("[server] the model name '{}' is empty or holds whitespace or a control character", n));
      }
    }
  }

  void serve_engine() {
    loras = std::make_unique<server::LoraRoutes>(*engine, options.lora_scales);
    std::string name = options.model_name.empty() ? server::served_model_name(engine->model()) : options.model_name;
    model = std::make_shared<server::ServedModel>(engine, name,
                                                  server::ServedModelOptions{options.aliases, options.json_layout,
                                                                             options.special_tokens_in_messages});
    server::RegistryOptions registry_options;
    registry_options.store_root = options.store_root;
    if (options.engine_options) {
      registry_options.engine = *options.engine_options;
    } else {
      registry_options.engine = engine->options();
      registry_options.engine.context_length = 0;  // derived from the first model: each derives its own
      registry_options.engine.kv_cache_bytes = 0;
    }
    registry_options.served = {{}, options.json_layout, options.special_tokens_in_messages};
    registry_options.keep_alive_seconds = options.keep_alive_seconds;
    registry_options.max_loaded = options.max_loaded_models;
    registry_options.memory_budget = options.memory_budget_bytes;
    registry = std::make_unique<server::ModelRegistry>(model, std::move(registry_options));
  }

  // --- embeddings ---------------------------------------------------------------------------------
  const std::string& served_name() const { return engine ? model->name() : embedding_names.front(); }

  bool names_embedding_model(const std::string& asked) const {
    if (asked.empty() || asked == "default") return true;
    for (const std::string& n : embedding_names) {
      if (asked == n || asked == n + ":latest") return true;
    }
    return false;
  }

  void embeddings(const httplib::Request& req, httplib::Response& res, server::EmbeddingsApi api) {
    const server::EmbeddingsRequest request = server::parse_embeddings_request(server::parse_body(req.body), api);
    const bool ollama = api != server::EmbeddingsApi::openai;
    if (!engine) {  // an embedding model served alone
      if (!names_embedding_model(request.model)) {
        throw ApiError(404, "invalid_request_error",
                       ollama ? fmt::format("model '{}' not found", request.model)
                              : fmt::format("The model '{}' does not exist; this server serves '{}'", request.model,
                                            fmt::join(embedding_names, "', '")),
                       "model", "model_not_found");
      }
      return res.set_content(server::answer_embeddings(request, *embedder, served_name()), "application/json");
    }
    // Any model by name: a stored embedding model, a stored generative model's hidden states (the
    // registry's embedders), or the first model's (the server's own, options.embedder).
    const auto lease = registry->acquire(request.model, ollama, request.keep_alive, server::ModelUse::embed);
    Embedder* model_embedder = lease->embedder();
    if (model_embedder == nullptr) {
      std::call_once(embedder_made, [this] {
        if (options.embedder) embedder = options.embedder();
      });
      if (!embedder) {
        throw ApiError::invalid(fmt::format("model '{}' gives no embeddings on this server", lease->name()),
                                "model", "model_not_embedding");
      }
      model_embedder = embedder.get();
    }
    res.set_content(server::answer_embeddings(request, *model_embedder, lease->name()), "application/json");
  }

  // The routes an embedding model served alone answers; the others answer 400 (they generate, or work on
  // the model store, which such a server does not hold).
  static bool embedding_only_route(const std::string& label) {
    static const char* const kRoutes[] = {"/v1/embeddings", "/api/embed", "/api/embeddings", "/v1/models",
                                          "/v1/models/{id}", "/api/tags", "/api/show", "/api/ps", "/api/version",
                                          "/health", "/metrics", "/", "/ui/{file}"};
    return std::find(std::begin(kRoutes), std::end(kRoutes), label) != std::end(kRoutes);
  }

  Json embedding_model_details() const {
    const EmbeddingModel& e = embedder->model();
    return Json{{"parent_model", ""},
                {"format", e.path.extension() == ".gguf" ? "gguf" : "orchard"},
                {"family", e.architecture()},
                {"families", Json::array({e.architecture()})},
                {"parameter_size", ""},
                {"quantization_level", ""}};
  }

  // /v1/models, /v1/models/{id}, /api/tags, /api/show and /api/ps of an embedding model served alone.
  void describe_embedding_model(const std::string& label, const httplib::Request& req, httplib::Response& res) {
    const auto entry = [](const std::string& name) {
      return Json{{"id", name}, {"object", "model"}, {"created", 0}, {"owned_by", "orchard"}};
    };
    const auto not_found = [this](const std::string& asked, bool ollama) {
      return ApiError(404, "invalid_request_error",
                      ollama ? fmt::format("model '{}' not found", asked)
                             : fmt::format("The model '{}' does not exist; this server serves '{}'", asked,
                                           fmt::join(embedding_names, "', '")),
                      "model", "model_not_found");
    };
    if (label == "/v1/models") {
      Json data = Json::array();
      for (const std::string& n : embedding_names) data.push_back(entry(n));
      return send_json(res, Json{{"object", "list"}, {"data", std::move(data)}});
    }
    if (label == "/v1/models/{id}") {
      const std::string asked = req.matches[1].str();
      if (!names_embedding_model(asked)) throw not_found(asked, false);
      return send_json(res, entry(asked));
    }
    if (label == "/api/tags" || label == "/api/ps") {
      Json list = Json::array();
      for (const std::string& n : embedding_names) {
        list.push_back(Json{{"name", n}, {"model", n}, {"size", 0},
                            {"digest", fmt::format("{:016x}", std::hash<std::string>{}(embedding_names.front()))},
                            {"details", embedding_model_details()}});
      }
      return send_json(res, Json{{"models", std::move(list)}});
    }
    // /api/show
    const Json body = server::parse_body(req.body);
    std::string asked;
    for (const char* key : {"model", "name"}) {
      if (body.contains(key) && body[key].is_string()) asked = body[key].get<std::string>();
    }
    if (asked.empty()) throw ApiError::invalid("'model' is required", "model");
    if (!names_embedding_model(asked)) throw not_found(asked, true);
    const EmbeddingModel& e = embedder->model();
    const std::string arch = e.architecture();
    send_json(res, Json{{"license", ""},
                        {"modelfile", fmt::format("FROM {}\n", e.path.string())},
                        {"parameters", ""},
                        {"template", ""},
                        {"details", embedding_model_details()},
                        {"model_info", Json{{"general.architecture", arch},
                                            {arch + ".context_length", e.max_tokens},
                                            {arch + ".embedding_length", e.n_dims},
                                            {arch + ".pooling_type", pooling_name(e.pooling)}}},
                        {"capabilities", Json::array({"embedding"})}});
  }

  // --- bookkeeping --------------------------------------------------------------------------------
  void add_active(const std::shared_ptr<Generation>& g) {
    std::lock_guard lock(active_mutex);
    active[g.get()] = g;
  }
  void remove_active(Generation* g) {
    std::lock_guard lock(active_mutex);
    active.erase(g);
    active_changed.notify_all();
  }
  std::int64_t n_active() {
    std::lock_guard lock(active_mutex);
    return static_cast<std::int64_t>(active.size());
  }

  void log_request(const httplib::Request& req, const httplib::Response& res) {
    RequestContext& ctx = t_context;
    server::RequestRecord record;
    record.route = ctx.route;
    record.status = res.status;
    record.duration_seconds = std::chrono::duration<double>(Clock::now() - ctx.start).count();
    if (ctx.generation) {
      record.prompt_tokens = ctx.generation->usage().prompt_tokens;
      record.completion_tokens = ctx.generation->completion_tokens();
      record.ttft_seconds = ctx.generation->ttft_seconds();
      record.cancelled = ctx.generation->cancelled();
    }
    metrics.record(record);
    if (options.log_requests) {
      Json line;
      line["ts"] = utc_now_iso();
      line["id"] = ctx.id;
      line["method"] = req.method;
      line["route"] = req.path;
      line["status"] = res.status;
      line["stream"] = ctx.stream;
      line["prompt_tokens"] = record.prompt_tokens;
      line["completion_tokens"] = record.completion_tokens;
      line["ttft_ms"] = record.ttft_seconds < 0 ? Json() : Json(std::round(record.ttft_seconds * 1e4) / 10);
      line["duration_ms"] = std::round(record.duration_seconds * 1e4) / 10;
      if (record.cancelled) line["cancelled"] = true;
      if (!ctx.error.empty()) line["error"] = ctx.error;
      std::string text = server::dump_json(line) + "\n";
      std::lock_guard lock(log_mutex);
      std::fputs(text.c_str(), stderr);
      std::fflush(stderr);
    }
    t_context = RequestContext{};
  }

  // --- responses ----------------------------------------------------------------------------------
  void send_error(const httplib::Request& req, httplib::Response& res, const ApiError& error) {
    res.status = error.status();
    t_context.error = error.what();
    if (is_ollama_path(req.path)) {
      res.set_content(server::dump_json(Json{{"error", error.what()}}), "application/json");
    } else {
      res.set_content(server::dump_json(server::error_body(error)), "application/json");
    }
    if (error.status() == 503 || error.status() == 429) res.set_header("Retry-After", "1");
  }

  // An answer given before the body was read (401, 411, 413, 503 while draining, a framing error): the
  // unread body must not be taken for the connection's next request.
  void refuse(const httplib::Request& req, httplib::Response& res, const ApiError& error) {
    send_error(req, res, error);
    res.set_header("Connection", "close");
    if (server::Connection* c = server::current_connection()) c->close_after_response();
  }

  // Runs `handler`, turning whatever it throws into the error response.
  template <typename F>
  void guarded(const char* route, const httplib::Request& req, httplib::Response& res, F&& handler) {
    t_context.route = route;
    try {
      handler();
    } catch (...) {
      send_error(req, res, server::api_error_from_exception(std::current_exception()));
    }
  }

  // The model a request's body names, loaded, with the stored model's Modelfile defaults applied to the
  // body (re-parsed by the caller when `defaults_applied`). keep_alive: Ollama's routes.
  std::shared_ptr<server::ModelLease> acquire(Json& body, Api api, bool& defaults_applied) {
    const bool ollama = api == Api::ollama_chat || api == Api::ollama_generate;
    std::string asked;
    if (body.is_object() && body.contains("model") && body["model"].is_string()) asked = body["model"];
    std::optional<double> keep_alive;
    if (ollama && body.is_object() && body.contains("keep_alive") && !body["keep_alive"].is_null()) {
      keep_alive = server::ModelRegistry::parse_keep_alive(body["keep_alive"], "keep_alive");
    }
    // An adapter's name selects the first model, whose engine holds the adapters (OpenAI routes).
    if (!ollama && !asked.empty() && !registry->is_first(asked) && loras->names_adapter(asked)) asked.clear();
    auto lease = registry->acquire(asked, ollama, keep_alive);
    defaults_applied = false;
    if (lease->stored()) {
      server::apply_modelfile_defaults(body, api, *lease->stored());
      defaults_applied = true;
    }
    return lease;
  }

  // The LoRA adapters of a request (server/lora_routes.h); only the first model has adapters.
  std::vector<LoraRequest> lora_selection(const server::ModelLease& lease, const Json& body) {
    if (&lease.model().engine() == engine.get()) {
      std::string asked;
      if (body.is_object() && body.contains("model") && body["model"].is_string()) asked = body["model"];
      return loras->select(body, asked);
    }
    // A stored model's Modelfile adapters apply to all its requests.
    if (std::vector<LoraRequest> adapters = lease.adapters(); !adapters.empty()) return adapters;
    if (body.is_object() && body.contains("lora") && !body["lora"].is_null() && !body["lora"].empty()) {
      throw ApiError::invalid(fmt::format("the model '{}' has no LoRA adapters (they are the first model's, '{}')",
                                          lease.model().name(), model->name()),
                              "lora");
    }
    return {};
  }

  // Ollama's keep_alive of a request with nothing to generate: 0 unloads the model.
  static std::optional<double> keep_alive_of(const Json& body) {
    if (!body.is_object() || !body.contains("keep_alive") || body["keep_alive"].is_null()) return std::nullopt;
    return server::ModelRegistry::parse_keep_alive(body["keep_alive"], "keep_alive");
  }

  void generate(const httplib::Request& req, httplib::Response& res,
                const std::shared_ptr<server::ModelLease>& lease, server::PreparedRequest prepared,
                server::GenerationSetup setup) {
    setup.header.created = static_cast<std::int64_t>(std::time(nullptr));
    setup.header.model = lease->model().name();
    setup.header.system_fingerprint = "orchard-" + options.version;
    t_context.id = setup.header.id;
    t_context.stream = setup.stream;
    const std::function<bool()> client_gone = client_gone_check();
    prepared.request.abandoned = client_gone;  // the grammar's compile stops when the client goes away
    // The generation holds its model's lease, released after the generation is gone (whichever of the
    // request's holders lets go last): the model cannot be unloaded under it.
    std::shared_ptr<Generation> generation(new Generation(lease->model(), std::move(prepared), setup),
                                           [lease](Generation* g) { delete g; });
    t_context.generation = generation;
    generation->submit();
    add_active(generation);
    if (!setup.stream) {
      struct Unregister {
        Impl* impl;
        Generation* g;
        ~Unregister() { impl->remove_active(g); }
      } unregister{this, generation.get()};
      res.set_content(generation->response_body(client_gone), "application/json");
      return;
    }
    bool sse = setup.api == Api::openai_chat || setup.api == Api::openai_completion;
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    auto last_write = std::make_shared<Clock::time_point>(Clock::now());
    res.set_chunked_content_provider(
        sse ? "text/event-stream" : "application/x-ndjson",
        [this, generation, sse, last_write, client_gone](std::size_t, httplib::DataSink& sink) {
          std::string out = generation->next_chunk(std::chrono::milliseconds(250));
          // A client that went away is noticed on its socket (queued, long prefill: nothing is written);
          // an idle SSE stream also sends a comment now and then, for proxies between.
          if (out.empty() && client_gone && client_gone()) {
            generation->cancel();
            return false;
          }
          if (out.empty() && sse && Clock::now() - *last_write > std::chrono::seconds(2)) out = ": keep-alive\n\n";
          if (!out.empty()) {
            if (!sink.write(out.data(), out.size())) {
              generation->cancel();
              return false;
            }
            *last_write = Clock::now();
          }
          if (generation->finished()) sink.done();
          return true;
        },
        [this, generation](bool success) {
          if (!success || !generation->finished()) generation->cancel();
          remove_active(generation.get());
        });
  }

  // --- routes -------------------------------------------------------------------------------------
  void chat_completions(const httplib::Request& req, httplib::Response& res) {
    Json body = server::parse_body(req.body);
    server::ChatRequest request = server::parse_openai_chat(body);
    bool defaults = false;
    auto lease = acquire(body, Api::openai_chat, defaults);
    if (defaults) request = server::parse_openai_chat(body);
    server::GenerationSetup setup{Api::openai_chat, request.params.stream, request.params.include_usage, false,
                                  {server::make_response_id("chatcmpl-")}, request.params.token_detail};
    server::PreparedRequest prepared = server::prepare_chat(lease->model(), request);
    prepared.request.loras = lora_selection(*lease, body);
    generate(req, res, lease, std::move(prepared), setup);
  }

  void completions(const httplib::Request& req, httplib::Response& res) {
    Json body = server::parse_body(req.body);
    server::CompletionRequest request = server::parse_openai_completion(body);
    bool defaults = false;
    auto lease = acquire(body, Api::openai_completion, defaults);
    if (defaults) request = server::parse_openai_completion(body);
    server::GenerationSetup setup{Api::openai_completion, request.params.stream, request.params.include_usage,
                                  request.echo, {server::make_response_id("cmpl-")}, request.params.token_detail};
    server::PreparedRequest prepared = server::prepare_completion(lease->model(), request);
    prepared.request.loras = lora_selection(*lease, body);
    generate(req, res, lease, std::move(prepared), setup);
  }

  // Ollama's answer to a request with nothing to generate: the model is loaded, or with keep_alive 0,
  // unloaded.
  void ollama_loaded(httplib::Response& res, const Json& body, const std::string& asked, bool chat) {
    std::string done_reason = "load";
    std::string name = asked;
    if (keep_alive_of(body) == 0.0) {
      if (!registry->is_first(asked) && !registry->stored_name(asked)) {
        bool unused = false;
        Json copy = body;
        acquire(copy, chat ? Api::ollama_chat : Api::ollama_generate, unused);  // 404 naming it
      }
      registry->unload(asked);
      done_reason = "unload";
    } else {
      bool unused = false;
      Json copy = body;
      name = acquire(copy, chat ? Api::ollama_chat : Api::ollama_generate, unused)->model().name();
    }
    Json out{{"model", name}, {"created_at", utc_now_iso()}};
    if (chat) {
      out["message"] = Json{{"role", "assistant"}, {"content", ""}};
    } else {
      out["response"] = "";
    }
    out["done_reason"] = done_reason;
    out["done"] = true;
    res.set_content(server::dump_json(out), "application/json");
  }

  void ollama_chat(const httplib::Request& req, httplib::Response& res) {
    Json body = server::parse_body(req.body);
    server::ChatRequest request = server::parse_ollama_chat(body);
    if (request.load_only) return ollama_loaded(res, body, request.params.model, /*chat=*/true);
    bool defaults = false;
    auto lease = acquire(body, Api::ollama_chat, defaults);
    if (defaults) request = server::parse_ollama_chat(body);
    server::GenerationSetup setup{Api::ollama_chat, request.params.stream, false, false,
                                  {server::make_response_id("ollama-")}};
    server::PreparedRequest prepared = server::prepare_chat(lease->model(), request);
    prepared.request.loras = lease->adapters();  // a stored model's Modelfile adapters
    generate(req, res, lease, std::move(prepared), setup);
  }

  void ollama_generate(const httplib::Request& req, httplib::Response& res) {
    Json body = server::parse_body(req.body);
    server::OllamaGenerate request = server::parse_ollama_generate(body);
    if (request.load_only) {
      const server::GenerationParams& p = request.chat ? request.chat->params : request.completion.params;
      return ollama_loaded(res, body, p.model, /*chat=*/false);
    }
    bool defaults = false;
    auto lease = acquire(body, Api::ollama_generate, defaults);
    if (defaults) request = server::parse_ollama_generate(body);
    const server::GenerationParams& params = request.chat ? request.chat->params : request.completion.params;
    server::GenerationSetup setup{Api::ollama_generate, params.stream, false, false,
                                  {server::make_response_id("ollama-")}};
    const server::ServedModel& served = lease->model();
    server::PreparedRequest prepared = request.chat ? server::prepare_chat(served, *request.chat)
                                                    : server::prepare_completion(served, request.completion);
    prepared.request.loras = lease->adapters();  // a stored model's Modelfile adapters
    generate(req, res, lease, std::move(prepared), setup);
  }

  void send_json(httplib::Response& res, const Json& body) {
    res.set_content(server::dump_json(body), "application/json");
  }

  // /api/pull and /api/create: NDJSON progress objects when streamed (Ollama's default), else the last.
  template <typename F>
  void progress_route(const httplib::Request& req, httplib::Response& res, F&& work) {
    Json body = server::parse_body(req.body);
    const bool stream = !(body.is_object() && body.contains("stream") && body["stream"] == false);
    if (!stream) {
      Json last = Json{{"status", "success"}};
      work(body, [&](const Json& status) { last = status; });
      return send_json(res, last);
    }
    // The work runs in the stream's first call: its progress is written as it comes; an error after the
    // first line is an {"error"} line (the status is sent already).
    res.set_chunked_content_provider(
        "application/x-ndjson", [work, body](std::size_t, httplib::DataSink& sink) mutable {
          auto write = [&](const Json& status) {
            const std::string line = server::dump_json(status) + "\n";
            sink.write(line.data(), line.size());
          };
          try {
            work(body, write);
          } catch (const ApiError& e) {
            write(Json{{"error", e.what()}});
          } catch (const std::exception& e) {
            write(Json{{"error", e.what()}});
          }
          sink.done();
          return true;
        });
  }

  // Registers a route under its metric label; GET routes answer HEAD too (httplib's way).
  template <typename F>
  void route(const char* method, const std::string& pattern, const char* label, F&& handler) {
    routes.emplace_back(method, std::regex(pattern));
    auto wrapped = [this, label, handler](const httplib::Request& req, httplib::Response& res) {
      guarded(label, req, res, [&] {
        if (engine) return handler(req, res);
        const std::string l = label;
        if (!embedding_only_route(l)) {
          throw ApiError::invalid(fmt::format("model '{}' is an embedding model: it does not generate text, and this "
                                              "server holds no model store (it answers POST /v1/embeddings, "
                                              "/api/embed and /api/embeddings)", served_name()),
                                  "model", "model_not_generative");
        }
        if (l == "/v1/models" || l == "/v1/models/{id}" || l == "/api/tags" || l == "/api/show" || l == "/api/ps") {
          return describe_embedding_model(l, req, res);
        }
        handler(req, res);
      });
    };
    if (std::string(method) == "GET") {
      http.Get(pattern, wrapped);
    } else if (std::string(method) == "DELETE") {
      http.Delete(pattern, wrapped);
    } else {
      http.Post(pattern, wrapped);
    }
  }

  // The methods the routes matching `path` take ("GET, HEAD" ...), empty when none does.
  std::string allowed_methods(const std::string& path) const {
    std::string allow;
    for (const auto& [method, pattern] : routes) {
      if (!std::regex_match(path, pattern)) continue;
      const std::string m = method == "GET" ? "GET, HEAD" : method;
      if (allow.find(m) == std::string::npos) allow += (allow.empty() ? "" : ", ") + m;
    }
    return allow;
  }

  void setup_http() {
    // httplib's own Content-Length check stays as a second line; the transport reads the sockets.
    http.set_payload_max_length(options.max_body_bytes);
    http.set_keep_alive_max_count(100000);  // (what the Keep-Alive header says; the transport keeps them)
    http.set_keep_alive_timeout(5);

    http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      t_context = RequestContext{};  // route "unmatched" until a handler names it: bounded metric labels
      if (server::Connection* c = server::current_connection()) c->begin_body();
      if (draining.load()) {
        refuse(req, res, ApiError(503, "server_error", "the server is shutting down", {}, "shutting_down"));
        return httplib::Server::HandlerResponse::Handled;
      }
      // How the body is framed is checked first: whatever the answer, an unreadable body ends the connection.
      if (auto error = server::check_body_framing(req, options.max_body_bytes)) {
        refuse(req, res, *error);
        return httplib::Server::HandlerResponse::Handled;
      }
      // The page's files hold no data (server/web_routes.h); what it shows comes through the API, keyed.
      if (!options.api_key.empty() && req.path != "/health" && !server::is_web_path(req.path)) {
        std::string header = req.get_header_value("Authorization");
        if (!server::bearer_matches(header, options.api_key)) {
          refuse(req, res,
                 ApiError(401, "invalid_request_error",
                          header.empty() ? "missing API key: send 'Authorization: Bearer <key>'"
                                         : "incorrect API key",
                          {}, "invalid_api_key"));
          res.set_header("WWW-Authenticate", "Bearer");
          return httplib::Server::HandlerResponse::Handled;
        }
      }
      return httplib::Server::HandlerResponse::Unhandled;
    });

    // Errors httplib answers itself (no route, a body or head it could not read, a malformed request) get
    // the API's body; what the transport saw while reading says which they were.
    http.set_error_handler(httplib::Server::HandlerWithResponse([this](const httplib::Request& req,
                                                                       httplib::Response& res) {
      if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
      int status = res.status;
      std::string message = fmt::format("HTTP error {}", status);
      std::string code;
      const server::Connection* connection = server::current_connection();
      const server::ReadFailure failure = connection ? connection->failure() : server::ReadFailure::none;
      if (failure == server::ReadFailure::body_too_large || status == 413) {
        status = 413;
        message = fmt::format("the request body is larger than the limit of {} bytes", options.max_body_bytes);
        code = "request_too_large";
      } else if (failure == server::ReadFailure::head_too_large) {
        status = 431;
        message = fmt::format("the request's headers are larger than the limit of {} bytes",
                              transport->options().max_head_bytes);
        code = "request_header_fields_too_large";
      } else if (failure == server::ReadFailure::request_line_too_large || status == 414) {
        status = 414;
        message = "the request line is too long";
        code = "uri_too_long";
      } else if (failure == server::ReadFailure::timed_out) {
        status = 408;
        message = "the request did not arrive in time";
        code = "request_timeout";
      } else if (status == 404) {
        const std::string allow = allowed_methods(req.path);
        if (!allow.empty()) {
          status = 405;
          message = fmt::format("{} is not allowed on {} (allowed: {})", req.method, req.path, allow);
          code = "method_not_allowed";
          res.set_header("Allow", allow);
        } else {
          message = fmt::format("unknown route: {} {}", req.method, req.path);
          code = "not_found";
        }
      } else if (status == 400) {
        message = "the request is malformed (request line, headers or body framing)";
        code = "bad_request";
      }
      ApiError error(status, "invalid_request_error", message, {}, code);
      // A request httplib could not read (malformed, too large) leaves the connection's bytes unframed.
      if (failure != server::ReadFailure::none || (status != 404 && status != 405)) {
        refuse(req, res, error);
      } else {
        send_error(req, res, error);
      }
      return httplib::Server::HandlerResponse::Handled;
    }));
    http.set_exception_handler([this](const httplib::Request& req, httplib::Response& res, std::exception_ptr e) {
      send_error(req, res, server::api_error_from_exception(e));
    });
    http.set_logger([this](const httplib::Request& req, const httplib::Response& res) { log_request(req, res); });

    route("POST", "/v1/chat/completions", "/v1/chat/completions",
          [this](const httplib::Request& req, httplib::Response& res) { chat_completions(req, res); });
    route("POST", "/v1/completions", "/v1/completions",
          [this](const httplib::Request& req, httplib::Response& res) { completions(req, res); });
    route("GET", "/v1/models", "/v1/models", [this](const httplib::Request&, httplib::Response& res) {
      Json out = server::openai_models_response(*registry);
      for (Json& entry : loras->model_entries(model->name())) out["data"].push_back(std::move(entry));
      send_json(res, out);
    });
    route("GET", R"(/v1/models/(.+))", "/v1/models/{id}", [this](const httplib::Request& req, httplib::Response& res) {
      const std::string asked = req.matches[1].str();
      for (Json& entry : loras->model_entries(model->name())) {
        if (entry["id"] == asked) return send_json(res, entry);
      }
      const auto names = registry->names();
      std::string id;
      if (std::find(names.begin(), names.end(), asked) != names.end()) {
        id = asked;
      } else if (registry->is_first(asked)) {
        id = model->name();
      } else if (auto stored = registry->stored_name(asked)) {
        id = *stored;
      } else {
        throw ApiError(404, "invalid_request_error",
                       fmt::format("The model '{}' does not exist; this server serves '{}'", asked,
                                   fmt::join(names, "', '")),
                       "model", "model_not_found");
      }
      send_json(res, Json{{"id", id}, {"object", "model"}, {"created", 0}, {"owned_by", "orchard"}});
    });
    route("POST", "/v1/load_lora_adapter", "/v1/load_lora_adapter",
          [this](const httplib::Request& req, httplib::Response& res) {
            send_json(res, loras->load(server::parse_body(req.body)));
          });
    route("POST", "/v1/unload_lora_adapter", "/v1/unload_lora_adapter",
          [this](const httplib::Request& req, httplib::Response& res) {
            send_json(res, loras->unload(server::parse_body(req.body)));
          });
    route("GET", "/lora-adapters", "/lora-adapters",
          [this](const httplib::Request&, httplib::Response& res) { send_json(res, loras->list()); });
    route("POST", "/lora-adapters", "/lora-adapters",
          [this](const httplib::Request& req, httplib::Response& res) { send_json(res, loras->set_scales(req.body)); });
    route("POST", "/api/chat", "/api/chat",
          [this](const httplib::Request& req, httplib::Response& res) { ollama_chat(req, res); });
    route("POST", "/api/generate", "/api/generate",
          [this](const httplib::Request& req, httplib::Response& res) { ollama_generate(req, res); });
    route("GET", "/api/tags", "/api/tags", [this](const httplib::Request&, httplib::Response& res) {
      send_json(res, server::tags_response(*registry));
    });
    route("POST", "/api/show", "/api/show", [this](const httplib::Request& req, httplib::Response& res) {
      send_json(res, server::show_response(*registry, server::parse_body(req.body)));
    });
    route("GET", "/api/ps", "/api/ps", [this](const httplib::Request&, httplib::Response& res) {
      send_json(res, server::ps_response(*registry));
    });
    route("POST", "/api/copy", "/api/copy", [this](const httplib::Request& req, httplib::Response& res) {
      server::copy_model_route(*registry, server::parse_body(req.body));
      send_json(res, Json::object());
    });
    route("DELETE", "/api/delete", "/api/delete", [this](const httplib::Request& req, httplib::Response& res) {
      server::delete_model_route(*registry, server::parse_body(req.body));
      send_json(res, Json::object());
    });
    route("POST", "/api/create", "/api/create", [this](const httplib::Request& req, httplib::Response& res) {
      progress_route(req, res, [this](const Json& body, const std::function<void(const Json&)>& emit) {
        emit(Json{{"status", "parsing modelfile"}});
        emit(server::create_model_route(*registry, body));
      });
    });
    route("POST", R"(/api/blobs/([^/]+))", "/api/blobs/{digest}",
          [this](const httplib::Request& req, httplib::Response& res) {
            server::put_blob_route(*registry, req.matches[1].str(), req.body);
            res.status = 201;
          });
    // HEAD (as httplib answers it for a GET route): 200 when the blob is stored, 404 otherwise.
    route("GET", R"(/api/blobs/([^/]+))", "/api/blobs/{digest}",
          [this](const httplib::Request& req, httplib::Response& res) {
            const std::string digest = req.matches[1].str();
            if (!server::blob_stored(*registry, digest)) {
              throw ApiError(404, "invalid_request_error", fmt::format("blob {} not found", digest), "digest",
                             "blob_not_found");
            }
            res.status = 200;
          });
    route("POST", "/api/pull", "/api/pull", [this](const httplib::Request& req, httplib::Response& res) {
      progress_route(req, res, [this](const Json& body, const std::function<void(const Json&)>& emit) {
        server::pull_model_route(*registry, body, emit);
      });
    });
    route("GET", "/api/version", "/api/version", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(server::dump_json(Json{{"version", options.version}}), "application/json");
    });
    route("GET", "/health", "/health", [this](const httplib::Request&, httplib::Response& res) {
      // A forward pass that failed (a device fault inside a step) is reported here: the server keeps
      // serving, the requests of that step got their errors.
      Json body{{"status", "ok"}, {"model", served_name()}};
      if (engine) {
        const EngineStats stats = engine->stats();
        if (stats.forward_failures > 0) {
          body["status"] = "degraded";
          body["forward_failures"] = stats.forward_failures;
          body["last_forward_error"] = stats.last_forward_error;
        }
      }
      res.set_content(server::dump_json(body), "application/json");
    });
    route("POST", "/v1/grammar/compile", "/v1/grammar/compile",
          [this](const httplib::Request& req, httplib::Response& res) {
            server::CompileRequest request = server::parse_compile_request(server::parse_body(req.body));
            auto lease = registry->acquire(request.model, false);
            res.set_content(
                server::dump_json(server::compile_response(lease->model(), request, client_gone_check())),
                "application/json");
          });
    route("GET", "/", "/",
          [](const httplib::Request& req, httplib::Response& res) { server::answer_web_asset(req, res); });
    route("GET", R"(/ui/.+)", "/ui/{file}",
          [](const httplib::Request& req, httplib::Response& res) { server::answer_web_asset(req, res); });
    route("GET", "/metrics", "/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(metrics.render(engine ? engine->stats() : EngineStats{}, n_active()),
                      "text/plain; version=0.0.4");
    });
    route("POST", "/v1/embeddings", "/v1/embeddings", [this](const httplib::Request& req, httplib::Response& res) {
      embeddings(req, res, server::EmbeddingsApi::openai);
    });
    route("POST", "/api/embed", "/api/embed", [this](const httplib::Request& req, httplib::Response& res) {
      embeddings(req, res, server::EmbeddingsApi::ollama_embed);
    });
    route("POST", "/api/embeddings", "/api/embeddings", [this](const httplib::Request& req, httplib::Response& res) {
      embeddings(req, res, server::EmbeddingsApi::ollama_embeddings);
    });
  }

  // Refuses new requests at once; the running ones get the grace period, less the time to cut the rest
  // short and write their last events (an error that says so), so that everything is over by its end.
  void stop() {
    if (draining.exchange(true)) return;
    const Clock::time_point start = Clock::now();
    const auto grace = std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(std::max(options.shutdown_grace_seconds, 0.0)));
    const Clock::time_point end = start + grace;
    const Clock::time_point cut = end - std::min<Clock::duration>(grace / 4, std::chrono::seconds(1));
    std::size_t running = 0, cancelled = 0;
    {
      std::unique_lock lock(active_mutex);
      running = active.size();
      active_changed.wait_until(lock, cut, [&] { return active.empty(); });
      cancelled = active.size();
      for (auto& [g, generation] : active) generation->cancel_for_shutdown();
      active_changed.wait_until(lock, end, [&] { return active.empty(); });
    }
    if (options.log_requests) {
      std::lock_guard lock(log_mutex);
      std::fprintf(stderr, "orchard serve: stopping: %zu requests running, %zu cut short by the grace period\n",
                   running, cancelled);
    }
    stopped = true;
    http.end_streams();
    transport->stop();               // idle connections close now,
    transport->close_connections();  // and those still writing (to a client that stopped reading) too
  }
};

Server::Server(std::shared_ptr<Engine> engine, ServerOptions options)
    : impl_(std::make_unique<Impl>(std::move(engine), std::move(options))) {}

Server::~Server() { stop(); }

int Server::bind() {
  if (impl_->port >= 0) return impl_->port;
  const ServerOptions& o = impl_->options;
  if (o.port < 0 || o.port > 65535) throw Error(fmt::format("[server] port must be in [0, 65535], got {}", o.port));
  impl_->port = impl_->transport->bind(o.host, o.port);
  return impl_->port;
}

void Server::serve() {
  bind();
  if (impl_->stopped) return;
  impl_->transport->run();
}

void Server::stop() { impl_->stop(); }

int Server::port() const { return impl_->port; }

const std::string& Server::model_name() const { return impl_->served_name(); }

double Server::parse_keep_alive(const std::string& text) {
  // A bare number is seconds; anything else is read as a duration string.
  Json value = text;
  try {
    std::size_t used = 0;
    const double seconds = std::stod(text, &used);
    if (used == text.size()) value = seconds;
  } catch (const std::exception&) {
  }
  try {
    return server::ModelRegistry::parse_keep_alive(value, "keep_alive");
  } catch (const ApiError& e) {
    throw Error(e.what());
  }
}

}  // namespace pie
