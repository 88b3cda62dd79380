// `orchard tokenize`: text -> token ids with a model's tokenizer, printed on one line.
#include <fmt/format.h>

#include <cstdio>
#include <optional>
#include <string>

#include "arg_parser.h"
#include "commands.h"
#include "read_input.h"
#include "tokenizers/tokenizer.h"

namespace orchard::cli {

int run_tokenize(std::span<const std::string> args) {
  std::optional<std::string> tokenizer_path;
  std::optional<std::string> input;
  bool bos = false;
  bool eos = false;
  bool special = false;
  ArgParser parser(
      "orchard tokenize -t TOKENIZER [--bos] [--eos] [--special] [FILE|-]",
      "Encodes the text of FILE (standard input when FILE is '-' or absent) exactly as the model was\n"
      "trained, and prints the token ids space-separated on one line. The text is taken byte for byte,\n"
      "including any final newline (use `printf %s` rather than `echo` to leave it out); it must be\n"
      "valid UTF-8.\n\n"
      "TOKENIZER is a .gguf file (vocab-only or a full model), a Hugging Face tokenizer.json, a\n"
      "llama2.c tokenizer .bin, or a folder holding tokenizer.json or encoder.json + vocab.bpe (Llama 3).\n\n"
      "Exit status: 0 success; 2 bad arguments, an unreadable tokenizer or input, or input that is not\n"
      "valid UTF-8 (one line on stderr says which byte).\n\n"
      "example: printf 'Hello world' | orchard tokenize -t ggml-vocab-llama-spm.gguf --bos\n"
      "         1 15043 3186");
  parser.option("tokenizer", 't', "TOKENIZER", "tokenizer file or folder (required)", &tokenizer_path)
      .flag("bos", 0, "prepend the beginning-of-sequence token (when the tokenizer has one)", &bos)
      .flag("eos", 0, "append the end-of-sequence token (when the tokenizer has one)", &eos)
      .flag("special", 0,
            "parse special-token text such as <|eot_id|> into the special token; without it,\n"
            "                           such text is encoded as plain text",
            &special)
      .positional("FILE", "text to encode; '-' or absent for standard input", false, &input);
  if (!parser.parse(args)) return 0;
  if (!tokenizer_path) throw UsageError("missing option --tokenizer/-t TOKENIZER");

  const tokenizers::Tokenizer tokenizer = tokenizers::Tokenizer::load(*tokenizer_path);
  const std::string text = read_input(input);
  tokenizers::EncodeOptions options;
  options.add_bos = bos;
  options.add_eos = eos;
  options.parse_special = special;
  const std::vector<tokenizers::TokenId> ids = tokenizer.encode(text, options);

  std::string out;
  out.reserve(ids.size() * 7 + 1);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (i != 0) out += ' ';
    fmt::format_to(std::back_inserter(out), "{}", ids[i]);
  }
  out += '\n';
  if (std::fwrite(out.data(), 1, out.size(), stdout) != out.size() || std::fflush(stdout) != 0) {
    throw std::runtime_error("cannot write to standard output");
  }
  return 0;
}

}  // namespace orchard::cli
