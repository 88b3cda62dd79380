// The hand-written GPT-2 and Llama 3 splitters against the general regex path (RE2 with the lookahead
// emulated) on random text, llama.cpp's pre-tokenizer types, and the regex converter's errors.
#include <gtest/gtest.h>

#include <random>

#include "../../tokenizers/src/pre_tokenizer.h"
#include "../../tokenizers/src/unicode.h"
#include "tokenizers/error.h"

namespace {

using tokenizers::detail::Piece;

std::string random_text(std::mt19937& rng, std::size_t n) {
  static const char* const kAtoms[] = {"a", "B", "z", "Q", " ", " ", "  ", "\n", "\r\n", "\t", "'s", "'T", "'re", "'LL",
                                       "0", "7", "123", "!", "?", ".", ",", "$", "<", "_", "é", "ß", "日", "本", "한",
                                       "Ж", "ж", "٣", "²", "\u00a0", "\u2003", "\u3000", "\u0301", "🦙", "€", "—", "'"};
  std::uniform_int_distribution<std::size_t> pick(0, std::size(kAtoms) - 1);
  std::string s;
  while (s.size() < n) s += kAtoms[pick(rng)];
  return s;
}

std::vector<std::string> pieces_of(std::string_view text, const std::vector<Piece>& pieces) {
  std::vector<std::string> out;
  for (const Piece& p : pieces) out.emplace_back(text.substr(p.begin, p.end - p.begin));
  return out;
}

// Regex path: matches plus the gaps between them, in order (llama.cpp's unicode_regex_split).
std::vector<std::string> regex_split(const tokenizers::detail::RegexStep& re, std::string_view text) {
  std::vector<Piece> m;
  tokenizers::detail::regex_matches(re, text, m);
  std::vector<Piece> all;
  std::uint32_t at = 0;
  for (const Piece& p : m) {
    if (p.begin > at) all.push_back({at, p.begin});
    all.push_back(p);
    at = p.end;
  }
  if (at < text.size()) all.push_back({at, static_cast<std::uint32_t>(text.size())});
  return pieces_of(text, all);
}

TEST(PreTokenizer, Gpt2SplitterMatchesRegex) {
  const auto re = tokenizers::detail::compile_regex(tokenizers::detail::kGpt2Regex, "test");
  std::mt19937 rng(1);
  for (int i = 0; i < 400; ++i) {
    const std::string text = random_text(rng, 1 + i % 60);
    std::vector<Piece> fast;
    tokenizers::detail::split_gpt2(text, 0, fast);
    ASSERT_EQ(pieces_of(text, fast), regex_split(*re, text)) << text;
  }
}

TEST(PreTokenizer, Llama3SplitterMatchesRegex) {
  const auto re = tokenizers::detail::compile_regex(tokenizers::detail::kLlama3Regex, "test");
  std::string qwen = tokenizers::detail::kLlama3Regex;
  qwen.replace(qwen.find("\\p{N}{1,3}"), 10, "\\p{N}");
  const auto re1 = tokenizers::detail::compile_regex(qwen, "test");
  std::mt19937 rng(2);
  for (int i = 0; i < 400; ++i) {
    const std::string text = random_text(rng, 1 + i % 60);
    std::vector<Piece> fast;
    tokenizers::detail::split_llama3(text, 0, 3, fast);
    ASSERT_EQ(pieces_of(text, fast), regex_split(*re, text)) << text;
    fast.clear();
    tokenizers::detail::split_llama3(text, 0, 1, fast);
    ASSERT_EQ(pieces_of(text, fast), regex_split(*re1, text)) << text;
  }
}

TEST(PreTokenizer, LookaheadEmulation) {
  const auto re = tokenizers::detail::compile_regex(tokenizers::detail::kGpt2Regex, "test");
  // "\s+(?!\S)" leaves the last space of a run to the next word; a lone newline before a word is a gap.
  EXPECT_EQ(regex_split(*re, "a   b"), (std::vector<std::string>{"a", "  ", " b"}));
  EXPECT_EQ(regex_split(*re, "\n\nab"), (std::vector<std::string>{"\n", "\n", "ab"}));
  EXPECT_EQ(regex_split(*re, "x  "), (std::vector<std::string>{"x", "  "}));
}

TEST(PreTokenizer, EveryKnownPreTypeBuilds) {
  for (const char* pre : {"default", "llama3", "llama-bpe", "deepseek-llm", "deepseek-coder", "deepseek-v3", "falcon",
                          "mpt", "starcoder", "gpt-2", "refact", "command-r", "qwen2", "stablelm2", "olmo", "dbrx",
                          "smaug-bpe", "poro-chat", "viking", "jais", "tekken", "smollm", "codeshell", "bloom",
                          "gpt3-finnish", "exaone", "chameleon", "minerva-7b", "gpt-4o", "llama4", "seed-coder",
                          "chatglm-bpe", "megrez", "bailingmoe"}) {
    const auto p = tokenizers::detail::PreTokenizer::for_gguf_pre(pre, "test");
    std::vector<Piece> pieces;
    const std::string text = "Hello, World! 123456 ÁÉ日本語 <sentinel:5> IMGIMGABZ  end\n";
    p.split(text, pieces);
    // Pieces cover the text in order (every pre type keeps all of its input).
    std::uint32_t at = 0;
    for (const Piece& piece : pieces) {
      EXPECT_EQ(piece.begin, at) << pre;
      at = piece.end;
    }
    EXPECT_EQ(at, text.size()) << pre;
  }
  EXPECT_THROW(tokenizers::detail::PreTokenizer::for_gguf_pre("no-such-pre", "test"), tokenizers::FormatError);
}

TEST(PreTokenizer, GptFourOCaseSplit) {
  const auto p = tokenizers::detail::PreTokenizer::for_gguf_pre("gpt-4o", "test");
  std::vector<Piece> pieces;
  const std::string text = "HelloWorld CamelCase you're";
  p.split(text, pieces);
  EXPECT_EQ(pieces_of(text, pieces), (std::vector<std::string>{"Hello", "World", " Camel", "Case", " you're"}));
}

TEST(PreTokenizer, UnsupportedRegexIsFormatError) {
  EXPECT_THROW(tokenizers::detail::compile_regex("(?<=a)b", "test"), tokenizers::FormatError);
  EXPECT_THROW(tokenizers::detail::compile_regex("a(?=b)", "test"), tokenizers::FormatError);
  EXPECT_THROW(tokenizers::detail::compile_regex("[abc", "test"), tokenizers::FormatError);
  EXPECT_THROW(tokenizers::detail::compile_regex("\\p{Zz}", "test"), tokenizers::FormatError);
  try {
    tokenizers::detail::compile_regex("(unclosed", "file.json: /pre_tokenizer");
    FAIL();
  } catch (const tokenizers::FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("/pre_tokenizer"), std::string::npos) << e.what();
  }
}

TEST(Unicode, NormalizationAndCategories) {
  using namespace tokenizers::unicode;
  EXPECT_EQ(nfc(std::string_view("e\xCC\x81")), "\xC3\xA9");        // e + U+0301 -> é
  EXPECT_EQ(nfd(std::string_view("\xC3\xA9")), "e\xCC\x81");
  EXPECT_EQ(nfc(std::string_view("\xE1\x84\x80\xE1\x85\xA1")), "\xEA\xB0\x80");  // Hangul L+V -> 가
  EXPECT_EQ(to_lower(0x0416), 0x0436u);
  EXPECT_TRUE(is_letter(0x65E5u));
  EXPECT_TRUE(is_number(0x0663u));
  EXPECT_TRUE(is_whitespace(0x3000));
  EXPECT_FALSE(is_whitespace(0x200B));
  EXPECT_EQ(find_invalid_utf8("ok\xC3"), 2u);
  EXPECT_EQ(find_invalid_utf8("\xED\xA0\x80"), 0u);  // surrogate
  EXPECT_EQ(find_invalid_utf8("\xC0\xAF"), 0u);      // overlong
  EXPECT_EQ(find_invalid_utf8("fine \xF0\x9F\xA6\x99"), std::string_view::npos);
}

}  // namespace
