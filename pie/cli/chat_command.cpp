// `orchard chat`: a conversation with a model in the terminal, as `ollama run` and `llama-cli -cnv` give:
// the model's own chat template, streamed answers, the history kept (its KV pages reused through the
// prefix cache), commands (/reset, /system, /schema, /bye), Ctrl-C to stop an answer and Ctrl-D to leave.
// With standard input not a terminal, each line is one user message and gets one answer.
#include <fmt/format.h>
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <thread>

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

namespace orchard::cli {

namespace {

using Json = nlohmann::ordered_json;

constexpr const char* kCommandsHelp =
    "commands:\n"
    "  /system [TEXT]   set the system message and start over (no TEXT: show it)\n"
    "  /schema FILE     answers are JSON valid under this JSON Schema (/schema off: free text again)\n"
    "  /reset           forget the conversation\n"
    "  /bye             leave (as does Ctrl-D); Ctrl-C stops an answer\n";

void write_out(std::string_view text) {
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
}

// What the answer printed beyond its text: the tool calls, one JSON line each.
void print_calls(const pie::ChatReply& reply) {
  for (const Json& call : reply.tool_calls) {
    Json line{{"name", call["function"]["name"]}};
    try {
      line["arguments"] = Json::parse(call["function"]["arguments"].get<std::string>());
    } catch (const Json::parse_error&) {
      line["arguments"] = call["function"]["arguments"];
    }
    write_out(line.dump() + "\n");
  }
}

class Chat {
 public:
  Chat(std::shared_ptr<pie::Engine> engine, Json fields, bool interactive)
      : session_(std::move(engine)), fields_(std::move(fields)), interactive_(interactive) {}

  pie::ChatSession& session() { return session_; }
  bool generating() const { return generating_; }

  // One line of input: a command or a message. Returns false to leave. Errors of a turn are printed; they
  // end a non-interactive chat with status 2 (exit_status()).
  bool handle(const std::string& line) {
    if (line.empty()) return true;
    if (line[0] == '/') return command(line);
    generating_ = true;
    try {
      const pie::ChatReply reply = session_.send(line, fields_, write_out);
      generating_ = false;
      if (!reply.content.empty() || reply.tool_calls.empty()) write_out("\n");
      print_calls(reply);
      if (reply.finish_reason == "error") return fail(fmt::format("the answer failed: {}", reply.error));
      if (reply.finish_reason == "length") std::fputs("(the answer reached its token limit)\n", stderr);
      if (reply.finish_reason == "cancelled") std::fputs("(stopped)\n", stderr);
    } catch (const std::exception& e) {
      generating_ = false;
      return fail(e.what());
    }
    return true;
  }

  int exit_status() const { return status_; }

 private:
  bool fail(const std::string& message) {
    std::fprintf(stderr, "orchard chat: %s\n", message.c_str());
    if (interactive_) return true;
    status_ = 2;
    return false;
  }

  bool command(const std::string& line) {
    const std::size_t space = line.find(' ');
    const std::string name = line.substr(0, space);
    const std::string arg = space == std::string::npos ? "" : line.substr(line.find_first_not_of(' ', space));
    if (name == "/bye" || name == "/exit") return false;
    if (name == "/reset") {
      session_.reset();
      note("(the conversation starts over)");
    } else if (name == "/system") {
      if (arg.empty()) {
        note(session_.system().empty() ? "(no system message)" : session_.system());
      } else {
        session_.set_system(arg);
        session_.reset();
        note("(system message set; the conversation starts over)");
      }
    } else if (name == "/schema") {
      fields_.erase("response_format");
      if (arg.empty()) return fail("/schema needs a file (or 'off')");
      if (arg != "off") {
        try {
          GrammarSource source;
          source.schema = arg;
          fields_.update(constraint_fields(source));
        } catch (const std::exception& e) {
          return fail(e.what());
        }
      }
      note(arg == "off" ? "(answers are free text)" : "(answers follow " + arg + ")");
    } else if (name == "/help" || name == "/?") {
      note(kCommandsHelp);
    } else {
      return fail(fmt::format("unknown command '{}' (/help lists them)", name));
    }
    return true;
  }

  void note(const std::string& text) const {
    if (interactive_) std::fprintf(stderr, "%s\n", text.c_str());
  }

  pie::ChatSession session_;
  Json fields_;
  bool interactive_;
  std::atomic<bool> generating_{false};
  int status_ = 0;
};

}  // namespace

int run_chat(std::span<const std::string> args) {
  std::optional<std::string> model_path, n_tokens, threads, ctx;
  SamplingFlags sampling_flags;
  GrammarSource grammar;
  ChatOptions chat_options;
  ArgParser parser(
      fmt::format("orchard chat [-m MODEL] [{}] [--system TEXT] [--tools FILE [--tool-choice C]] [-n N]\n"
                  "             {} [--threads N] [--ctx N]",
                  kGrammarSynopsis, kSamplingSynopsis),
      "A conversation with the model in the terminal: type a message, read the answer as it streams.\n"
      "The model's own chat template formats the conversation, exactly as `orchard serve` does; the\n"
      "history is kept. With a grammar or --schema, every answer fits it; with --tools, the model may\n"
      "call them (each call printed as one JSON line).\n\n"
      "Ctrl-C stops an answer; Ctrl-D or /bye leaves. /help lists the commands (/reset, /system,\n"
      "/schema). With standard input not a terminal, each line is one message and gets one answer.\n\n"
      "Exit status: 0 success; 2 bad arguments, a model that cannot be found or loaded, or (input not\n"
      "a terminal) a message that fails.\n\n"
      "example: orchard chat --system 'Answer in one sentence.'");
  parser.option("model", 'm', "MODEL", kModelOptionHelp, &model_path)
      .option("n-predict", 'n', "N", "at most N tokens per answer (default: the rest of the context)", &n_tokens)
      .option("threads", 't', "N", "forward-pass threads (default: all cores)", &threads)
      .option("ctx", 'c', "N", "context length (default: the model's, at most 8192)", &ctx);
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
  (void)lora.specs();  // a malformed --lora is a usage error before the model loads

  pie::EngineOptions engine_options;
  engine_options.max_running = 1;
  spec.apply(engine_options);
  device.apply(engine_options);
  if (threads) engine_options.n_threads = static_cast<std::int32_t>(parse_int(*threads, "--threads", 1, 1024));
  if (ctx) engine_options.context_length = static_cast<std::int32_t>(parse_int(*ctx, "--ctx", 16, 1 << 20));

  const bool interactive = isatty(STDIN_FILENO) != 0;
  // Ctrl-C is taken by one thread (sigwait) so that it can cancel an answer without killing the process;
  // blocked before the engine's threads start so every thread inherits the mask.
  sigset_t interrupt;
  sigemptyset(&interrupt);
  sigaddset(&interrupt, SIGINT);
  if (interactive) pthread_sigmask(SIG_BLOCK, &interrupt, nullptr);

  pie::OpenedModel opened = pie::open_model(model_path);
  Json sampling = sampling_flags.fields();
  if (n_tokens) sampling["max_tokens"] = parse_int(*n_tokens, "-n", 1, 1 << 20);
  Json fields = chat_options.fields(sampling, grammar);
  // A stored model's Modelfile parameters fill what the command line left out.
  std::vector<std::string> given = sampling_flags.given();
  if (n_tokens) given.emplace_back("max_tokens");
  const nlohmann::json defaults = stored_sampling(opened, given);
  for (auto it = defaults.begin(); it != defaults.end(); ++it) fields[it.key()] = *it;
  add_stored_adapters(lora, opened);
  auto engine = std::make_shared<pie::Engine>(opened.model, engine_options);
  if (const auto loras = lora.attach(*engine); !loras.empty()) fields["lora"] = LoraFlags::field(loras);
  log_device(engine->device(), engine_options.device);
  Chat chat(engine, std::move(fields), interactive);
  if (auto system = system_prompt(chat_options.system, opened)) chat.session().set_system(*system);

  std::atomic<bool> leaving{false};
  std::thread watcher;
  if (interactive) {
    std::fprintf(stderr, "orchard chat: %s. /help for commands, Ctrl-D or /bye to leave.\n",
                 opened.store_name.empty() ? opened.model->name.c_str() : opened.store_name.c_str());
    watcher = std::thread([&chat, &leaving, interrupt] {
      while (true) {
        int signal = 0;
        sigwait(&interrupt, &signal);
        if (leaving) return;
        if (chat.generating()) {
          chat.session().cancel();
        } else {
          std::fputs("\n(Ctrl-D or /bye to leave)\n>>> ", stdout);
          std::fflush(stdout);
        }
      }
    });
  }
  std::string line;
  while (true) {
    if (interactive) write_out(">>> ");
    if (!std::getline(std::cin, line)) {
      if (interactive) write_out("\n");
      break;
    }
    if (!chat.handle(line)) break;
  }
  if (watcher.joinable()) {
    leaving = true;
    pthread_kill(watcher.native_handle(), SIGINT);
    watcher.join();
  }
  return chat.exit_status();
}

}  // namespace orchard::cli
