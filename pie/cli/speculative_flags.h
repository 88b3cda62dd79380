// --spec and --spec-k, the speculative-decoding options of the commands that generate (run, chat, serve).
#pragma once

#include <optional>
#include <string>

#include "arg_parser.h"
#include "pie/engine.h"
#include "pie/model_store.h"
#include "pie/speculation.h"

namespace orchard::cli {

struct SpeculativeFlags {
  std::optional<std::string> mode, k;

  void add_options(ArgParser& p) {
    p.option("spec", 0, "MODE",
             "speculative decoding: ngram (prompt lookup: drafts copied from the prompt and output, verified in "
             "one pass; the output is unchanged), draft=MODEL (a draft model of the same vocabulary, a file or a "
             "stored name as -m takes, resident beside the target) or off (default)",
             &mode)
        .option("spec-k", 0, "K", "with --spec: tokens drafted per step, 1..16 (default: adaptive)", &k);
  }

  // Throws UsageError on a bad value.
  pie::SpeculativeOptions get() const {
    pie::SpeculativeOptions out;
    if (mode) {
      if (*mode == "ngram") {
        out.mode = pie::DraftMode::ngram;
      } else if (draft_model_name()) {
        out.mode = pie::DraftMode::draft;
      } else if (*mode != "off") {
        throw UsageError("--spec: expected ngram, draft=MODEL or off, got '" + *mode + "'");
      }
    }
    if (k) {
      if (!mode || *mode == "off") throw UsageError("--spec-k needs --spec ngram or --spec draft=MODEL");
      out.k = static_cast<std::int32_t>(parse_int(*k, "--spec-k", 1, pie::kMaxDraftTokens));
    }
    return out;
  }

  // The MODEL of --spec draft=MODEL; nullopt otherwise. Throws UsageError on an empty one.
  std::optional<std::string> draft_model_name() const {
    if (!mode || mode->rfind("draft=", 0) != 0) return std::nullopt;
    std::string name = mode->substr(6);
    if (name.empty()) throw UsageError("--spec draft=MODEL: the MODEL is missing");
    return name;
  }

  // Sets the engine's speculative options, loading the draft model (a ModelError when it cannot be).
  void apply(pie::EngineOptions& options) const {
    options.speculative = get();
    if (const auto name = draft_model_name()) options.draft_model = pie::open_model(*name).model;
  }
};

}  // namespace orchard::cli
