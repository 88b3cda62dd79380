// The `orchard` subcommands. Each lives in its own <name>_command.cpp, parses its own arguments with
// ArgParser, and returns the process exit status (0 ok; 1 a negative answer, e.g. input rejected; 2 bad
// input). Errors are thrown; main() turns them into one line on stderr and exit status 2.
#pragma once

#include <span>
#include <string>

namespace orchard::cli {

struct Command {
  const char* name;
  const char* summary;  // one line for `orchard --help`
  int (*run)(std::span<const std::string> args);
};

int run_tokenize(std::span<const std::string> args);
int run_detokenize(std::span<const std::string> args);
int run_bench(std::span<const std::string> args);
int run_grammar(std::span<const std::string> args);
int run_run(std::span<const std::string> args);
int run_chat(std::span<const std::string> args);
int run_serve(std::span<const std::string> args);
int run_convert(std::span<const std::string> args);
int run_lora(std::span<const std::string> args);
int run_perplexity(std::span<const std::string> args);
int run_pull(std::span<const std::string> args);
int run_create(std::span<const std::string> args);
int run_list(std::span<const std::string> args);
int run_show(std::span<const std::string> args);
int run_cp(std::span<const std::string> args);
int run_rm(std::span<const std::string> args);
int run_ps(std::span<const std::string> args);
int run_embed(std::span<const std::string> args);

}  // namespace orchard::cli
