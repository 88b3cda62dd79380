#include "sampling_flags.h"

#include <array>
#include <cstdint>

namespace orchard::cli {
namespace {

struct SamplingOption {
  const char* flag;   // --flag
  const char* field;  // the request's field
  const char* metavar;
  const char* help;
  bool integer;
  long long lo, hi;  // bounds of an integer option
  std::optional<double> fallback;
};

constexpr long long kMaxSeed = 1LL << 62;

const std::array<SamplingOption, 8> kOptions{{
    {"temp", "temperature", "T", "temperature, 0 for greedy (default 0.8)", false, 0, 0, 0.8},
    {"top-k", "top_k", "K", "sample from the K most likely tokens (default 40; 0 off)", true, 0, 1 << 24, 40},
    {"top-p", "top_p", "P", "nucleus sampling threshold in (0, 1] (default 0.95)", false, 0, 0, 0.95},
    {"min-p", "min_p", "P", "drop tokens less likely than P times the likeliest, in [0, 1] (default 0: off)", false,
     0, 0, std::nullopt},
    {"repeat-penalty", "repetition_penalty", "R",
     "penalise tokens already in the prompt or output by R, > 0 (llama.cpp's rule; default 1: off)", false, 0, 0, std::nullopt},
    {"presence-penalty", "presence_penalty", "P", "in [-2, 2]: subtract P from the logit of each token already output (default 0)",
     false, 0, 0, std::nullopt},
    {"frequency-penalty", "frequency_penalty", "F",
     "in [-2, 2]: subtract F times its count from each output token's logit (default 0)", false, 0, 0, std::nullopt},
    {"seed", "seed", "S", "random seed (default: a fresh one)", true, 0, kMaxSeed, std::nullopt},
}};

}  // namespace

const char* const kSamplingSynopsis =
    "[--temp T] [--top-k K] [--top-p P] [--min-p P] [--repeat-penalty R] [--presence-penalty P] "
    "[--frequency-penalty F] [--seed S]";

void SamplingFlags::add_options(ArgParser& p) {
  values.assign(kOptions.size(), std::nullopt);
  for (std::size_t i = 0; i < kOptions.size(); ++i) {
    p.option(kOptions[i].flag, 0, kOptions[i].metavar, kOptions[i].help, &values[i]);
  }
}

nlohmann::ordered_json SamplingFlags::fields() const {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  for (std::size_t i = 0; i < kOptions.size(); ++i) {
    const SamplingOption& o = kOptions[i];
    const std::optional<std::string> value = i < values.size() ? values[i] : std::nullopt;
    const std::string what = std::string("--") + o.flag;
    if (value && o.integer) {
      out[o.field] = parse_int(*value, what, o.lo, o.hi);
    } else if (value) {
      out[o.field] = parse_double(*value, what);
    } else if (o.fallback && o.integer) {
      out[o.field] = static_cast<long long>(*o.fallback);
    } else if (o.fallback) {
      out[o.field] = *o.fallback;
    }
  }
  return out;
}

std::vector<std::string> SamplingFlags::given() const {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < kOptions.size() && i < values.size(); ++i) {
    if (values[i]) out.emplace_back(kOptions[i].field);
  }
  return out;
}

}  // namespace orchard::cli
