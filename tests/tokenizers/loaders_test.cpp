// tokenizer.json, llama2.c tokenizer.bin and encoder.json + vocab.bpe loading: real files encode as the
// reference libraries do (ids checked against Hugging Face tokenizers 0.23 / llama.cpp), synthetic files
// cover WordPiece, Metaspace and the error paths.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "shared_data.h"
#include "tokenizers/tokenizer.h"

namespace {

using tokenizers::EncodeOptions;
using tokenizers::TokenId;
using tokenizers::Tokenizer;

std::filesystem::path temp_path(const std::string& name) {
  return std::filesystem::temp_directory_path() / ("orchard_tokl_" + std::to_string(::getpid()) + "_" + name);
}

Tokenizer load_text(const std::string& name, const std::string& content) {
  const auto p = temp_path(name);
  {
    std::ofstream out(p, std::ios::binary);
    out << content;
  }
  struct Cleanup {
    std::filesystem::path p;
    ~Cleanup() { std::filesystem::remove(p); }
  } cleanup{p};
  return Tokenizer::load(p);
}

template <typename E, typename F>
std::string expect_error(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
    return {};
  }
  ADD_FAILURE() << "no exception";
  return {};
}

struct HfCase {
  const char* file;
  const char* text;
  std::vector<TokenId> ids;  // from Hugging Face tokenizers, add_special_tokens=False
};

TEST(HfJson, RealFilesEncodeLikeTheReference) {
  const HfCase cases[] = {
      {"phi-2", "Hello world", {15496, 995}},
      {"phi-2", "can't won't I'M we'll they'VE", {5171, 470, 1839, 470, 314, 6, 44, 356, 1183, 484, 6, 6089}},
      {"falcon-tokenizer", "Hello world", {9856, 1079}},
      {"falcon-tokenizer", "ied 4 \xC2\xBD months", {878, 204, 31, 3068, 133, 2137}},  // Digits: ASCII only
      {"phi-3", "Hello world", {15043, 3186}},
      {"llama2", "Hello world", {15043, 3186}},
  };
  for (const HfCase& c : cases) {
    const std::string rel = std::string("tokenizers/hf/") + c.file + ".tokenizer.json";
    if (!std::filesystem::exists(orchard::testing::shared_data(rel))) {
      GTEST_SKIP() << "shared data absent: " << rel;
    }
    const Tokenizer tok = Tokenizer::load(orchard::testing::shared_data(rel));
    EXPECT_EQ(tok.encode(c.text), c.ids) << c.file << ": " << c.text;
    EXPECT_EQ(tok.decode(tok.encode(c.text)), c.text) << c.file;
    if (std::string_view(c.file) == "phi-2") {
      EXPECT_EQ(tok.pre_tokenizer_name(), "gpt-2");
    }
  }
}

TEST(HfJson, AllFourLoadAndRoundTrip) {
  for (const char* f : {"llama2", "phi-3", "phi-2", "falcon-tokenizer"}) {
    const std::string rel = std::string("tokenizers/hf/") + f + ".tokenizer.json";
    if (!std::filesystem::exists(orchard::testing::shared_data(rel))) {
      GTEST_SKIP() << "shared data absent: " << rel;
    }
    const Tokenizer tok = Tokenizer::load(orchard::testing::shared_data(rel));
    const std::string text = "  Mixed text: ünïcödé 日本語 🦙, code {x: [1, 22, 333]}\n\tend  ";
    const auto ids = tok.encode(text);
    EXPECT_FALSE(ids.empty()) << f;
    EXPECT_EQ(tok.decode(ids), text) << f;
    EXPECT_FALSE(tok.special_tokens().end_of_generation.empty()) << f;
  }
}

TEST(HfJson, ParseSpecialAndAddedTokens) {
  ORCHARD_REQUIRE_SHARED_DATA("tokenizers/hf/phi-3.tokenizer.json");
  const Tokenizer tok = Tokenizer::load(orchard::testing::shared_data("tokenizers/hf/phi-3.tokenizer.json"));
  EncodeOptions parse;
  parse.parse_special = true;
  // Hugging Face: [32000, 29871, 297, 1426]
  EXPECT_EQ(tok.encode("<|endoftext|> in text", parse), (std::vector<TokenId>{32000, 29871, 297, 1426}));
  EXPECT_TRUE(tok.is_special(32000));
  const auto& eog = tok.special_tokens().end_of_generation;
  EXPECT_NE(std::find(eog.begin(), eog.end(), 32007), eog.end());  // <|end|>
}

const char* const kWordPieceJson = R"({
  "version": "1.0",
  "added_tokens": [
    {"id": 0, "content": "[PAD]", "special": true, "lstrip": false, "rstrip": false, "normalized": false, "single_word": false},
    {"id": 1, "content": "[UNK]", "special": true, "lstrip": false, "rstrip": false, "normalized": false, "single_word": false},
    {"id": 2, "content": "[CLS]", "special": true, "lstrip": false, "rstrip": false, "normalized": false, "single_word": false},
    {"id": 3, "content": "[SEP]", "special": true, "lstrip": false, "rstrip": false, "normalized": false, "single_word": false}
  ],
  "normalizer": {"type": "BertNormalizer", "clean_text": true, "handle_chinese_chars": true, "strip_accents": null, "lowercase": true},
  "pre_tokenizer": {"type": "BertPreTokenizer"},
  "post_processor": {"type": "TemplateProcessing",
    "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "[SEP]", "type_id": 0}}],
    "pair": [], "special_tokens": {"[CLS]": {"id": "[CLS]", "ids": [2], "tokens": ["[CLS]"]}, "[SEP]": {"id": "[SEP]", "ids": [3], "tokens": ["[SEP]"]}}},
  "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": true},
  "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##", "max_input_chars_per_word": 10,
    "vocab": {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "hello": 4, "world": 5, "un": 6, "##aff": 7, "##able": 8,
              "!": 9, "cafe": 10, "日": 11, "本": 12}}
})";

TEST(HfJson, WordPiece) {
  const Tokenizer tok = load_text("wp.json", kWordPieceJson);
  EXPECT_EQ(tok.model_kind(), tokenizers::ModelKind::kWordPiece);
  EXPECT_EQ(tok.encode("Hello, WORLD!"), (std::vector<TokenId>{4, 1, 5, 9}));
  EXPECT_EQ(tok.encode("unaffable"), (std::vector<TokenId>{6, 7, 8}));
  EXPECT_EQ(tok.encode("unknownword"), (std::vector<TokenId>{1}));  // longer than 10 characters
  EXPECT_EQ(tok.encode("Café 日本"), (std::vector<TokenId>{10, 11, 12}));  // accents stripped, CJK split
  EncodeOptions both;
  both.add_bos = both.add_eos = true;
  EXPECT_TRUE(tok.add_bos_by_default());
  EXPECT_EQ(tok.encode("hello", both), (std::vector<TokenId>{2, 4, 3}));
  EXPECT_EQ(tok.decode(tok.encode("hello world unaffable")), "hello world unaffable");
}

const char* const kMetaspaceJson = R"({
  "added_tokens": [{"id": 0, "content": "<unk>", "special": true}],
  "normalizer": null,
  "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": true},
  "decoder": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": true},
  "model": {"type": "BPE", "unk_token": "<unk>", "byte_fallback": false, "fuse_unk": true,
    "vocab": {"<unk>": 0, "\u2581": 1, "a": 2, "b": 3, "\u2581a": 4, "\u2581ab": 5},
    "merges": [["\u2581", "a"], ["\u2581a", "b"]]}
})";

TEST(HfJson, MetaspaceAndCharacterBpe) {
  const Tokenizer tok = load_text("meta.json", kMetaspaceJson);
  EXPECT_EQ(tok.model_kind(), tokenizers::ModelKind::kSentencePiece);
  EXPECT_EQ(tok.encode("ab a"), (std::vector<TokenId>{5, 4}));
  EXPECT_EQ(tok.encode("ab zz"), (std::vector<TokenId>{5, 1, 0}));  // unknown characters fuse into one <unk>
  EXPECT_EQ(tok.decode(std::vector<TokenId>{5, 4}), "ab a");
}

TEST(HfJson, MalformedFilesAreFormatErrors) {
  EXPECT_NE(expect_error<tokenizers::FormatError>([] { load_text("bad1.json", "{\"model\": "); }).find("malformed JSON"),
            std::string::npos);
  EXPECT_NE(expect_error<tokenizers::FormatError>([] { load_text("bad2.json", "{\"version\": \"1.0\"}"); }).find("/model"),
            std::string::npos);
  EXPECT_NE(expect_error<tokenizers::FormatError>([] {
              load_text("bad3.json", R"({"model": {"type": "Unigram", "vocab": [["a", 0.0]]}})");
            }).find("Unigram"),
            std::string::npos);
  EXPECT_NE(expect_error<tokenizers::FormatError>([] {
              load_text("bad4.json", R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": ["ab"]}})");
            }).find("/model/merges/0"),
            std::string::npos);
  EXPECT_NE(expect_error<tokenizers::FormatError>([] {
              load_text("bad5.json", R"({"model": {"type": "BPE", "vocab": {"a": "zero"}, "merges": []}})");
            }).find("/model/vocab/a"),
            std::string::npos);
  EXPECT_NE(expect_error<tokenizers::FormatError>([] {
              load_text("bad6.json", R"({"pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(?<=x)y"}, "behavior": "Isolated"},
                                         "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})");
            }).find("/pre_tokenizer"),
            std::string::npos);
  EXPECT_NE(expect_error<tokenizers::FormatError>([] {
              load_text("bad7.json", R"({"normalizer": {"type": "Precompiled"}, "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})");
            }).find("/normalizer/type"),
            std::string::npos);
  EXPECT_NE(expect_error<tokenizers::FormatError>([] {
              load_text("bad8.json", R"({"model": {"type": "BPE", "vocab": {"a": -4}, "merges": []}})");
            }).find("-4"),
            std::string::npos);
}

TEST(Llama2c, Tok512LoadsAndRoundTrips) {
  ORCHARD_REQUIRE_SHARED_DATA("models/stories260K/tok512.bin");
  const Tokenizer tok = Tokenizer::load(orchard::testing::shared_data("models/stories260K/tok512.bin"));
  EXPECT_EQ(tok.vocab_size(), 512u);
  EXPECT_EQ(tok.model_kind(), tokenizers::ModelKind::kSentencePiece);
  EXPECT_EQ(tok.special_tokens().bos, 1);
  EXPECT_EQ(tok.special_tokens().eos, 2);
  EXPECT_EQ(tok.token_type(3), tokenizers::TokenType::kByte);
  EXPECT_EQ(tok.token_bytes(3 + '\n'), "\n");
  EXPECT_TRUE(tok.add_bos_by_default());
  std::string text = "Once upon a time, there was a little girl named Lily.\nShe said, \"I want to play!\" 日本 🦙";
  if (std::filesystem::exists(orchard::testing::shared_data("models/stories260K/expected-greedy-200.txt"))) {
    std::ifstream in(orchard::testing::shared_data("models/stories260K/expected-greedy-200.txt"));
    std::stringstream ss;
    ss << in.rdbuf();
    text = ss.str();
  }
  EncodeOptions bos;
  bos.add_bos = true;
  const auto ids = tok.encode(text, bos);
  ASSERT_GT(ids.size(), 2u);
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(tok.token_bytes(ids[1]), " " + text.substr(0, tok.token_bytes(ids[1]).size() - 1));  // dummy prefix
  tokenizers::DecodeOptions skip;
  skip.skip_special = true;
  EXPECT_EQ(tok.decode(ids, skip), text);
  EXPECT_EQ(tok.decode(tok.encode("日本 🦙")), "日本 🦙");  // byte fallback
}

TEST(Llama2c, TruncatedFileIsFormatError) {
  ORCHARD_REQUIRE_SHARED_DATA("models/stories260K/tok512.bin");
  std::ifstream in(orchard::testing::shared_data("models/stories260K/tok512.bin"), std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string full = ss.str();
  const std::string msg = expect_error<tokenizers::FormatError>([&] { load_text("cut.bin", full.substr(0, full.size() - 3)); });
  EXPECT_NE(msg.find("offset"), std::string::npos) << msg;
}

TEST(TiktokenFolder, MalformedFilesAreFormatErrors) {
  const auto dir = temp_path("tiktoken_dir");
  std::filesystem::create_directories(dir);
  {
    std::ofstream(dir / "encoder.json") << "{\"a\": 0, \"b\": 1, \"ab\": 2}";
    std::ofstream(dir / "vocab.bpe") << "a b\nbroken\n";
  }
  const std::string msg = expect_error<tokenizers::FormatError>([&] { Tokenizer::load(dir); });
  EXPECT_NE(msg.find("line 2"), std::string::npos) << msg;
  {
    std::ofstream(dir / "encoder.json") << "{\"a\": 0, \"b\": 0}";
    std::ofstream(dir / "vocab.bpe") << "a b\n";
  }
  expect_error<tokenizers::FormatError>([&] { Tokenizer::load(dir); });
  for (const char* bad : {"{\"a\": \"zero\"}", "{\"a\": {\"b\": 1}}", "[1, 2]", "{\"a\": 0", "{}"}) {
    std::ofstream(dir / "encoder.json") << bad;
    expect_error<tokenizers::FormatError>([&] { Tokenizer::load(dir); });
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
