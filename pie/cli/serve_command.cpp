// `orchard serve`: the OpenAI- and Ollama-compatible HTTP server over one model (pie::Server).
#include <fmt/format.h>
#include <malloc.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <pthread.h>
#include <string>
#include <thread>
#include <vector>

#include "arg_parser.h"
#include "commands.h"
#include "grammar_source.h"
#include "model_option.h"
#include "lora_flags.h"
#include "device_flag.h"
#include "speculative_flags.h"
#include "pie/embedding.h"
#include "pie/engine.h"
#include "pie/model.h"
#include "pie/model_store.h"
#include "pie/server.h"
#include "pse/compiler.h"

namespace orchard::cli {

int run_serve(std::span<const std::string> args) {
  std::optional<std::string> model_path, host, port, api_key, parallel, ctx, threads, max_body, name, grace,
      grammar_tables, json_layout, max_queue, grammar_cache_mb, http_threads, keep_alive, max_loaded, memory_budget,
      kv_cache_mb;
  std::vector<std::string> aliases;
  bool quiet = false, special_tokens_in_messages = false, no_store = false;
  ArgParser parser(
      "orchard serve [-m MODEL] [--host 127.0.0.1] [--port 8080] [--api-key KEY] [--parallel N] [--ctx N]\n"
      "              [--threads N] [--max-body BYTES] [--name NAME] [--alias NAME]... [--grace SECONDS]\n"
      "              [--json-layout compact|flexible|indented] [--grammar-tables compile|background|first-use]\n"
      "              [--max-queue N] [--grammar-cache-mb MB] [--http-threads N] [--special-tokens-in-messages]\n"
      "              [--keep-alive DURATION] [--max-loaded-models N] [--memory-budget BYTES] [--no-store] [--quiet]",
      "Serves MODEL over HTTP with OpenAI's API (POST /v1/chat/completions, /v1/completions, GET /v1/models)\n"
      "and Ollama's (POST /api/chat, /api/generate, /api/show, GET /api/tags, /api/version), plus GET /health\n"
      "and GET /metrics (Prometheus), and a web page at GET / (chat, a structured-output playground, a live\n"
      "dashboard). Embeddings: POST /v1/embeddings, /api/embed, /api/embeddings; MODEL may be an\n"
      "embedding model (a BERT folder or GGUF such as all-MiniLM-L6-v2), served alone: generation\n"
      "routes answer 400 then. Without -m, the default model (SmolLM2-135M-Instruct, fetched into the\n"
      "model store at set-up). Every model of the store is served too, by its name (`orchard list`): each\n"
      "loads on its first request and unloads after its keep_alive (the request's, else --keep-alive), or\n"
      "earlier when --max-loaded-models or --memory-budget needs room (least recently used first, never one\n"
      "with requests running); MODEL stays loaded. Ollama's /api/ps, /api/create, /api/copy, /api/delete\n"
      "and /api/pull manage them. Structured output (response_format, tools with\n"
      "tool_choice, grammar, regex) is enforced by a grammar: the output always parses.\n\n"
      "The API key may also come from the ORCHARD_API_KEY environment variable. SIGINT or SIGTERM stop\n"
      "taking requests, let running ones finish for --grace seconds, cancel the rest and exit 0. Once\n"
      "listening, one line 'listening on http://HOST:PORT' is printed on standard output; each request\n"
      "then logs one JSON line on standard error.\n\n"
      "example: orchard serve -m qwen2.5-0.5b-instruct-q8_0.gguf --port 8080 --parallel 8");
  parser.option("model", 'm', "MODEL", kModelOptionHelp, &model_path)
      .option("host", 0, "HOST", "address to listen on (default 127.0.0.1)", &host)
      .option("port", 'p', "PORT", "port (default 8080; 0: any free port)", &port)
      .option("api-key", 0, "KEY", "require 'Authorization: Bearer KEY' (all routes but /health and the page's files)",
              &api_key)
      .option("parallel", 0, "N", "sequences generated at once (default 16)", &parallel)
      .option("ctx", 'c', "N", "context length per sequence (default: the model's, at most 8192)", &ctx)
      .option("kv-cache-mb", 0, "MB",
              "KV cache pool, committed at start (default: --parallel full contexts, at most 4096; it may hold "
              "fewer: requests then wait or are preempted)",
              &kv_cache_mb)
      .option("threads", 't', "N", "forward-pass threads (default: all cores)", &threads)
      .option("max-body", 0, "BYTES", "largest request body accepted (default 16777216)", &max_body)
      .option("name", 0, "NAME", "model name clients use (default: the model file's name without extension)", &name)
      .multi_option("alias", 0, "NAME", "another name the request's model field accepts (repeatable; 'default' "
                    "always works)", &aliases)
      .option("grace", 0, "SECONDS", "on SIGINT/SIGTERM, time running requests get to finish (default 10)", &grace)
      .option("grammar-tables", 0, "WHEN",
              "when a constraint's token tables are built: background (the default: on other threads during "
              "its prefill), compile (steadiest masks, slower first token) or first-use (in its mask fills)",
              &grammar_tables)
      .option("json-layout", 0, "LAYOUT",
              "response_format / format JSON: compact (default, no whitespace), flexible (bounded whitespace "
              "runs) or indented (one member per line)",
              &json_layout)
      .option("max-queue", 0, "N",
              "requests waiting for a sequence slot, at most; past it, 429 with Retry-After (default 4 x --parallel)",
              &max_queue)
      .option("grammar-cache-mb", 0, "MB",
              "grammar memory kept for reuse (compiled grammars and the token tables they share), in MiB at most "
              "(default 256)",
              &grammar_cache_mb)
      .option("http-threads", 0, "N",
              "connections served at once (default: 128, or 4 x --parallel when larger); /health and /metrics "
              "have a thread of their own",
              &http_threads)
      .flag("special-tokens-in-messages", 0,
            "read special-token text in messages and tools (\"<|im_end|>\") as control tokens; by default it is "
            "plain text, so a user cannot close their turn and open a system one",
            &special_tokens_in_messages)
      .option("keep-alive", 0, "DURATION",
              "how long a stored model stays loaded after its last request: seconds or a duration (\"5m\", "
              "\"1h\"); 0 unloads at once, negative never (default 5m)",
              &keep_alive)
      .option("max-loaded-models", 0, "N", "models loaded at once, MODEL included (default: no limit)", &max_loaded)
      .option("memory-budget", 0, "BYTES",
              "bytes of model files and KV pools loaded at once, MODEL included; a K, M or G suffix multiplies "
              "by 1024s (default: no limit)",
              &memory_budget)
      .flag("no-store", 0, "serve MODEL alone, not the model store's models", &no_store)
      .flag("quiet", 'q', "no per-request log lines", &quiet);
  SpeculativeFlags spec;
  spec.add_options(parser);
  LoraFlags lora;
  lora.add_options(parser);
  DeviceFlag device;
  device.add_options(parser);
  if (!parser.parse(args)) return 0;
  const std::vector<LoraSpec> lora_specs = lora.specs();

  pie::EngineOptions engine_options;
  if (parallel) engine_options.max_running = static_cast<std::int32_t>(parse_int(*parallel, "--parallel", 1, 4096));
  if (ctx) engine_options.context_length = static_cast<std::int32_t>(parse_int(*ctx, "--ctx", 16, 1 << 20));
  if (kv_cache_mb) engine_options.kv_cache_bytes = parse_int(*kv_cache_mb, "--kv-cache-mb", 1, 1 << 24) << 20;
  engine_options.grammar_tables = table_build_option(grammar_tables, "--grammar-tables");
  engine_options.kv_resident = true;  // a server's memory stays level as its prefix cache fills
  spec.apply(engine_options);
  device.apply(engine_options);
  if (threads) engine_options.n_threads = static_cast<std::int32_t>(parse_int(*threads, "--threads", 0, 1024));
  engine_options.max_queued = max_queue ? static_cast<std::int32_t>(parse_int(*max_queue, "--max-queue", 1, 1 << 20))
                                        : 4 * engine_options.max_running;
  // Grammar memory kept for reuse: half for compiled grammars, half for the token tables they share
  // (pse's process-wide table cache).
  const long long grammar_cache =
      grammar_cache_mb ? parse_int(*grammar_cache_mb, "--grammar-cache-mb", 0, 1 << 20) << 20 : 256LL << 20;
  engine_options.grammar_cache_bytes = grammar_cache / 2;
  pse::set_shared_table_cache_bytes(static_cast<std::size_t>(grammar_cache / 2));
  pie::ServerOptions options;
  if (host) options.host = *host;
  if (port) options.port = static_cast<int>(parse_int(*port, "--port", 0, 65535));
  if (api_key) {
    options.api_key = *api_key;
  } else if (const char* env = std::getenv("ORCHARD_API_KEY"); env != nullptr) {
    options.api_key = env;
  }
  if (max_body) options.max_body_bytes = static_cast<std::size_t>(parse_int(*max_body, "--max-body", 1024, 1LL << 34));
  if (name) options.model_name = *name;
  options.aliases = aliases;
  options.json_layout = json_layout_option(json_layout, "--json-layout", pse::JsonLayout::kCompact);
  if (grace) options.shutdown_grace_seconds = parse_double(*grace, "--grace");
  if (options.shutdown_grace_seconds < 0) throw UsageError("--grace must not be negative");
  options.special_tokens_in_messages = special_tokens_in_messages;
  if (http_threads) {
    options.http_threads = static_cast<std::int32_t>(parse_int(*http_threads, "--http-threads", 1, 4096));
  }
  options.log_requests = !quiet;
  if (!no_store) options.store_root = pie::ModelStore::default_root().string();
  if (keep_alive) {
    try {
      options.keep_alive_seconds = pie::Server::parse_keep_alive(*keep_alive);
    } catch (const std::exception& e) {
      throw UsageError(fmt::format("--keep-alive: {}", e.what()));
    }
  }
  if (max_loaded) {
    options.max_loaded_models = static_cast<std::size_t>(parse_int(*max_loaded, "--max-loaded-models", 1, 1 << 16));
  }
  if (memory_budget) {
    std::string text = *memory_budget;
    long long scale = 1;
    if (!text.empty() && (text.back() == 'K' || text.back() == 'M' || text.back() == 'G')) {
      scale = text.back() == 'K' ? 1LL << 10 : text.back() == 'M' ? 1LL << 20 : 1LL << 30;
      text.pop_back();
    }
    options.memory_budget_bytes =
        static_cast<std::uint64_t>(parse_int(text, "--memory-budget", 1, (1LL << 50) / scale) * scale);
  }
#ifdef ORCHARD_VERSION
  options.version = ORCHARD_VERSION;
#endif

  // SIGINT/SIGTERM are taken by one thread (sigwait) rather than a handler, so stopping runs as ordinary
  // code; they are blocked before any other thread starts so that every thread inherits the mask. A write
  // to a client that went away must be an error, not SIGPIPE.
  std::signal(SIGPIPE, SIG_IGN);
  // A request's large buffers (a body up to --max-body, a long prompt's) go back to the system when freed:
  // glibc would otherwise raise its mmap threshold after the first one and keep them in a thread's arena.
  mallopt(M_MMAP_THRESHOLD, 256 << 10);
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  std::shared_ptr<pie::Engine> engine;
  const std::int32_t embed_threads = engine_options.n_threads;
  if (model_path && pie::is_embedding_model_path(*model_path)) {
    // An embedding model (BERT) alone: the embedding routes answer, the generation routes refuse (400).
    if (!lora_specs.empty()) throw UsageError("--lora needs a generative model; MODEL is an embedding model");
    auto embedder = std::make_shared<pie::Embedder>(pie::load_embedding_model(*model_path), embed_threads);
    options.embedder = [embedder] { return embedder; };
  } else {
    pie::OpenedModel opened = pie::open_model(model_path);
    // A stored model is served under its store name; a file under the name the server derives from it.
    if (!name) options.model_name = opened.store_name;
    options.engine_options = engine_options;
    // The draft model drafts for MODEL alone: the store's other models may have other vocabularies.
    options.engine_options->draft_model.reset();
    if (engine_options.speculative.mode == pie::DraftMode::draft) options.engine_options->speculative = {};
    engine = std::make_shared<pie::Engine>(opened.model, engine_options);
    if (!quiet) {
      std::fprintf(stderr, "orchard serve: KV pool of %.0f MiB committed (%d sequences of %d tokens)\n",
                   static_cast<double>(engine->options().kv_cache_bytes) / (1 << 20), engine->options().max_running,
                   engine->options().context_length);
    }
    // Adapters are selected per request (`model` naming one, or `lora`); an explicit :SCALE also makes it a
    // default for requests that select none.
    for (const LoraSpec& s : lora_specs) {
      engine->attach_lora(s.name, s.path);
      if (s.scale_given) options.lora_scales.emplace_back(s.name, s.scale);
    }
    // Its embeddings (last hidden state), made on the first embedding request.
    options.embedder = [model = opened.model, embed_threads] {
      return std::make_shared<pie::Embedder>(pie::embedding_model_from_decoder(model), embed_threads);
    };
  }
  if (!quiet) log_device(engine->device(), engine_options.device);
  pie::Server server(engine, options);
  int bound = server.bind();
  std::printf("listening on http://%s:%d (model %s)\n", options.host.c_str(), bound, server.model_name().c_str());
  std::fflush(stdout);

  std::atomic<bool> exiting{false};
  std::thread watcher([&server, &exiting, stop_signals] {
    int signal = 0;
    sigwait(&stop_signals, &signal);
    if (exiting) return;  // woken by the exit path below
    std::fprintf(stderr, "orchard serve: %s: stopping\n", signal == SIGINT ? "SIGINT" : "SIGTERM");
    server.stop();
  });
  server.serve();
  // serve() returned without a signal only on a listen failure; wake the watcher so it can be joined.
  exiting = true;
  pthread_kill(watcher.native_handle(), SIGTERM);
  watcher.join();
  if (engine) engine->shutdown(/*cancel_running=*/true);
  return 0;
}

}  // namespace orchard::cli
