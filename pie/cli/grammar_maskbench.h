// `orchard grammar bench --maskbench`: the MaskBench protocol (guidance-ai/jsonschemabench,
// maskbench/) over MaskBench schema files: per file compile the schema (TTFM), then per test feed
// its text token by token, timing each mask plus commit (TBM); one JSON status line per schema and
// a summary.
#pragma once

#include <span>
#include <string>

namespace orchard::cli {

// True when args (of `orchard grammar bench`) ask for the MaskBench runner (--maskbench or
// --maskbench=X).
bool wants_maskbench(std::span<const std::string> args);

// Runs `orchard grammar bench --maskbench DIR|FILE... -t TOKENIZER [--jsonl OUT] [--time-limit S]`.
// Returns 0 when the run completed (failing schemas are results, counted in the summary). Throws
// UsageError on bad arguments and std::runtime_error naming the file when a file is not MaskBench
// JSON (all files are read and checked before any is run); a schema's own errors are recorded,
// never thrown.
int grammar_maskbench(std::span<const std::string> args);

}  // namespace orchard::cli
