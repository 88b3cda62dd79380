// The HTTP layer: routes, API-key check, body limit, error bodies, streaming with cancellation on
// disconnect, graceful stop, the request log and the metrics. Requests are parsed and formatted by the
// other files of this folder; this one only wires them to cpp-httplib.
#include "pie/server.h"

#include <httplib.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <ctime>
#include <map>
#include <sys/socket.h>
#include <mutex>

#include "server/api_error.h"
#include "server/api_request.h"
#include "server/generation.h"
#include "server/grammar_compile.h"
#include "server/metrics.h"
#include "server/served_model.h"
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

// Compares without an early exit, so the key cannot be guessed byte by byte from response times.
bool same_secret(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (std::size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

std::string parameter_size(std::int64_t count) {
  if (count >= 1'000'000'000) return fmt::format("{:.1f}B", static_cast<double>(count) / 1e9);
  if (count >= 1'000'000) return fmt::format("{:.1f}M", static_cast<double>(count) / 1e6);
  return fmt::format("{:.1f}K", static_cast<double>(count) / 1e3);
}

std::string utc_now_iso() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace

struct Server::Impl {
  ServerOptions options;
  std::shared_ptr<Engine> engine;
  std::unique_ptr<server::ServedModel> model;
  // httplib 0.11 listens with a backlog of 5: a burst of new connections (dozens of clients connecting at
  // once) overflows it. The listening socket is protected; this raises the backlog once it is bound.
  struct HttpServer : httplib::Server {
    void raise_backlog(int backlog) { ::listen(svr_sock_, backlog); }
  };
  HttpServer http;
  server::Metrics metrics;
  std::mutex log_mutex;

  std::atomic<bool> draining{false};
  std::atomic<bool> stopped{false};
  std::mutex active_mutex;
  std::condition_variable active_changed;
  std::map<Generation*, std::shared_ptr<RequestStream>> active;  // generation requests in progress
  int port = -1;

  Impl(std::shared_ptr<Engine> e, ServerOptions o) : options(std::move(o)), engine(std::move(e)) {
    if (!engine) throw Error("[server] no engine");
    std::string name = options.model_name.empty() ? server::served_model_name(engine->model()) : options.model_name;
    model = std::make_unique<server::ServedModel>(engine, name,
                                                  server::ServedModelOptions{options.aliases, options.json_layout});
    setup_http();
  }

  // --- bookkeeping --------------------------------------------------------------------------------
  void add_active(const std::shared_ptr<Generation>& g) {
    std::lock_guard lock(active_mutex);
    active[g.get()] = g->stream();
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
    if (error.status() == 503) res.set_header("Retry-After", "1");
    // Refused before its body was read (401, 413, 503 while draining): the unread body must not be taken
    // for the connection's next request.
    if (error.status() == 401 || error.status() == 413 || error.status() == 503) res.set_header("Connection", "close");
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

  void check_model(const std::string& asked, bool ollama) {
    if (!model->serves(asked)) {
      throw ApiError(404, "invalid_request_error",
                     ollama ? fmt::format("model '{}' not found", asked)
                            : fmt::format("The model '{}' does not exist; this server serves '{}'", asked,
                                          fmt::join(model->names(), "', '")),
                     "model", "model_not_found");
    }
  }

  void generate(const httplib::Request& req, httplib::Response& res, server::PreparedRequest prepared,
                server::GenerationSetup setup) {
    setup.header.created = static_cast<std::int64_t>(std::time(nullptr));
    setup.header.model = model->name();
    setup.header.system_fingerprint = "orchard-" + options.version;
    t_context.id = setup.header.id;
    t_context.stream = setup.stream;
    auto generation = std::make_shared<Generation>(*model, std::move(prepared), setup);
    generation->submit();
    t_context.generation = generation;
    add_active(generation);
    if (!setup.stream) {
      struct Unregister {
        Impl* impl;
        Generation* g;
        ~Unregister() { impl->remove_active(g); }
      } unregister{this, generation.get()};
      res.set_content(generation->response_body(), "application/json");
      return;
    }
    bool sse = setup.api == Api::openai_chat || setup.api == Api::openai_completion;
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    auto last_write = std::make_shared<Clock::time_point>(Clock::now());
    res.set_chunked_content_provider(
        sse ? "text/event-stream" : "application/x-ndjson",
        [this, generation, sse, last_write](std::size_t, httplib::DataSink& sink) {
          std::string out = generation->next_chunk(std::chrono::milliseconds(250));
          // An idle SSE stream (queued, long prefill) sends a comment now and then: a write is how a
          // client that went away is noticed.
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
    server::ChatRequest request = server::parse_openai_chat(server::parse_body(req.body));
    check_model(request.params.model, false);
    server::GenerationSetup setup{Api::openai_chat, request.params.stream, request.params.include_usage, false,
                                  {server::make_response_id("chatcmpl-")}, request.params.token_detail};
    generate(req, res, server::prepare_chat(*model, request), setup);
  }

  void completions(const httplib::Request& req, httplib::Response& res) {
    server::CompletionRequest request = server::parse_openai_completion(server::parse_body(req.body));
    check_model(request.params.model, false);
    server::GenerationSetup setup{Api::openai_completion, request.params.stream, request.params.include_usage,
                                  request.echo, {server::make_response_id("cmpl-")}, request.params.token_detail};
    generate(req, res, server::prepare_completion(*model, request), setup);
  }

  void ollama_chat(const httplib::Request& req, httplib::Response& res) {
    server::ChatRequest request = server::parse_ollama_chat(server::parse_body(req.body));
    check_model(request.params.model, true);
    server::GenerationSetup setup{Api::ollama_chat, request.params.stream, false, false,
                                  {server::make_response_id("ollama-")}};
    generate(req, res, server::prepare_chat(*model, request), setup);
  }

  void ollama_generate(const httplib::Request& req, httplib::Response& res) {
    server::OllamaGenerate request = server::parse_ollama_generate(server::parse_body(req.body));
    const server::GenerationParams& params = request.chat ? request.chat->params : request.completion.params;
    check_model(params.model, true);
    server::GenerationSetup setup{Api::ollama_generate, params.stream, false, false,
                                  {server::make_response_id("ollama-")}};
    generate(req, res,
             request.chat ? server::prepare_chat(*model, *request.chat)
                          : server::prepare_completion(*model, request.completion),
             setup);
  }

  Json model_details() const {
    const Model& m = model->model();
    std::string arch = architecture_name(m.config.arch);
    return Json{{"parent_model", ""},
                {"format", m.path.extension() == ".gguf" ? "gguf" : "orchard"},
                {"family", arch},
                {"families", Json::array({arch})},
                {"parameter_size", parameter_size(m.weights.n_parameters())},
                {"quantization_level", m.describe()}};
  }

  void ollama_tags(httplib::Response& res) {
    Json list = Json::array();
    for (const std::string& name : model->names()) {
      list.push_back(Json{{"name", name},
                          {"model", name},
                          {"modified_at", utc_now_iso()},
                          {"size", 0},
                          {"digest", fmt::format("{:016x}", std::hash<std::string>{}(model->name()))},
                          {"details", model_details()}});
    }
    res.set_content(server::dump_json(Json{{"models", std::move(list)}}), "application/json");
  }

  void ollama_show(const httplib::Request& req, httplib::Response& res) {
    Json body = server::parse_body(req.body);
    std::string asked;
    for (const char* key : {"model", "name"}) {
      if (body.contains(key) && body[key].is_string()) asked = body[key].get<std::string>();
    }
    if (asked.empty()) throw ApiError::invalid("'model' is required", "model");
    check_model(asked, true);
    const Model& m = model->model();
    std::string arch = architecture_name(m.config.arch);
    Json info{{"general.architecture", arch},
              {"general.parameter_count", m.weights.n_parameters()},
              {arch + ".context_length", m.config.context_length},
              {arch + ".embedding_length", m.config.n_embd},
              {arch + ".block_count", m.config.n_layer},
              {arch + ".attention.head_count", m.config.n_head},
              {arch + ".attention.head_count_kv", m.config.n_kv_head},
              {"tokenizer.ggml.tokens_count", m.tokenizer->vocab_size()}};
    Json out{{"license", ""},
             {"modelfile", fmt::format("FROM {}\n", m.path.empty() ? model->name() : m.path.string())},
             {"parameters", fmt::format("num_ctx {}", model->context_length())},
             {"template", model->chat_template().source()},
             {"details", model_details()},
             {"model_info", std::move(info)},
             {"capabilities", Json::array({"completion", "tools"})}};
    res.set_content(server::dump_json(out), "application/json");
  }

  static Json model_entry(const std::string& name) {
    return Json{{"id", name}, {"object", "model"}, {"created", 0}, {"owned_by", "orchard"}};
  }

  void models(httplib::Response& res) {
    Json list = Json::array();
    for (const std::string& name : model->names()) list.push_back(model_entry(name));
    res.set_content(server::dump_json(Json{{"object", "list"}, {"data", std::move(list)}}), "application/json");
  }

  void setup_http() {
    std::int32_t threads = options.http_threads > 0 ? options.http_threads
                                                    : std::max(128, 4 * engine->options().max_running);
    http.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<std::size_t>(threads)); };
    http.set_payload_max_length(options.max_body_bytes);
    http.set_keep_alive_max_count(100000);
    // Reads keep httplib's 5 s timeout: a connection that stalls mid-request holds a worker (and stop())
    // no longer than that.
    http.set_keep_alive_timeout(5);
    http.set_tcp_nodelay(true);

    http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      t_context = RequestContext{};  // route "unmatched" until a handler names it: bounded metric labels
      if (draining.load()) {
        send_error(req, res, ApiError(503, "server_error", "the server is shutting down", {}, "shutting_down"));
        return httplib::Server::HandlerResponse::Handled;
      }
      // The page's files hold no data (server/web_routes.h); what it shows comes through the API, keyed.
      if (!options.api_key.empty() && req.path != "/health" && !server::is_web_path(req.path)) {
        std::string header = req.get_header_value("Authorization");
        std::string expected = "Bearer " + options.api_key;
        if (!same_secret(header, expected)) {
          send_error(req, res,
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

    // Errors httplib answers itself (no route, body too large, malformed request) get the API's body.
    http.set_error_handler(httplib::Server::HandlerWithResponse([this](const httplib::Request& req,
                                                                       httplib::Response& res) {
      if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
      std::string message;
      std::string code;
      switch (res.status) {
        case 404: message = fmt::format("unknown route: {} {}", req.method, req.path); code = "not_found"; break;
        case 413:
          message = fmt::format("the request body is larger than the limit of {} bytes", options.max_body_bytes);
          code = "request_too_large";
          break;
        default: message = fmt::format("HTTP error {}", res.status); break;
      }
      int status = res.status;
      send_error(req, res, ApiError(status, "invalid_request_error", message, {}, code));
      return httplib::Server::HandlerResponse::Handled;
    }));
    http.set_exception_handler([this](const httplib::Request& req, httplib::Response& res, std::exception_ptr e) {
      send_error(req, res, server::api_error_from_exception(e));
    });
    http.set_logger([this](const httplib::Request& req, const httplib::Response& res) { log_request(req, res); });

    http.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
      guarded("/v1/chat/completions", req, res, [&] { chat_completions(req, res); });
    });
    http.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
      guarded("/v1/completions", req, res, [&] { completions(req, res); });
    });
    http.Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
      guarded("/v1/models", req, res, [&] { models(res); });
    });
    http.Get(R"(/v1/models/(.+))", [this](const httplib::Request& req, httplib::Response& res) {
      guarded("/v1/models/{id}", req, res, [&] {
        const std::string asked = req.matches[1].str();
        check_model(asked, false);
        const auto& names = model->names();
        bool listed = std::find(names.begin(), names.end(), asked) != names.end();
        res.set_content(server::dump_json(model_entry(listed ? asked : model->name())), "application/json");
      });
    });
    http.Post("/api/chat", [this](const httplib::Request& req, httplib::Response& res) {
      guarded("/api/chat", req, res, [&] { ollama_chat(req, res); });
    });
    http.Post("/api/generate", [this](const httplib::Request& req, httplib::Response& res) {
      guarded("/api/generate", req, res, [&] { ollama_generate(req, res); });
    });
    http.Get("/api/tags", [this](const httplib::Request& req, httplib::Response& res) {
      guarded("/api/tags", req, res, [&] { ollama_tags(res); });
    });
    http.Post("/api/show", [this](const httplib::Request& req, httplib::Response& res) {
      guarded("/api/show", req, res, [&] { ollama_show(req, res); });
    });
    http.Get("/api/version", [this](const httplib::Request& req, httplib::Response& res) {
      guarded("/api/version", req, res, [&] {
        res.set_content(server::dump_json(Json{{"version", options.version}}), "application/json");
      });
    });
    http.Get("/health", [this](const httplib::Request& req, httplib::Response& res) {
      guarded("/health", req, res, [&] {
        res.set_content(server::dump_json(Json{{"status", "ok"}, {"model", model->name()}}), "application/json");
      });
    });
    http.Post("/v1/grammar/compile", [this](const httplib::Request& req, httplib::Response& res) {
      guarded("/v1/grammar/compile", req, res, [&] {
        server::CompileRequest request = server::parse_compile_request(server::parse_body(req.body));
        check_model(request.model, false);
        res.set_content(server::dump_json(server::compile_response(*model, request)), "application/json");
      });
    });
    http.Get("/", [this](const httplib::Request& req, httplib::Response& res) {
      guarded("/", req, res, [&] { server::answer_web_asset(req, res); });
    });
    http.Get(R"(/ui/.+)", [this](const httplib::Request& req, httplib::Response& res) {
      guarded("/ui/{file}", req, res, [&] { server::answer_web_asset(req, res); });
    });
    http.Get("/metrics", [this](const httplib::Request& req, httplib::Response& res) {
      guarded("/metrics", req, res, [&] {
        res.set_content(metrics.render(engine->stats(), n_active()), "text/plain; version=0.0.4");
      });
    });
  }

  void stop() {
    if (draining.exchange(true)) return;
    auto grace = std::chrono::duration<double>(std::max(options.shutdown_grace_seconds, 0.0));
    std::size_t running = 0, cancelled = 0;
    {
      std::unique_lock lock(active_mutex);
      running = active.size();
      active_changed.wait_for(lock, grace, [&] { return active.empty(); });
      // What did not finish in time is cancelled: its stream ends and its response completes.
      cancelled = active.size();
      for (auto& [g, stream] : active) {
        if (stream) stream->cancel();
      }
      active_changed.wait_for(lock, std::chrono::seconds(10), [&] { return active.empty(); });
    }
    if (options.log_requests) {
      std::lock_guard lock(log_mutex);
      std::fprintf(stderr, "orchard serve: stopping: %zu requests running, %zu cancelled after the grace period\n",
                   running, cancelled);
    }
    stopped = true;
    http.stop();
  }
};

Server::Server(std::shared_ptr<Engine> engine, ServerOptions options)
    : impl_(std::make_unique<Impl>(std::move(engine), std::move(options))) {}

Server::~Server() {
  if (impl_->http.is_running()) stop();
}

int Server::bind() {
  if (impl_->port >= 0) return impl_->port;
  const ServerOptions& o = impl_->options;
  if (o.port < 0 || o.port > 65535) throw Error(fmt::format("[server] port must be in [0, 65535], got {}", o.port));
  if (o.port == 0) {
    int port = impl_->http.bind_to_any_port(o.host);
    if (port < 0) throw Error(fmt::format("[server] cannot listen on {} (any port)", o.host));
    impl_->port = port;
  } else {
    if (!impl_->http.bind_to_port(o.host, o.port)) {
      throw Error(fmt::format("[server] cannot listen on {}:{} (in use, or not an address of this host)", o.host,
                              o.port));
    }
    impl_->port = o.port;
  }
  impl_->http.raise_backlog(1024);
  return impl_->port;
}

void Server::serve() {
  bind();
  if (impl_->stopped) return;
  impl_->http.listen_after_bind();
}

void Server::stop() { impl_->stop(); }

int Server::port() const { return impl_->port; }

const std::string& Server::model_name() const { return impl_->model->name(); }

}  // namespace pie
