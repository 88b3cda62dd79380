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
#include "commands.h"
#include "grammar_source.h"
#include "pie/engine.h"
#include "pse/error.h"
#include "read_input.h"
#include "tokenizers/error.h"

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
  int parallel = 1;      // concurrent requests (seeds seed, seed + 1, ...)
  bool no_bos = false;
  bool json_stats = false;
};

int generate(const std::optional<std::string>& model_path, const GrammarSource& grammar,
             const std::optional<std::string>& prompt_text, const std::optional<std::string>& prompt_file,
             const pie::GenerateRequest& base, const RunSettings& settings) {
  const auto t_load = std::chrono::steady_clock::now();
  std::shared_ptr<const pie::Model> model = model_path ? pie::load_model(*model_path) : pie::random_model();
  const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_load).count();

  pie::GenerateRequest request = base;
  const std::string text = prompt_file ? read_input(*prompt_file) : prompt_text.value_or("");
  const auto& tokenizer = *model->tokenizer;
  request.prompt = tokenizer.encode(text, {.add_bos = !settings.no_bos});
  if (request.prompt.empty()) throw UsageError("the prompt is empty (give -p or -f, or drop --no-bos)");
  if (grammar.given()) request.grammar = grammar.load();

  pie::EngineOptions options;
  options.n_threads = settings.n_threads;
  options.max_running = settings.parallel;
  pie::Engine engine(model, options);
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
  const double total_s = std::chrono::duration<double>(t1 - t0).count();
  const double compile_s = std::chrono::duration<double>(t_submitted - t0).count();
  const double gen_s = first ? std::chrono::duration<double>(t1 - *first).count() : 0.0;
  const pie::EngineStats st = engine.stats();
  // Tokens after the first over the time since it: the decode rate, without grammar compile and prefill.
  const double rate = usage.completion_tokens > 1 && gen_s > 0 ? (usage.completion_tokens - 1) / gen_s : 0.0;
  bool failed = false;
  std::string reasons;
  for (pie::FinishReason f : finish) {
    failed = failed || f == pie::FinishReason::error;
    if (!reasons.empty()) reasons += ',';
    reasons += pie::finish_reason_name(f);
  }
  if (settings.json_stats) {
    std::fprintf(stderr,
                 "{\"requests\": %zu, \"completion_tokens\": %d, \"forced_tokens\": %llu, \"prompt_tokens\": %d, "
                 "\"seconds\": %.6f, \"decode_seconds\": %.6f, \"submit_seconds\": %.6f, \"tokens_per_second\": %.3f, "
                 "\"steps\": %llu, \"forward_seconds\": %.6f, \"mask_seconds\": %.6f, \"finish\": \"%s\"}\n",
                 streams.size(), usage.completion_tokens, static_cast<unsigned long long>(st.forced_tokens),
                 usage.prompt_tokens, total_s, gen_s, compile_s, rate, static_cast<unsigned long long>(st.steps),
                 st.forward_seconds, st.mask_seconds, reasons.c_str());
  } else {
    std::fprintf(stderr,
                 "orchard run: %d tokens (%llu forced) in %.2f s, %.1f tokens/s; prompt %d tokens; finish %s; "
                 "model %s (loaded in %.2f s)\n",
                 usage.completion_tokens, static_cast<unsigned long long>(st.forced_tokens), total_s, rate,
                 usage.prompt_tokens, reasons.c_str(), model->name.c_str(), load_s);
  }
  if (failed) {
    std::fprintf(stderr, "orchard run: generation failed: %s\n", error.c_str());
    return 1;
  }
  return 0;
}

}  // namespace

int run_run(std::span<const std::string> args) {
  std::optional<std::string> model_path, prompt, prompt_file, n_tokens, temp, top_k, top_p, seed, threads, parallel;
  bool no_bos = false, ignore_eos = false, json_stats = false;
  GrammarSource grammar;
  ArgParser parser(
      fmt::format("orchard run [-m MODEL] [{}] [-p PROMPT | -f FILE] [-n N] [--temp T] [--top-k K] "
                  "[--top-p P] [--seed S] [--threads N] [--parallel N] [--no-bos] [--ignore-eos] [--json-stats]",
                  kGrammarSynopsis),
      "Generates text from the prompt and streams it to standard output; a summary line (tokens,\n"
      "tokens/s, finish reason) goes to standard error. With a grammar, the output always fits it:\n"
      "at every step only the tokens that keep it valid may be sampled, and text the grammar fixes\n"
      "is appended without sampling.\n\n"
      "MODEL is anything the engine loads: a .gguf file, a Hugging Face folder (config.json,\n"
      "*.safetensors, tokenizer.json) or a llama2.c checkpoint (.bin, tokenizer beside it). Without -m,\n"
      "the embedded default model runs: a small Llama with RANDOM weights (it writes no language, but\n"
      "constrained output from it is always valid), so everything works without a model file.\n\n"
      "Exit status: 0 success; 1 a model that cannot be loaded, a bad prompt or grammar, or a failed\n"
      "generation; 2 bad arguments.\n\n"
      "example: orchard run --schema examples/person.schema.json -p 'A person as JSON:' --seed 1");
  parser.option("model", 'm', "MODEL", "model file or folder (default: the embedded random-weight model)", &model_path)
      .option("prompt", 'p', "PROMPT", "the prompt text (default: empty, the output starts after BOS)", &prompt)
      .option("file", 'f', "FILE", "read the prompt from FILE ('-' for standard input)", &prompt_file)
      .option("n-predict", 'n', "N", "generate at most N tokens (default 256)", &n_tokens)
      .option("temp", 0, "T", "temperature, 0 for greedy (default 0.8)", &temp)
      .option("top-k", 0, "K", "sample from the K most likely tokens (default 40; 0 off)", &top_k)
      .option("top-p", 0, "P", "nucleus sampling threshold in (0, 1] (default 0.95)", &top_p)
      .option("seed", 0, "S", "random seed (default: a fresh one)", &seed)
      .option("threads", 't', "N", "forward-pass threads (default: all cores)", &threads)
      .flag("no-bos", 0, "do not prepend the beginning-of-sequence token", &no_bos)
      .option("parallel", 0, "N",
              "run N requests at once (seeds S .. S+N-1), printed one per line when done (default 1)", &parallel)
      .flag("ignore-eos", 0, "keep generating past end-of-sequence tokens (unconstrained only)", &ignore_eos)
      .flag("json-stats", 0, "write the summary to standard error as one JSON object (for benchmarks)", &json_stats);
  grammar.add_options(parser);
  if (!parser.parse(args)) return 0;
  if (prompt && prompt_file) throw UsageError("give -p PROMPT or -f FILE, not both");
  if (grammar.given()) {
    const int n = (grammar.gbnf ? 1 : 0) + (grammar.lark ? 1 : 0) + (grammar.regex ? 1 : 0) + (grammar.schema ? 1 : 0);
    if (n != 1) throw UsageError(fmt::format("give at most one grammar: {}", kGrammarSynopsis));
  } else if (grammar.json_layout || grammar.strict_keywords || grammar.any_order) {
    throw UsageError("--json-layout, --strict-keywords and --any-order need --schema");
  }

  pie::GenerateRequest request;
  request.max_tokens = static_cast<std::int32_t>(n_tokens ? parse_int(*n_tokens, "-n", 1, 1 << 20) : 256);
  request.sampling.temperature = static_cast<float>(temp ? parse_double(*temp, "--temp") : 0.8);
  request.sampling.top_k = static_cast<std::int32_t>(top_k ? parse_int(*top_k, "--top-k", 0, 1 << 24) : 40);
  request.sampling.top_p = static_cast<float>(top_p ? parse_double(*top_p, "--top-p") : 0.95);
  if (seed) request.sampling.seed = static_cast<std::uint64_t>(parse_int(*seed, "--seed", 0, (1LL << 62)));
  request.ignore_eos = ignore_eos;
  RunSettings settings;
  settings.n_threads = threads ? static_cast<int>(parse_int(*threads, "--threads", 1, 1024)) : 0;
  settings.parallel = parallel ? static_cast<int>(parse_int(*parallel, "--parallel", 1, 256)) : 1;
  settings.no_bos = no_bos;
  settings.json_stats = json_stats;

  // Model, prompt, grammar and request errors: one line, exit status 1 (usage errors go to main: 2).
  try {
    return generate(model_path, grammar, prompt, prompt_file, request, settings);
  } catch (const UsageError&) {
    throw;
  } catch (const pie::Error& e) {
    std::fprintf(stderr, "orchard run: %s\n", e.what());
  } catch (const pse::Error& e) {
    std::fprintf(stderr, "orchard run: %s\n", e.what());
  } catch (const tokenizers::Error& e) {
    std::fprintf(stderr, "orchard run: %s\n", e.what());
  } catch (const std::runtime_error& e) {
    std::fprintf(stderr, "orchard run: %s\n", e.what());
  }
  return 1;
}

}  // namespace orchard::cli
