#include "grammar_source.h"

#include <fmt/format.h>

#include <string_view>

#include "pie/engine.h"
#include "pse/gbnf.h"
#include "pse/json_schema.h"
#include "pse/lark.h"
#include "pse/regex.h"
#include "read_input.h"

namespace orchard::cli {

void GrammarSource::add_options(ArgParser& p) {
  p.option("gbnf", 0, "FILE", "the grammar in GBNF (llama.cpp's format)", &gbnf)
      .option("lark", 0, "FILE", "the grammar in Lark-style EBNF", &lark)
      .option("regex", 0, "PATTERN", "the grammar is this regex (whole-text match)", &regex)
      .option("schema", 0, "FILE", "the output is JSON valid under this JSON Schema", &schema)
      .option("json-layout", 0, "LAYOUT",
              fmt::format("with --schema: compact, flexible (bounded whitespace) or indented (default {})",
                          default_layout == pse::JsonLayout::kCompact ? "compact" : "flexible"),
              &json_layout)
      .flag("strict-keywords", 0,
            "with --schema: keywords of no JSON Schema draft are errors (default: annotations, as the spec says)",
            &strict_keywords)
      .flag("any-order", 0,
            "with --schema: object members in any order (each declared one at most once, required ones present; "
            "default: the order of `properties`)",
            &any_order);
}

pse::Grammar GrammarSource::load() const {
  const int n = (gbnf ? 1 : 0) + (lark ? 1 : 0) + (regex ? 1 : 0) + (schema ? 1 : 0);
  if (n != 1) throw UsageError(fmt::format("give exactly one grammar: {}", kGrammarSynopsis));
  if ((json_layout || strict_keywords || any_order) && !schema) {
    throw UsageError("--json-layout, --strict-keywords and --any-order need --schema");
  }
  if (gbnf) return pse::parse_gbnf(read_input(*gbnf));
  if (lark) return pse::parse_lark(read_input(*lark));
  if (regex) return pse::parse_regex(*regex);
  pse::JsonSchemaOptions options;
  options.layout = json_layout_option(json_layout, "--json-layout", default_layout);
  if (strict_keywords) options.unknown_keywords = pse::JsonSchemaOptions::UnknownKeywords::kError;
  if (any_order) options.property_order = pse::JsonPropertyOrder::kAnyOrder;
  const std::string text = read_input(*schema);
  return pse::json_schema_to_grammar(std::string_view(text), options);
}

pse::JsonLayout json_layout_option(const std::optional<std::string>& text, const std::string& flag,
                                   pse::JsonLayout fallback) {
  if (!text) return fallback;
  if (*text == "flexible") return pse::JsonLayout::kFlexible;
  if (*text == "compact") return pse::JsonLayout::kCompact;
  if (*text == "indented") return pse::JsonLayout::kIndented;
  throw UsageError(fmt::format("{}: expected flexible, compact or indented, got '{}'", flag, *text));
}

void add_table_build_options(ArgParser& p, std::optional<std::string>* tables, std::optional<std::string>* prefill_ms) {
  p.option("tables", 0, "WHEN",
           "when the token tables are built: compile (the slowest compile, the steadiest masks), background or "
           "first-use (default: the engine's, background)",
           tables)
      .option("prefill-ms", 0, "MS",
              "pause between the compile and the first mask, where a server runs the prompt's prefill (default 0)",
              prefill_ms);
}

pse::TableBuild table_build_option(const std::optional<std::string>& text, const std::string& flag) {
  if (!text) return pie::EngineOptions{}.grammar_tables;
  if (*text == "compile") return pse::TableBuild::kInCompile;
  if (*text == "background") return pse::TableBuild::kInBackground;
  if (*text == "first-use") return pse::TableBuild::kAtFirstUse;
  throw UsageError(fmt::format("{}: expected compile, background or first-use, got '{}'", flag, *text));
}

double prefill_ms_option(const std::optional<std::string>& text) {
  if (!text) return 0;
  const double ms = parse_double(*text, "--prefill-ms");
  if (!(ms >= 0 && ms <= 60'000))
    throw UsageError(fmt::format("--prefill-ms: expected milliseconds from 0 to 60000, got '{}'", *text));
  return ms;
}

const char* table_build_words(pse::TableBuild build) {
  switch (build) {
    case pse::TableBuild::kInCompile:
      return "in compile";
    case pse::TableBuild::kInBackground:
      return "in the background";
    case pse::TableBuild::kAtFirstUse:
      break;
  }
  return "at first use";
}

}  // namespace orchard::cli
