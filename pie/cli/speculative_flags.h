// --spec and --spec-k, the speculative-decoding options of the commands that generate (run, chat, serve).
#pragma once

#include <optional>
#include <string>

#include "arg_parser.h"
#include "pie/speculation.h"

namespace orchard::cli {

struct SpeculativeFlags {
  std::optional<std::string> mode, k;

  void add_options(ArgParser& p) {
    p.option("spec", 0, "MODE",
             "speculative decoding: ngram (prompt lookup: drafts copied from the prompt and output, verified in "
             "one pass; the output is unchanged) or off (default)",
             &mode)
        .option("spec-k", 0, "K", "with --spec: tokens drafted per step, 1..16 (default: adaptive)", &k);
  }

  // Throws UsageError on a bad value.
  pie::SpeculativeOptions get() const {
    pie::SpeculativeOptions out;
    if (mode) {
      if (*mode == "ngram") {
        out.mode = pie::DraftMode::ngram;
      } else if (*mode != "off") {
        throw UsageError("--spec: expected ngram or off, got '" + *mode + "'");
      }
    }
    if (k) {
      if (!mode || *mode == "off") throw UsageError("--spec-k needs --spec ngram");
      out.k = static_cast<std::int32_t>(parse_int(*k, "--spec-k", 1, pie::kMaxDraftTokens));
    }
    return out;
  }
};

}  // namespace orchard::cli
