// The C++ side of the Python-vs-C++ mask check (test_maskbench_masks.py): MaskBench files run through pse
// directly, as `orchard grammar bench --maskbench` runs them (the vocabulary from the tokenizer through
// pie::grammar_vocabulary, json_schema_to_grammar with the default options, the default compile), writing
// per schema one JSON line: {"id", "vocab_hash", "error" | "tests": [{"tokens": [...], "masks": [[sum, popcount],
// ...]}]}. A mask's [sum, popcount]: sum = sum over words of word * (2 * i + 1) mod 2^64 (any one changed word
// changes it), popcount its set bits.
//
//   python_mask_reference TOKENIZER FILE...
#include <bit>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "pie/grammar_vocabulary.h"
#include "pse/compiler.h"
#include "pse/json_schema.h"
#include "pse/matcher.h"
#include "tokenizers/tokenizer.h"

namespace {

using ordered_json = nlohmann::ordered_json;

ordered_json mask_digest(const std::vector<std::uint32_t>& mask) {
  std::uint64_t sum = 0, pop = 0;
  for (std::size_t i = 0; i < mask.size(); ++i) {
    sum += static_cast<std::uint64_t>(mask[i]) * (2 * i + 1);
    pop += static_cast<std::uint64_t>(std::popcount(mask[i]));
  }
  return ordered_json::array({sum, pop});
}

ordered_json run_file(const std::string& path, const tokenizers::Tokenizer& tok,
                      const std::shared_ptr<const pse::Vocabulary>& vocab) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  const ordered_json file = ordered_json::parse(text.str());
  const std::string name = path.substr(path.find_last_of('/') + 1);
  ordered_json out{{"id", name}, {"vocab_hash", vocab->hash()}};
  std::optional<pse::Matcher> matcher;
  try {
    matcher.emplace(pse::compile_grammar(pse::json_schema_to_grammar(file["schema"]), vocab));
  } catch (const std::exception& e) {
    out["error"] = e.what();
    return out;
  }
  ordered_json tests = ordered_json::array();
  std::vector<std::uint32_t> mask(matcher->mask_words());
  for (const auto& t : file["tests"]) {
    matcher->reset();
    const std::vector<tokenizers::TokenId> ids = tok.encode(t["text"].get<std::string>());
    ordered_json masks = ordered_json::array();
    for (tokenizers::TokenId id : ids) {
      matcher->fill_next_token_bitmask(mask);
      masks.push_back(mask_digest(mask));
      if (!matcher->accept_token(id)) break;
    }
    tests.push_back(ordered_json{{"tokens", ids}, {"masks", std::move(masks)}});
  }
  out["tests"] = std::move(tests);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: python_mask_reference TOKENIZER FILE...\n";
    return 2;
  }
  try {
    const tokenizers::Tokenizer tok = tokenizers::Tokenizer::load(argv[1]);
    const auto vocab = pie::grammar_vocabulary(tok);
    for (int i = 2; i < argc; ++i) std::cout << run_file(argv[i], tok, vocab).dump() << "\n";
  } catch (const std::exception& e) {
    std::cerr << "python_mask_reference: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
