// llama.cpp's tokenizer test vectors (tests/test-tokenizer-0): every string of each .inp file must encode
// to the ids of the matching .out line (no BOS), decode back where the tokenizer is lossless, and give the
// same results on 8 threads at once.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include "shared_data.h"
#include "tokenizers/tokenizer.h"

namespace {

using tokenizers::TokenId;
using tokenizers::Tokenizer;

struct Vector {
  std::string text;
  std::vector<TokenId> ids;
};

std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<Vector> read_vectors(const std::string& base) {
  const std::string inp = slurp(orchard::testing::shared_data("tokenizers/llama.cpp/" + base + ".inp"));
  const std::string out = slurp(orchard::testing::shared_data("tokenizers/llama.cpp/" + base + ".out"));
  static constexpr std::string_view kSep = "\n__ggml_vocab_test__\n";
  std::vector<Vector> v;
  std::size_t at = 0;
  while (at < inp.size()) {
    const std::size_t end = inp.find(kSep, at);
    if (end == std::string::npos) break;
    v.push_back({inp.substr(at, end - at), {}});
    at = end + kSep.size();
  }
  std::istringstream lines(out);
  std::string line;
  std::size_t i = 0;
  while (std::getline(lines, line) && i < v.size()) {
    std::istringstream ids(line);
    TokenId id;
    while (ids >> id) v[i].ids.push_back(id);
    ++i;
  }
  EXPECT_EQ(i, v.size()) << base;
  return v;
}

struct Case {
  const char* vectors;    // base name of .inp / .out
  const char* tokenizer;  // shared-data path of the tokenizer
  bool lossless;
};

const Case kCases[] = {
    {"ggml-vocab-llama-spm.gguf", "tokenizers/llama.cpp/ggml-vocab-llama-spm.gguf", true},
    {"ggml-vocab-phi-3.gguf", "tokenizers/llama.cpp/ggml-vocab-phi-3.gguf", true},
    {"ggml-vocab-gpt-2.gguf", "tokenizers/llama.cpp/ggml-vocab-gpt-2.gguf", true},
    {"ggml-vocab-falcon.gguf", "tokenizers/llama.cpp/ggml-vocab-falcon.gguf", true},
    {"ggml-vocab-deepseek-coder.gguf", "tokenizers/llama.cpp/ggml-vocab-deepseek-coder.gguf", true},
    {"ggml-vocab-bert-bge.gguf", "tokenizers/llama.cpp/ggml-vocab-bert-bge.gguf", false},
    {"ggml-vocab-llama-bpe.gguf", "tokenizers/llama3", true},
};

// Each tokenizer loads once for the whole suite (the Llama 3 one takes a second, more under ASan).
const Tokenizer& cached(const char* path) {
  static std::mutex mutex;
  static std::map<std::string, Tokenizer> loaded;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = loaded.find(path);
  if (it == loaded.end()) it = loaded.emplace(path, Tokenizer::load(orchard::testing::shared_data(path))).first;
  return it->second;
}

class VectorsTest : public ::testing::TestWithParam<Case> {};

TEST_P(VectorsTest, EncodesExactlyRoundTripsAndSharesAcrossThreads) {
  const Case& c = GetParam();
  ORCHARD_REQUIRE_SHARED_DATA(c.tokenizer);
  ORCHARD_REQUIRE_SHARED_DATA(std::string("tokenizers/llama.cpp/") + c.vectors + ".inp");
  const Tokenizer& tok = cached(c.tokenizer);
  const auto vectors = read_vectors(c.vectors);
  ASSERT_EQ(vectors.size(), 46u);
  int failures = 0;
  for (const Vector& v : vectors) {
    const auto ids = tok.encode(v.text);
    EXPECT_EQ(ids, v.ids) << c.vectors << ": \"" << v.text << "\"";
    failures += ids != v.ids;
    if (c.lossless) {
      EXPECT_EQ(tok.decode(ids), v.text) << c.vectors;
    }
  }
  EXPECT_EQ(failures, 0);

  // The same tokenizer shared by 8 threads at once gives the same ids.
  std::vector<std::vector<std::vector<TokenId>>> results(8);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 3; ++rep) {
        results[static_cast<std::size_t>(t)].clear();
        for (const Vector& v : vectors) results[static_cast<std::size_t>(t)].push_back(tok.encode(v.text));
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < 8; ++t) {
    ASSERT_EQ(results[static_cast<std::size_t>(t)].size(), vectors.size());
    for (std::size_t i = 0; i < vectors.size(); ++i) {
      EXPECT_EQ(results[static_cast<std::size_t>(t)][i], vectors[i].ids) << "thread " << t << " vector " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(LlamaCpp, VectorsTest, ::testing::ValuesIn(kCases), [](const auto& info) {
  std::string name = info.param.vectors;
  name = name.substr(std::string("ggml-vocab-").size());
  name = name.substr(0, name.find(".gguf"));
  for (char& ch : name) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return name;
});

}  // namespace
