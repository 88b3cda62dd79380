// `orchard detokenize`: token ids -> the raw bytes they stand for.
#include <fmt/format.h>

#include <charconv>
#include <cstdio>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "arg_parser.h"
#include "commands.h"
#include "read_input.h"
#include "tokenizers/tokenizer.h"

namespace orchard::cli {

namespace {

bool is_separator(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v' || c == ',' ||
         c == '[' || c == ']';
}

// Parses the ids of `text`, each checked against the vocabulary; errors name the id's position.
std::vector<tokenizers::TokenId> parse_ids(const std::string& text, std::size_t vocab_size,
                                           const std::string& source) {
  std::vector<tokenizers::TokenId> ids;
  std::size_t i = 0;
  while (i < text.size()) {
    if (is_separator(text[i])) {
      ++i;
      continue;
    }
    std::size_t end = i;
    while (end < text.size() && !is_separator(text[end])) ++end;
    const std::string_view word(text.data() + i, end - i);
    long long value = -1;
    const auto [ptr, ec] = std::from_chars(word.data(), word.data() + word.size(), value);
    const std::size_t index = ids.size() + 1;
    if (ec == std::errc::result_out_of_range ||
        (ec == std::errc() && ptr == word.data() + word.size() &&
         (value < 0 || static_cast<unsigned long long>(value) >= vocab_size))) {
      throw std::runtime_error(fmt::format("{} byte {}: id #{} = {} is outside the vocabulary [0, {})",
                                           source, i, index, word, vocab_size));
    }
    if (ec != std::errc() || ptr != word.data() + word.size()) {
      const std::string shown = word.size() <= 32 ? std::string(word) : std::string(word.substr(0, 32)) + "...";
      throw std::runtime_error(fmt::format("{} byte {}: id #{} '{}' is not a token id (expected a "
                                           "decimal integer)",
                                           source, i, index, shown));
    }
    ids.push_back(static_cast<tokenizers::TokenId>(value));
    i = end;
  }
  return ids;
}

}  // namespace

int run_detokenize(std::span<const std::string> args) {
  std::optional<std::string> tokenizer_path;
  std::optional<std::string> input;
  bool skip_special = false;
  ArgParser parser(
      "orchard detokenize -t TOKENIZER [--skip-special] [FILE|-]",
      "Reads token ids from FILE (standard input when FILE is '-' or absent), separated by whitespace\n"
      "(commas and square brackets are also accepted, so a Python list pastes as is), and writes the\n"
      "bytes they stand for to standard output, with no newline added. The bytes are written as they\n"
      "are, even when the ids split a UTF-8 character.\n\n"
      "TOKENIZER is a .gguf file (vocab-only or a full model), a Hugging Face tokenizer.json, a\n"
      "llama2.c tokenizer .bin, or a folder holding tokenizer.json or encoder.json + vocab.bpe (Llama 3).\n\n"
      "Exit status: 0 success; 2 bad arguments, an unreadable tokenizer or input, or an id that is not\n"
      "a decimal integer in [0, vocabulary size) (one line on stderr names it and where it is).\n\n"
      "example: echo 1 15043 3186 | orchard detokenize -t ggml-vocab-llama-spm.gguf --skip-special\n"
      "         Hello world");
  parser.option("tokenizer", 't', "TOKENIZER", "tokenizer file or folder (required)", &tokenizer_path)
      .flag("skip-special", 0, "leave out control tokens (BOS, EOS, <|eot_id|>, ...)", &skip_special)
      .positional("FILE", "token ids; '-' or absent for standard input", false, &input);
  if (!parser.parse(args)) return 0;
  if (!tokenizer_path) throw UsageError("missing option --tokenizer/-t TOKENIZER");

  const tokenizers::Tokenizer tokenizer = tokenizers::Tokenizer::load(*tokenizer_path);
  const std::string text = read_input(input);
  const std::vector<tokenizers::TokenId> ids =
      parse_ids(text, tokenizer.vocab_size(), input && *input != "-" ? *input : "standard input");
  tokenizers::DecodeOptions options;
  options.skip_special = skip_special;
  const std::string out = tokenizer.decode(ids, options);
  if (std::fwrite(out.data(), 1, out.size(), stdout) != out.size() || std::fflush(stdout) != 0) {
    throw std::runtime_error("cannot write to standard output");
  }
  return 0;
}

}  // namespace orchard::cli
