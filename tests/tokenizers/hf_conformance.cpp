// Conformance with the reference libraries: our ids must equal those of Hugging Face `tokenizers` (for the
// tokenizer.json files in shared data) and of `tiktoken` (for the Llama 3 folder tokenizer) on the 46
// llama.cpp vector strings and on all of war-and-peace.txt. The reference ids are computed at test time by
// tests/tokenizers/hf_reference.py with the project's venv; the tests skip when the venv or the data is
// absent. A mismatch prints the text, the first differing position, both id sequences around it (with
// token texts) and the bytes of the text there.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "shared_data.h"
#include "tokenizers/tokenizer.h"

namespace {

using tokenizers::TokenId;
namespace fs = std::filesystem;

constexpr const char* kSeparator = "\n__ggml_vocab_test__\n";

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The texts hf_reference.py encodes, in its order: the vector strings, then the corpus.
std::vector<std::string> reference_texts() {
  const std::string inp =
      read_file(orchard::testing::shared_data("tokenizers/llama.cpp/ggml-vocab-llama-spm.gguf.inp"));
  std::vector<std::string> out;
  std::size_t start = 0;
  for (;;) {
    const std::size_t end = inp.find(kSeparator, start);
    if (end == std::string::npos) {
      if (start < inp.size()) out.push_back(inp.substr(start));
      break;
    }
    out.push_back(inp.substr(start, end - start));
    start = end + std::strlen(kSeparator);
  }
  out.push_back(read_file(orchard::testing::shared_data("corpus/war-and-peace.txt")));
  return out;
}

std::string escape(std::string_view s, std::size_t limit = 80) {
  std::string out;
  for (std::size_t i = 0; i < s.size() && i < limit; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c == '\r') out += "\\r";
    else if (c == '\\') out += "\\\\";
    else if (c < 0x20 || c == 0x7f) out += "\\x" + std::string(1, "0123456789abcdef"[c >> 4]) +
                                           std::string(1, "0123456789abcdef"[c & 15]);
    else out += static_cast<char>(c);
  }
  if (s.size() > limit) out += "...";
  return out;
}

std::string show_ids(const tokenizers::Tokenizer& tok, const std::vector<TokenId>& ids, std::size_t from,
                     std::size_t to) {
  std::string out;
  for (std::size_t i = from; i < std::min(to, ids.size()); ++i) {
    const TokenId id = ids[i];
    std::string text = id >= 0 && static_cast<std::size_t>(id) < tok.vocab_size() ? tok.token_text(id) : "?";
    out += std::to_string(id) + "(" + escape(text, 24) + ") ";
  }
  return out;
}

struct Case {
  const char* reference;  // hf_reference.py --tokenizer NAME
  const char* ours;       // shared-data path of the tokenizer we load
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.reference << " vs " << c.ours; }

class HfConformance : public ::testing::TestWithParam<Case> {};

TEST_P(HfConformance, SameIdsAsReference) {
  const Case c = GetParam();
  ORCHARD_REQUIRE_SHARED_DATA(c.ours);
  ORCHARD_REQUIRE_SHARED_DATA("corpus/war-and-peace.txt");
  ORCHARD_REQUIRE_SHARED_DATA("tokenizers/llama.cpp/ggml-vocab-llama-spm.gguf.inp");
  const fs::path python = orchard::testing::source_dir() / ".venv/bin/python";
  if (!fs::exists(python)) GTEST_SKIP() << "no Python venv at " << python << " (scripts/setup)";
  const fs::path script = orchard::testing::source_dir() / "tests/tokenizers/hf_reference.py";
  const fs::path out = fs::temp_directory_path() /
                       ("orchard_hfref_" + std::string(c.reference) + "_" + std::to_string(::getpid()) + ".txt");
  const std::string cmd = "'" + python.string() + "' '" + script.string() + "' --data '" +
                          orchard::testing::shared_data_dir().string() + "' --tokenizer " + c.reference +
                          " --out '" + out.string() + "'";
  const int status = std::system(cmd.c_str());
  if (WIFEXITED(status) && WEXITSTATUS(status) == 77) {
    GTEST_SKIP() << "reference library missing from the venv (pip install -r scripts/requirements-test.txt)";
  }
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "failed: " << cmd;

  std::vector<std::vector<TokenId>> expected;
  {
    std::ifstream in(out);
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream ls(line);
      std::vector<TokenId> ids;
      TokenId id = 0;
      while (ls >> id) ids.push_back(id);
      expected.push_back(std::move(ids));
    }
  }
  fs::remove(out);
  const std::vector<std::string> texts = reference_texts();
  ASSERT_EQ(expected.size(), texts.size());

  const tokenizers::Tokenizer tok = tokenizers::Tokenizer::load(orchard::testing::shared_data(c.ours));
  // Hugging Face always matches added tokens in text; parse_special=true is our equivalent.
  tokenizers::EncodeOptions options;
  options.parse_special = true;
  int n_mismatch = 0;
  for (std::size_t t = 0; t < texts.size(); ++t) {
    const bool corpus = t + 1 == texts.size();
    std::vector<TokenId> got;
    try {
      got = tok.encode(texts[t], options);
    } catch (const std::exception& e) {
      ADD_FAILURE() << c.ours << ": encode threw on " << (corpus ? "war-and-peace.txt" : "vector ") << t
                    << ": " << e.what();
      continue;
    }
    const std::vector<TokenId>& want = expected[t];
    if (got == want) continue;
    ++n_mismatch;
    std::size_t pos = 0;
    while (pos < got.size() && pos < want.size() && got[pos] == want[pos]) ++pos;
    // Byte offset of the first difference: the length of the common prefix, decoded.
    std::string prefix = tok.decode(std::span<const TokenId>(got.data(), pos));
    const std::size_t at = std::min(prefix.size(), texts[t].size());
    const std::size_t from = at >= 30 ? at - 30 : 0;
    ADD_FAILURE() << c.ours << " vs " << c.reference << ": "
                  << (corpus ? std::string("war-and-peace.txt")
                             : "vector " + std::to_string(t) + " \"" + escape(texts[t]) + "\"")
                  << "\n  first difference at id " << pos << " (ours " << got.size() << " ids, reference "
                  << want.size() << "), near byte " << at << ": \"" << escape(texts[t].substr(from, 30))
                  << "|" << escape(texts[t].substr(at, 30)) << "\""
                  << "\n  ours:      " << show_ids(tok, got, pos >= 3 ? pos - 3 : 0, pos + 6)
                  << "\n  reference: " << show_ids(tok, want, pos >= 3 ? pos - 3 : 0, pos + 6);
    if (n_mismatch >= 12) {
      ADD_FAILURE() << "stopping after 12 mismatching texts";
      break;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Tokenizers, HfConformance,
    ::testing::Values(Case{"llama2", "tokenizers/hf/llama2.tokenizer.json"},
                      Case{"phi-3", "tokenizers/hf/phi-3.tokenizer.json"},
                      Case{"phi-2", "tokenizers/hf/phi-2.tokenizer.json"},
                      Case{"falcon-tokenizer", "tokenizers/hf/falcon-tokenizer.tokenizer.json"},
                      Case{"llama3-tiktoken", "tokenizers/llama3"}),
    [](const ::testing::TestParamInfo<Case>& info) {
      std::string name = info.param.reference;
      std::replace(name.begin(), name.end(), '-', '_');
      return name;
    });

}  // namespace
