// tokenizers::add_gguf_metadata: a tokenizer exported to GGUF metadata and read back tokenizes exactly as
// the original (llama.cpp's test strings), for SentencePiece and byte-level BPE vocabularies from GGUF,
// tokenizer.json, llama2.c and tiktoken-style folders; WordPiece as llama.cpp's bert vocabulary.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "embedding_model.h"
#include "shared_data.h"
#include "tokenizers/gguf_export.h"
#include "tokenizers/tokenizer.h"

namespace {

namespace gg = tensor::gguf;
using orchard::testing::shared_data;

std::vector<std::string> test_strings() {
  std::ifstream in(shared_data("tokenizers/llama.cpp/ggml-vocab-llama-spm.gguf.inp"), std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string all = ss.str();
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> out;
  for (std::size_t at = 0; at < all.size();) {
    const std::size_t end = all.find(sep, at);
    out.push_back(all.substr(at, end == std::string::npos ? std::string::npos : end - at));
    if (end == std::string::npos) break;
    at = end + sep.size();
  }
  out.push_back("Once upon a time, there was a little girl named Lily.\n\n  She said: \"héllo 🌍\" 123456 <s> </s>");
  return out;
}

tokenizers::Tokenizer round_trip(const tokenizers::Tokenizer& t, std::size_t n_vocab = 0) {
  gg::Writer w;
  w.set("general.architecture", gg::make_string("llama"));
  tokenizers::add_gguf_metadata(t, w, n_vocab);
  const std::vector<std::uint8_t> bytes = w.to_bytes();
  return tokenizers::Tokenizer::parse(bytes, "exported.gguf");
}

class Export : public ::testing::TestWithParam<const char*> {};

TEST_P(Export, TokenizesAsTheOriginal) {
  ORCHARD_REQUIRE_SHARED_DATA(GetParam());
  ORCHARD_REQUIRE_SHARED_DATA("tokenizers/llama.cpp/ggml-vocab-llama-spm.gguf.inp");
  const tokenizers::Tokenizer original = tokenizers::Tokenizer::load(shared_data(GetParam()));
  const tokenizers::Tokenizer back = round_trip(original);
  ASSERT_EQ(back.vocab_size(), original.vocab_size());
  EXPECT_EQ(back.model_kind(), original.model_kind());
  EXPECT_EQ(back.special_tokens().bos, original.special_tokens().bos);
  EXPECT_EQ(back.special_tokens().eos, original.special_tokens().eos);
  EXPECT_EQ(back.add_bos_by_default(), original.add_bos_by_default());
  int n = 0;
  for (const std::string& s : test_strings()) {
    EXPECT_EQ(back.encode(s), original.encode(s)) << "text #" << n << ": '" << s << "'";
    ++n;
  }
}

INSTANTIATE_TEST_SUITE_P(Vocabularies, Export,
                         ::testing::Values("tokenizers/llama.cpp/ggml-vocab-llama-spm.gguf",
                                           "tokenizers/llama.cpp/ggml-vocab-phi-3.gguf",
                                           "tokenizers/llama.cpp/ggml-vocab-gpt-2.gguf",
                                           "tokenizers/llama.cpp/ggml-vocab-falcon.gguf",
                                           "tokenizers/llama.cpp/ggml-vocab-deepseek-coder.gguf",
                                           "tokenizers/hf/llama2.tokenizer.json", "tokenizers/hf/phi-3.tokenizer.json",
                                           "tokenizers/hf/phi-2.tokenizer.json", "tokenizers/llama3",
                                           "models/stories260K/tok512.bin"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name) {
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return name;
                         });

TEST(Export, PadsToTheModelsRows) {
  ORCHARD_REQUIRE_SHARED_DATA("models/stories260K/tok512.bin");
  const auto t = tokenizers::Tokenizer::load(shared_data("models/stories260K/tok512.bin"));
  const tokenizers::Tokenizer back = round_trip(t, 520);
  EXPECT_EQ(back.vocab_size(), 520u);
  EXPECT_EQ(back.token_text(515), "[PAD515]");
  EXPECT_EQ(back.token_type(515), tokenizers::TokenType::kUnused);
  EXPECT_EQ(back.token_text(3), "<0x00>");
  EXPECT_EQ(back.token_type(3), tokenizers::TokenType::kByte);
  gg::Writer w;
  EXPECT_THROW(tokenizers::add_gguf_metadata(t, w, 100), tokenizers::InputError);
}

// WordPiece: MiniLM's tokenizer.json (bert-base-uncased's vocabulary) exported as llama.cpp's "bert"
// vocabulary gives the very tokens and types of llama.cpp's own conversion of that vocabulary
// (ggml-vocab-bert-bge.gguf), and tokenizes as the original; a cased vocabulary is refused.
TEST(Export, WordPieceAsLlamaCppsBertVocabulary) {
  ORCHARD_REQUIRE_SHARED_DATA("tokenizers/llama.cpp/ggml-vocab-bert-bge.gguf");
  ORCHARD_REQUIRE_SHARED_DATA("tokenizers/llama.cpp/ggml-vocab-llama-spm.gguf.inp");
  ORCHARD_REQUIRE_EMBEDDING_MODEL();
  const auto hf = tokenizers::Tokenizer::load(orchard::testing::embedding_model_path() / "tokenizer.json");
  const auto reference = tokenizers::Tokenizer::load(shared_data("tokenizers/llama.cpp/ggml-vocab-bert-bge.gguf"));
  const tokenizers::Tokenizer back = round_trip(hf);
  ASSERT_EQ(back.vocab_size(), reference.vocab_size());
  for (std::size_t i = 0; i < back.vocab_size(); ++i) {
    const auto id = static_cast<tokenizers::TokenId>(i);
    ASSERT_EQ(back.token_text(id), reference.token_text(id)) << "token " << i;
    ASSERT_EQ(back.token_type(id), reference.token_type(id)) << "token " << i;
  }
  EXPECT_EQ(back.model_kind(), tokenizers::ModelKind::kWordPiece);
  EXPECT_EQ(back.special_tokens().cls, hf.special_tokens().cls);
  EXPECT_EQ(back.special_tokens().sep, hf.special_tokens().sep);
  EXPECT_EQ(back.special_tokens().mask, hf.special_tokens().mask);
  int n = 0;
  for (const std::string& s : {std::string("A man is eating food."), std::string("Müller's café, 東京, and 3.75%!"),
                               std::string("unaffable tokenization of [MASK] words")}) {
    EXPECT_EQ(back.encode(s, {.add_bos = true, .add_eos = true}), hf.encode(s, {.add_bos = true, .add_eos = true}))
        << "text #" << n++ << ": '" << s << "'";
  }
  // The same vocabulary, cased: llama.cpp would lowercase its texts, so it is not exported.
  std::ifstream in(orchard::testing::embedding_model_path() / "tokenizer.json", std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string cased = ss.str();
  const std::string on = "\"lowercase\":true";
  const std::size_t at = cased.find(on);
  ASSERT_NE(at, std::string::npos);
  cased.replace(at, on.size(), "\"lowercase\":false");
  const auto cased_tokenizer = tokenizers::Tokenizer::parse(
      std::span(reinterpret_cast<const std::uint8_t*>(cased.data()), cased.size()), "cased.json");
  gg::Writer w;
  try {
    tokenizers::add_gguf_metadata(cased_tokenizer, w);
    FAIL() << "no error";
  } catch (const tokenizers::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("cased WordPiece"), std::string::npos) << e.what();
  }
  EXPECT_EQ(w.to_bytes(), gg::Writer().to_bytes());  // the writer is unchanged
}

}  // namespace
