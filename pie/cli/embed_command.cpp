// `orchard embed`: one embedding per input line, printed as a JSON array per line.
#include <fmt/format.h>

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "arg_parser.h"
#include "commands.h"
#include "model_option.h"
#include "pie/embedding.h"
#include "pie/error.h"
#include "read_input.h"

namespace orchard::cli {
namespace {

constexpr std::size_t kBatch =
    64;  // lines per Embedder call: one forward pass each for short lines

void write_vector(const std::vector<float>& v) {
  std::string out = "[";
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i != 0) out += ',';
    fmt::format_to(std::back_inserter(out), "{}",
                   v[i]);  // shortest text that reads back the same float
  }
  out += "]\n";
  if (std::fwrite(out.data(), 1, out.size(), stdout) != out.size()) {
    throw std::runtime_error("cannot write to standard output");
  }
}

}  // namespace

int run_embed(std::span<const std::string> args) {
  std::optional<std::string> model_path, input, pooling, dimensions, threads;
  bool truncate = false;
  bool no_normalize = false;
  ArgParser parser(
      "orchard embed -m MODEL [--pooling mean|cls|last] [--dimensions N] [--truncate] [FILE|-]",
      "Embeds each non-empty line of FILE (standard input when FILE is '-' or absent) and prints "
      "one JSON\n"
      "array of floats per input line, in order. MODEL is an embedding model (a BERT Hugging Face "
      "folder or\n"
      "GGUF, e.g. all-MiniLM-L6-v2) or a generative model used as an embedder (its last hidden "
      "state).\n\n"
      "Exit status: 0 success; 2 bad arguments, a model that cannot be loaded, or a bad line "
      "(empty\n"
      "after reading, invalid UTF-8, longer than the model's context without --truncate).\n\n"
      "example: printf 'hello\\nworld\\n' | orchard embed -m all-MiniLM-L6-v2/");
  parser.option("model", 'm', "MODEL", std::string(kModelOptionHelp), &model_path)
      .option("pooling", 0, "MODE", "mean, cls or last (default: the model's own)", &pooling)
      .option("dimensions", 0, "N",
              "keep the first N values (renormalized when the model normalizes)", &dimensions)
      .flag("truncate", 0, "cut lines longer than the model's context instead of failing",
            &truncate)
      .flag("no-normalize", 0, "leave the vectors unnormalized (default: the model's own)",
            &no_normalize)
      .option("threads", 't', "N", "threads (default: all cores)", &threads)
      .positional("FILE", "one text per line; '-' or absent for standard input", false, &input);
  if (!parser.parse(args)) return 0;
  if (!model_path) throw UsageError("missing option --model/-m MODEL");

  pie::EmbeddingLoadOptions load;
  if (pooling) {
    try {
      load.pooling = pie::pooling_from_name(*pooling);
    } catch (const pie::RequestError& e) {
      throw UsageError(fmt::format("--pooling: {}", e.what()));
    }
  }
  if (no_normalize) load.normalize = false;
  pie::EmbedOptions options;
  options.truncate = truncate;
  if (dimensions)
    options.dimensions =
        static_cast<std::int32_t>(parse_int(*dimensions, "--dimensions", 1, 1 << 20));
  const int n_threads = threads ? static_cast<int>(parse_int(*threads, "--threads", 1, 1024)) : 0;

  const std::string text = read_input(input);
  pie::Embedder embedder(pie::open_embedding_model(*model_path, load), n_threads);
  if (options.dimensions > embedder.model().n_dims) {
    throw UsageError(fmt::format("--dimensions {} is more than the model's {}", options.dimensions,
                                 embedder.model().n_dims));
  }
  std::vector<std::string> batch;
  auto flush = [&] {
    if (batch.empty()) return;
    for (const std::vector<float>& v : embedder.embed(batch, options).embeddings) write_vector(v);
    batch.clear();
  };
  std::size_t at = 0;
  while (at < text.size()) {
    std::size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(at, end - at);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty()) batch.push_back(std::move(line));
    if (batch.size() == kBatch) flush();
    at = end + 1;
  }
  flush();
  if (std::fflush(stdout) != 0) throw std::runtime_error("cannot write to standard output");
  return 0;
}

}  // namespace orchard::cli
