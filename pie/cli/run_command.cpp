// `orchard run`: generate from a prompt with a model (or the embedded default model), optionally
// constrained by a JSON Schema, GBNF, Lark grammar or regex, streaming the text to stdout as it comes.
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "arg_parser.h"
#include "chat_options.h"
#include "commands.h"
#include "grammar_source.h"
#include "model_option.h"
#include "lora_flags.h"
#include "device_flag.h"
#include "sampling_flags.h"
#include "speculative_flags.h"
#include "stored_defaults.h"
#include "pie/chat_session.h"
#include "pie/engine.h"
#include "pie/model_store.h"
#include "read_input.h"

namespace orchard::cli {

namespace {

void write_out(const std::string& text) {
  if (text.empty()) return;
  if (std::fwrite(text.data(), 1, text.size(), stdout) != text.size() || std::fflush(stdout) != 0) {
    throw std::runtime_error("cannot write to standard output");
  }
}

struct RunSettings {
  int n_threads = 0;
  DeviceFlag device;
  int parallel = 1;             // concurrent requests (seeds seed, seed + 1, ...)
  std::optional<bool> add_bos;  // --bos / --no-bos; nullopt: as the model's metadata says
  bool json_stats = false;
  SpeculativeFlags speculative;
  LoraFlags lora;

  // The engine's options for max_running requests at once (the draft model loaded with --spec draft=MODEL).
  pie::EngineOptions engine_options(std::int32_t max_running) const {
    pie::EngineOptions options;
    device.apply(options);
    options.n_threads = n_threads;
    speculative.apply(options);
    options.max_running = max_running;
    return options;
  }
};

struct RunSummary {
  std::size_t requests = 1;
  pie::Usage usage;
  double total_s = 0, submit_s = 0, decode_s = 0, load_s = 0;  // decode: since the first token
  std::string finish;                                          // finish reasons, comma-separated
};

// The summary line on standard error (one JSON object with --json-stats, for benchmarks).
void print_summary(const RunSummary& r, const pie::EngineStats& st, const std::string& model_name, bool json) {
  // Tokens after the first over the time since it: the decode rate, without grammar compile and prefill.
  const double rate =
      r.usage.completion_tokens > 1 && r.decode_s > 0 ? (r.usage.completion_tokens - 1) / r.decode_s : 0.0;
  if (json) {
    std::fprintf(stderr,
                 "{\"requests\": %zu, \"completion_tokens\": %d, \"forced_tokens\": %llu, \"prompt_tokens\": %d, "
                 "\"seconds\": %.6f, \"decode_seconds\": %.6f, \"submit_seconds\": %.6f, \"tokens_per_second\": %.3f, "
                 "\"steps\": %llu, \"forward_seconds\": %.6f, \"mask_seconds\": %.6f, \"draft_tokens\": %llu, "
                 "\"accepted_draft_tokens\": %llu, \"finish\": \"%s\"}\n",
                 r.requests, r.usage.completion_tokens, static_cast<unsigned long long>(st.forced_tokens),
                 r.usage.prompt_tokens, r.total_s, r.decode_s, r.submit_s, rate,
                 static_cast<unsigned long long>(st.steps), st.forward_seconds, st.mask_seconds,
                 static_cast<unsigned long long>(st.draft_tokens),
                 static_cast<unsigned long long>(st.accepted_draft_tokens), r.finish.c_str());
  } else {
    const std::string drafts =
        st.draft_tokens > 0 ? fmt::format("; drafts kept {} of {}", st.accepted_draft_tokens, st.draft_tokens) : "";
    std::fprintf(stderr,
                 "orchard run: %d tokens (%llu forced) in %.2f s, %.1f tokens/s; prompt %d tokens; finish %s%s; "
                 "model %s (loaded in %.2f s)\n",
                 r.usage.completion_tokens, static_cast<unsigned long long>(st.forced_tokens), r.total_s, rate,
                 r.usage.prompt_tokens, r.finish.c_str(), drafts.c_str(), model_name.c_str(), r.load_s);
  }
}

int generate(const std::shared_ptr<const pie::Model>& model, double load_s, const GrammarSource& grammar,
             const std::optional<std::string>& prompt_text, const std::optional<std::string>& prompt_file,
             const pie::GenerateRequest& base, const RunSettings& settings) {
  pie::GenerateRequest request = base;
  const std::string text = prompt_file ? read_input(*prompt_file) : prompt_text.value_or("");
  const auto& tokenizer = *model->tokenizer;
  request.prompt = tokenizer.encode(text, {.add_bos = settings.add_bos.value_or(tokenizer.add_bos_by_default())});
  if (request.prompt.empty()) {
    throw UsageError("the prompt is empty and the model adds no BOS token (give -p or -f, or --bos)");
  }
  if (grammar.given()) request.grammar = grammar.load();

  pie::Engine engine(model, settings.engine_options(settings.parallel));
  request.loras = settings.lora.attach(engine);
  log_device(engine.device(), settings.device.get());
  const auto t0 = std::chrono::steady_clock::now();
  // --parallel N: N requests at once, seeds seed .. seed + N - 1 (the grammar is compiled once: cached).
  std::vector<std::shared_ptr<pie::RequestStream>> streams;
  const std::uint64_t seed = base.sampling.seed ? *base.sampling.seed : std::random_device{}();
  for (int i = 0; i < settings.parallel; ++i) {
    pie::GenerateRequest r = request;
    r.sampling.seed = seed + static_cast<std::uint64_t>(i);
    streams.push_back(engine.submit(std::move(r)));
  }
  const auto t_submitted = std::chrono::steady_clock::now();
  std::optional<std::chrono::steady_clock::time_point> first;
  std::vector<pie::FinishReason> finish(streams.size(), pie::FinishReason::none);
  std::vector<std::string> texts(streams.size());
  std::string error;
  pie::Usage usage;
  for (std::size_t i = 0; i < streams.size(); ++i) {
    while (auto event = streams[i]->next()) {
      if (event->done) {
        usage.prompt_tokens += event->usage.prompt_tokens;
        usage.completion_tokens += event->usage.completion_tokens;
        break;
      }
      if (!event->tokens.empty() && (!first || event->time < *first)) first = event->time;
      // One request streams; several are printed one per line once done.
      if (streams.size() == 1) {
        write_out(event->text);
      } else {
        texts[i] += event->text;
      }
      if (event->finish != pie::FinishReason::none) {
        finish[i] = event->finish;
        if (!event->error.empty()) error = event->error;
      }
    }
    if (streams.size() > 1) write_out(texts[i] + "\n");
  }
  const auto t1 = std::chrono::steady_clock::now();
  if (streams.size() == 1) write_out("\n");
  RunSummary summary;
  summary.requests = streams.size();
  summary.usage = usage;
  summary.total_s = std::chrono::duration<double>(t1 - t0).count();
  summary.submit_s = std::chrono::duration<double>(t_submitted - t0).count();
  summary.decode_s = first ? std::chrono::duration<double>(t1 - *first).count() : 0.0;
  summary.load_s = load_s;
  bool failed = false;
  for (pie::FinishReason f : finish) {
    failed = failed || f == pie::FinishReason::error;
    if (!summary.finish.empty()) summary.finish += ',';
    summary.finish += pie::finish_reason_name(f);
  }
  print_summary(summary, engine.stats(), model->name, settings.json_stats);
  if (failed) {
    std::fprintf(stderr, "orchard run: generation failed: %s\n", error.c_str());
    return 1;
  }
  return 0;
}

// --chat: the prompt as one user message through the model's chat template (the server's request path).
int generate_chat(const std::shared_ptr<const pie::Model>& model, double load_s, const std::string& prompt,
                  const nlohmann::ordered_json& fields, const std::optional<std::string>& system,
                  const RunSettings& settings) {
  auto engine = std::make_shared<pie::Engine>(model, settings.engine_options(1));
  nlohmann::ordered_json request_fields = fields;
  if (const auto loras = settings.lora.attach(*engine); !loras.empty()) request_fields["lora"] = LoraFlags::field(loras);
  log_device(engine->device(), settings.device.get());
  pie::ChatSession session(engine);
  if (system) session.set_system(*system);
  const auto t0 = std::chrono::steady_clock::now();
  const pie::ChatReply reply = session.send(prompt, request_fields, [](std::string_view text) { write_out(std::string(text)); });
  const auto t1 = std::chrono::steady_clock::now();
  if (!reply.content.empty() || reply.tool_calls.empty()) write_out("\n");
  for (const nlohmann::ordered_json& call : reply.tool_calls) {
    nlohmann::ordered_json line{{"name", call["function"]["name"]}};
    line["arguments"] = nlohmann::ordered_json::parse(call["function"]["arguments"].get<std::string>(), nullptr,
                                                      /*allow_exceptions=*/false);
    if (line["arguments"].is_discarded()) line["arguments"] = call["function"]["arguments"];
    write_out(line.dump() + "\n");
  }
  RunSummary summary;
  summary.usage = reply.usage;
  summary.total_s = std::chrono::duration<double>(t1 - t0).count();
  summary.decode_s = reply.first_token_time ? std::chrono::duration<double>(t1 - *reply.first_token_time).count() : 0;
  summary.load_s = load_s;
  summary.finish = reply.finish_reason;
  print_summary(summary, engine->stats(), model->name, settings.json_stats);
  if (reply.finish_reason == "error") {
    std::fprintf(stderr, "orchard run: generation failed: %s\n", reply.error.c_str());
    return 1;
  }
  return 0;
}

}  // namespace

int run_run(std::span<const std::string> args) {
  std::optional<std::string> model_path, prompt, prompt_file, n_tokens, threads, parallel;
  SamplingFlags sampling_flags;
  bool bos = false, no_bos = false, ignore_eos = false, json_stats = false, chat = false;
  GrammarSource grammar;
  grammar.default_layout = pse::JsonLayout::kCompact;
  ChatOptions chat_options;
  ArgParser parser(
      fmt::format("orchard run [-m MODEL] [{}] [-p PROMPT | -f FILE] [-n N]\n"
                  "       {}\n"
                  "       [--threads N] [--parallel N] [--bos | --no-bos] [--ignore-eos] [--json-stats]\n"
                  "       orchard run --chat [--system TEXT] [--tools FILE [--tool-choice C]] ... (the same options)",
                  kGrammarSynopsis, kSamplingSynopsis),
      "Generates text from the prompt and streams it to standard output; a summary line (tokens,\n"
      "tokens/s, finish reason) goes to standard error. With a grammar, the output always fits it:\n"
      "at every step only the tokens that keep it valid may be sampled, and text the grammar fixes\n"
      "is appended without sampling. The prompt is used as it is (no chat template); a BOS token is\n"
      "prepended when the model's metadata says so (--bos / --no-bos decide otherwise). With --chat, the\n"
      "prompt is one user message formatted by the model's chat template, exactly as `orchard serve`\n"
      "formats it; --tools lets the model call tools, each call printed as one JSON line.\n\n"
      "Without -m, the default model runs: SmolLM2-135M-Instruct, which scripts/fetch-models.sh puts\n"
      "in the model store ($ORCHARD_HOME/models, default ~/.cache/orchard/models). -m orchard-random\n"
      "runs the embedded model with RANDOM weights (no file; it writes no language, but constrained\n"
      "output from it is always valid).\n\n"
      "Exit status: 0 success; 1 a failed generation; 2 bad arguments, a model that cannot be found or\n"
      "loaded, or a bad prompt, grammar or request.\n\n"
      "example: orchard run --schema examples/person.schema.json -p 'A person as JSON:' --seed 1");
  parser.option("model", 'm', "MODEL", kModelOptionHelp, &model_path)
      .option("prompt", 'p', "PROMPT", "the prompt text (default: empty, the output starts after BOS)", &prompt)
      .option("file", 'f', "FILE", "read the prompt from FILE ('-' for standard input)", &prompt_file)
      .option("n-predict", 'n', "N", "generate at most N tokens (default 256)", &n_tokens)
      .option("threads", 't', "N", "forward-pass threads (default: all cores)", &threads)
      .flag("bos", 0, "prepend the beginning-of-sequence token (default: as the model's metadata says)", &bos)
      .flag("no-bos", 0, "do not prepend the beginning-of-sequence token", &no_bos)
      .option("parallel", 0, "N",
              "run N requests at once (seeds S .. S+N-1), printed one per line when done (default 1)", &parallel)
      .flag("ignore-eos", 0, "keep generating past end-of-sequence tokens (unconstrained only)", &ignore_eos)
      .flag("json-stats", 0, "write the summary to standard error as one JSON object (for benchmarks)", &json_stats)
      .flag("chat", 0, "format the prompt through the model's chat template, as one user message", &chat);
  sampling_flags.add_options(parser);
  grammar.add_options(parser);
  chat_options.add_options(parser);
  SpeculativeFlags spec;
  spec.add_options(parser);
  LoraFlags lora;
  lora.add_options(parser);
  DeviceFlag device;
  device.add_options(parser);
  if (!parser.parse(args)) return 0;
  if (prompt && prompt_file) throw UsageError("give -p PROMPT or -f FILE, not both");
  if (bos && no_bos) throw UsageError("give --bos or --no-bos, not both");
  if (!chat && (chat_options.system || chat_options.tools || chat_options.tool_choice || chat_options.one_call)) {
    throw UsageError("--system, --tools, --tool-choice and --one-call need --chat");
  }
  if (chat && (bos || no_bos || parallel || ignore_eos)) {
    throw UsageError("--bos, --no-bos, --parallel and --ignore-eos do not go with --chat (the template decides)");
  }
  if (grammar.given()) {
    const int n = (grammar.gbnf ? 1 : 0) + (grammar.lark ? 1 : 0) + (grammar.regex ? 1 : 0) + (grammar.schema ? 1 : 0);
    if (n != 1) throw UsageError(fmt::format("give at most one grammar: {}", kGrammarSynopsis));
  } else if (grammar.json_layout || grammar.strict_keywords || grammar.any_order) {
    throw UsageError("--json-layout, --strict-keywords and --any-order need --schema");
  }

  pie::GenerateRequest request;
  request.max_tokens = static_cast<std::int32_t>(n_tokens ? parse_int(*n_tokens, "-n", 1, 1 << 20) : 256);
  const nlohmann::ordered_json sampling = sampling_flags.fields();
  apply_sampling(nlohmann::json(sampling), request);
  request.ignore_eos = ignore_eos;
  RunSettings settings;
  settings.n_threads = threads ? static_cast<int>(parse_int(*threads, "--threads", 1, 1024)) : 0;
  settings.parallel = parallel ? static_cast<int>(parse_int(*parallel, "--parallel", 1, 256)) : 1;
  if (bos || no_bos) settings.add_bos = bos;
  settings.json_stats = json_stats;
  settings.speculative = spec;
  (void)spec.get();  // a malformed --spec is a usage error before the model loads
  settings.lora = lora;
  (void)lora.specs();  // a malformed --lora is a usage error before the model loads
  settings.device = device;
  (void)device.get(), (void)device.gpu_memory();  // a malformed --device or --gpu-memory: before the model loads

  // A model that cannot be found or loaded, a bad prompt, grammar or request: thrown to main, which
  // writes one line and exits with status 2. A generation that fails once running: status 1.
  std::optional<nlohmann::ordered_json> chat_fields;
  if (chat) {
    nlohmann::ordered_json chat_sampling = sampling;
    chat_sampling["max_tokens"] = request.max_tokens;
    chat_fields = chat_options.fields(chat_sampling, grammar);
  }
  const auto t_load = std::chrono::steady_clock::now();
  const pie::OpenedModel opened = pie::open_model(model_path);
  std::shared_ptr<const pie::Model> model = opened.model;
  const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_load).count();
  // A stored model's Modelfile parameters fill what the command line left out.
  std::vector<std::string> given = sampling_flags.given();
  if (n_tokens) given.emplace_back("max_tokens");
  const nlohmann::json defaults = stored_sampling(opened, given);
  add_stored_adapters(settings.lora, opened);
  if (chat) {
    for (auto it = defaults.begin(); it != defaults.end(); ++it) (*chat_fields)[it.key()] = *it;
    const std::string text = prompt_file ? read_input(*prompt_file) : prompt.value_or("");
    return generate_chat(model, load_s, text, *chat_fields, system_prompt(chat_options.system, opened), settings);
  }
  apply_sampling(defaults, request);
  return generate(model, load_s, grammar, prompt, prompt_file, request, settings);
}

}  // namespace orchard::cli
