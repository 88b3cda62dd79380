// The grammar options shared by `orchard grammar` and `orchard run`: exactly one of --gbnf, --lark,
// --regex or --schema (with --json-layout, --strict-keywords and --any-order for schemas), loaded into a
// pse::Grammar.
#pragma once

#include <optional>
#include <string>

#include "arg_parser.h"
#include "pse/compiler.h"
#include "pse/grammar.h"
#include "pse/json_schema.h"

namespace orchard::cli {

inline constexpr const char* kGrammarSynopsis = "(--gbnf FILE | --lark FILE | --regex PATTERN | --schema FILE)";

struct GrammarSource {
  std::optional<std::string> gbnf, lark, regex, schema;
  std::optional<std::string> json_layout;  // with --schema: flexible | compact | indented
  bool strict_keywords = false;
  bool any_order = false;  // with --schema: members in any order (JsonPropertyOrder::kAnyOrder)
  // The layout without --json-layout: flexible where existing documents are checked (`grammar`),
  // compact where a model writes the JSON (`run`), as the server's answers are.
  pse::JsonLayout default_layout = pse::JsonLayout::kFlexible;

  void add_options(ArgParser& p);
  bool given() const { return gbnf || lark || regex || schema; }
  // Throws UsageError unless exactly one grammar was given; pse errors for a bad grammar, runtime_error
  // for an unreadable file.
  pse::Grammar load() const;
};

// The value of --json-layout (`flag` names it in errors): "flexible", "compact" or "indented"; absent:
// `fallback`. Throws UsageError on another value.
pse::JsonLayout json_layout_option(const std::optional<std::string>& text, const std::string& flag,
                                   pse::JsonLayout fallback);

// The benches' --tables WHEN and --prefill-ms MS (read with table_build_option and prefill_ms_option).
void add_table_build_options(ArgParser& p, std::optional<std::string>* tables, std::optional<std::string>* prefill_ms);
// The value of --tables (benches) or --grammar-tables (serve): when a constraint's token tables are built
// (pse::TableBuild): "compile", "background" or "first-use". Absent: the engine's default
// (pie::EngineOptions::grammar_tables), so that benches time what a server gets. Throws UsageError
// naming `flag` on another value.
pse::TableBuild table_build_option(const std::optional<std::string>& text, const std::string& flag);
// The value of the benches' --prefill-ms: milliseconds from 0 to 60,000 (0 when absent); UsageError else.
double prefill_ms_option(const std::optional<std::string>& text);
// "in compile", "in the background" or "at first use".
const char* table_build_words(pse::TableBuild build);

}  // namespace orchard::cli
