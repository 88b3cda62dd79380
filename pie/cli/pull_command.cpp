// `orchard pull PATH|URL [--name NAME]`: a GGUF file into the model store, from a path or an
// http(s) URL (resumed where an interrupted pull of the same URL stopped).
#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <optional>
#include <string>

#include "arg_parser.h"
#include "commands.h"
#include "human_units.h"
#include "pie/model_pull.h"
#include "store_commands.h"

namespace orchard::cli {

int run_pull(std::span<const std::string> args) {
  std::optional<std::string> source, name;
  bool quiet = false;
  ArgParser parser(
      "orchard pull PATH|URL [--name NAME] [--quiet]",
      "Stores a GGUF model file in the model store under NAME (default: the file's name without "
      ".gguf,\n"
      "lower-cased, tag 'latest'). PATH is copied into a blob named by its sha256 (a file stored "
      "already\n"
      "is not copied again); an http:// or https:// URL is downloaded with progress on standard "
      "error into\n"
      "a partial file that a later pull of the same URL resumes (HTTP Range). Only a complete file "
      "is\n"
      "named: an interrupted pull leaves no model under the name.\n\n"
      "Exit status: 0 success; 2 bad arguments, a file that is not GGUF, an HTTP error, an "
      "interrupted\n"
      "download (pull again to resume), or a store that cannot be written (one line on stderr).\n\n"
      "example: orchard pull https://example.com/SmolLM2-135M-Instruct.Q4_1.gguf --name "
      "smollm2:135m");
  parser.option("name", 'n', "NAME", "the name to store it under (name[:tag])", &name)
      .flag("quiet", 'q', "no progress on standard error", &quiet)
      .positional("PATH|URL", "a .gguf file, or an http(s) URL to one", true, &source);
  if (!parser.parse(args)) return 0;
  const bool show = !quiet && ::isatty(STDERR_FILENO);
  auto last = std::chrono::steady_clock::now() - std::chrono::seconds(1);
  pie::PullProgress progress;
  progress.status = [&](const std::string& status) {
    if (!quiet) std::fprintf(stderr, "%s%s\n", show ? "\r\033[K" : "", status.c_str());
  };
  progress.bytes = [&](std::uint64_t done, std::uint64_t total) {
    const auto now = std::chrono::steady_clock::now();
    if (!show || (now - last < std::chrono::milliseconds(100) && done != total)) return;
    last = now;
    const std::string line =
        total == 0 ? human_bytes(done)
                   : fmt::format("{:3.0f}% {} / {}",
                                 100.0 * static_cast<double>(done) / static_cast<double>(total),
                                 human_bytes(done), human_bytes(total));
    std::fprintf(stderr, "\r\033[K%s", line.c_str());
  };
  const pie::StoredModel model =
      pie::pull_model(command_store(), *source, name.value_or(""), progress);
  std::printf("%s %s\n", model.name.str().c_str(), model.digest.c_str());
  return 0;
}

}  // namespace orchard::cli
