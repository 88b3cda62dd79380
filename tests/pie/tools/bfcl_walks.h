// BFCL random walks: each entry's functions become tools, the tool_choice "required" grammar is
// compiled against the Llama 3 vocabulary, and seeded random walks through the matcher's masks (a
// bias toward closing tokens once past a length, so walks end) produce outputs that are parsed back
// into calls. Used by the conformance test (a sample) and by bfcl_walks (all entries, for
// tools/bfcl_check.py).
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "pie/tool_calls.h"
#include "pse/vocabulary.h"

namespace pie::testing {

struct WalkOptions {
  ToolCallFormat format = ToolCallFormat::hermes;
  int walks = 2;  // per entry
  std::uint64_t seed = 1;
  std::size_t max_tokens = 800;  // a walk still open here counts as unfinished
  std::size_t bias_after = 40;   // tokens of uniform choice before the closing bias
  double max_compile_ms = 60'000;
  bool closed_objects = true;  // ToolGrammarOptions::closed_objects
  bool precompute = false;     // true: every token table built in compile; false: each at its first use
};

struct WalkResult {
  std::string text;
  bool finished = false;  // the matcher allowed end-of-sequence and the walk stopped there
  std::size_t n_tokens = 0;
  ParsedOutput parsed;
};

struct EntryResult {
  std::string id;
  bool parallel = false;
  bool compiled = false;
  std::string error;  // why it did not compile
  double compile_ms = 0;
  nlohmann::ordered_json tools;  // name -> normalised parameters
  std::vector<WalkResult> walks;
};

// The Llama 3.1 vocabulary from the shared encoder.json, with the texts in `text_specials`
// (tool-call markers) counted as text instead of special tokens.
std::shared_ptr<const pse::Vocabulary> llama3_tool_vocabulary(
    const std::string& encoder_json, const std::vector<std::string>& text_specials);

// One BFCL entry ({"id", "function": [...]}). Never throws for a grammar that fails to build or
// compile (recorded in `error`).
EntryResult walk_entry(const nlohmann::ordered_json& entry, bool parallel,
                       const std::string& encoder_json, const WalkOptions& options);

// The result as one JSON line for tools/bfcl_check.py.
nlohmann::ordered_json entry_json(const EntryResult& r, const WalkOptions& options);

}  // namespace pie::testing
