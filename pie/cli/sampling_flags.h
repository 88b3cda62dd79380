// --temp, --top-k, --top-p, --min-p, the penalties and --seed: the sampling options of the commands that
// generate (run, chat), each declared once with its request field (OpenAI's name), bounds and default.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "arg_parser.h"

namespace orchard::cli {

// "[--temp T] [--top-k K] ...", for a command's synopsis.
extern const char* const kSamplingSynopsis;

struct SamplingFlags {
  void add_options(ArgParser& p);
  // The request fields: each option given, and the defaults (temperature 0.8, top_k 40, top_p 0.95) of
  // those that have one and were not given. Throws UsageError naming the option on a malformed value
  // (a value out of the sampler's range is the request's RequestError).
  nlohmann::ordered_json fields() const;
  // The request fields given on the command line (a stored model's parameters fill the others).
  std::vector<std::string> given() const;

  std::vector<std::optional<std::string>> values;  // one per option, in sampling_flags.cpp's table order
};

}  // namespace orchard::cli
