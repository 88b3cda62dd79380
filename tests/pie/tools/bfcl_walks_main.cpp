// bfcl_walks: random walks through the tool_choice "required" grammar of every entry of BFCL files,
// one JSON line per entry on stdout (tools/bfcl_check.py validates them with jsonschema and
// counts).
//   bfcl_walks --encoder ../shared/data/tokenizers/llama3/encoder.json [--format hermes] [--walks
//   2]
//              [--seed 1] [--limit N] [--open-objects] [--precompute] FILE.json...
// (files whose name has "parallel" get parallel calls; --open-objects:
// ToolGrammarOptions::closed_objects off; --precompute: every token table built in compile, for compile
// times)
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "bfcl_walks.h"

int main(int argc, char** argv) {
  using namespace pie::testing;
  WalkOptions options;
  std::string encoder;
  long limit = -1;
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "bfcl_walks: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    try {
      if (a == "--encoder")
        encoder = value();
      else if (a == "--format")
        options.format = pie::tool_call_format_from_name(value());
      else if (a == "--walks")
        options.walks = std::stoi(value());
      else if (a == "--seed")
        options.seed = std::stoull(value());
      else if (a == "--limit")
        limit = std::stol(value());
      else if (a == "--max-tokens")
        options.max_tokens = std::stoul(value());
      else if (a == "--open-objects")
        options.closed_objects = false;
      else if (a == "--precompute")
        options.precompute = true;
      else if (!a.empty() && a[0] == '-') {
        std::fprintf(stderr, "bfcl_walks: unknown option %s\n", a.c_str());
        return 2;
      } else
        files.push_back(a);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "bfcl_walks: %s: %s\n", a.c_str(), e.what());
      return 2;
    }
  }
  if (encoder.empty() || files.empty()) {
    std::fprintf(
        stderr,
        "usage: bfcl_walks --encoder encoder.json [--format F] [--walks N] [--seed S] [--limit N] "
        "[--open-objects] [--precompute] FILE...\n");
    return 2;
  }
  for (const std::string& file : files) {
    std::ifstream in(file);
    if (!in) {
      std::fprintf(stderr, "bfcl_walks: cannot open %s\n", file.c_str());
      return 1;
    }
    const bool parallel = file.find("parallel") != std::string::npos;
    std::string line;
    long n = 0;
    while (std::getline(in, line) && (limit < 0 || n < limit)) {
      if (line.empty()) continue;
      ++n;
      const auto entry = nlohmann::ordered_json::parse(line);
      const EntryResult r = walk_entry(entry, parallel, encoder, options);
      std::cout << entry_json(r, options)
                       .dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace)
                << "\n"
                << std::flush;
    }
  }
  return 0;
}
