// `orchard`: one binary, one subcommand per concern. See `orchard --help`.
#include <fmt/format.h>

#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "arg_parser.h"
#include "commands.h"

namespace {

using orchard::cli::Command;

constexpr Command kCommands[] = {
    {"tokenize", "text -> token ids with a model's tokenizer", orchard::cli::run_tokenize},
    {"detokenize", "token ids -> text (raw bytes) with a model's tokenizer",
     orchard::cli::run_detokenize},
    {"bench", "benchmarks: `bench kernels` rates CPU kernels against this machine's limits",
     orchard::cli::run_bench},
    {"grammar", "grammars: compile, check a text, list allowed tokens, benchmark masks",
     orchard::cli::run_grammar},
    {"run", "generate text from a prompt, optionally constrained by a schema or grammar", orchard::cli::run_run},
    {"chat", "a conversation with a model in the terminal (its chat template, history, streaming)",
     orchard::cli::run_chat},
    {"serve", "OpenAI- and Ollama-compatible HTTP server", orchard::cli::run_serve},
    {"embed", "one embedding vector per input line (BERT encoders, or a generative model's hidden state)",
     orchard::cli::run_embed},
    {"convert", "any model (GGUF, Hugging Face, llama2.c) -> GGUF, optionally quantized", orchard::cli::run_convert},
    {"lora", "LoRA adapters: merge them into a base model", orchard::cli::run_lora},
    {"perplexity", "a model's perplexity over a text file, computed as llama.cpp's llama-perplexity does",
     orchard::cli::run_perplexity},
    {"pull", "a GGUF file or an http(s) URL to one into the model store (resumable)", orchard::cli::run_pull},
    {"create", "a stored model from a Modelfile (FROM, PARAMETER, TEMPLATE, SYSTEM, ...)", orchard::cli::run_create},
    {"list", "the stored models (name, ID, size, modified)", orchard::cli::run_list},
    {"show", "a stored model's details (family, parameters, quantization, context, template)",
     orchard::cli::run_show},
    {"cp", "another name for a stored model", orchard::cli::run_cp},
    {"rm", "remove stored models (and files no other name uses)", orchard::cli::run_rm},
    {"ps", "the models a running server has loaded", orchard::cli::run_ps},
};

void print_help() {
  std::string out =
      "usage: orchard <command> [options]\n\n"
      "Orchard: structured-generation-first LLM inference. Output that always fits the user's\n"
      "JSON Schema, grammar or regex.\n\ncommands:\n";
  for (const Command& c : kCommands) out += fmt::format("  {:<12} {}\n", c.name, c.summary);
  out += "\n`orchard <command> --help` describes a command. Exit status: 0 success, 1 a negative\n"
         "answer (such as input rejected by a grammar), 2 bad arguments or bad input.\n";
  std::fputs(out.c_str(), stdout);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    print_help();
    return args.empty() ? 2 : 0;
  }
  if (args[0] == "--version") {
    std::puts("orchard " ORCHARD_VERSION);
    return 0;
  }
  for (const Command& c : kCommands) {
    if (args[0] != c.name) continue;
    try {
      return c.run(std::span<const std::string>(args).subspan(1));
    } catch (const orchard::cli::UsageError& e) {
      std::fprintf(stderr, "orchard %s: %s (see 'orchard %s --help')\n", c.name, e.what(), c.name);
      return 2;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "orchard %s: %s\n", c.name, e.what());
      return 2;
    }
  }
  std::fprintf(stderr, "orchard: unknown command '%s' (see 'orchard --help')\n", args[0].c_str());
  return 2;
}
