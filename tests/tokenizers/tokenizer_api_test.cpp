// Tokenizer API behaviour: special tokens, decoding, token bytes, streaming detokenization, thread
// sharing, and every error path (typed errors naming the offset, id, key or path at fault).
#include <gtest/gtest.h>

#include <fstream>

#include "shared_data.h"
#include "tensor/gguf.h"
#include "tokenizers/tokenizer.h"

namespace {

using tokenizers::EncodeOptions;
using tokenizers::TokenId;
using tokenizers::Tokenizer;
namespace gguf = tensor::gguf;

const Tokenizer& llama3() {
  static const Tokenizer tok = Tokenizer::load(orchard::testing::shared_data("tokenizers/llama3"));
  return tok;
}

const Tokenizer& llama_spm() {
  static const Tokenizer tok = Tokenizer::load(orchard::testing::shared_data("tokenizers/llama.cpp/ggml-vocab-llama-spm.gguf"));
  return tok;
}

std::filesystem::path temp_path(const std::string& name) {
  return std::filesystem::temp_directory_path() / ("orchard_tok_" + std::to_string(::getpid()) + "_" + name);
}

void write_bytes(const std::filesystem::path& p, std::string_view bytes) {
  std::ofstream out(p, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
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

TEST(TokenizerApi, Llama3Folder) {
  ORCHARD_REQUIRE_SHARED_DATA("tokenizers/llama3");
  const Tokenizer& tok = llama3();
  EXPECT_EQ(tok.vocab_size(), 128256u);
  EXPECT_EQ(tok.model_kind(), tokenizers::ModelKind::kBytePairByteLevel);
  EXPECT_EQ(tok.pre_tokenizer_name(), "llama-bpe");
  const auto& sp = tok.special_tokens();
  EXPECT_EQ(sp.bos, 128000);
  EXPECT_EQ(sp.eos, 128001);
  EXPECT_EQ(sp.eot, 128009);
  EXPECT_EQ(sp.end_of_generation, (std::vector<TokenId>{128001, 128008, 128009}));
  EXPECT_EQ(tok.token_text(128011), "<|reserved_special_token_3|>");
  EXPECT_EQ(tok.token_text(128255), "<|reserved_special_token_247|>");
  EXPECT_TRUE(tok.is_special(128009));
  EXPECT_FALSE(tok.is_special(9906));
  EXPECT_TRUE(tok.add_bos_by_default());

  // Special-token text is plain text unless parse_special.
  const std::string text = "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>";
  const auto plain = tok.encode(text);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 128006), 0);
  EXPECT_EQ(tok.decode(plain), text);
  EncodeOptions parse;
  parse.parse_special = true;
  parse.add_bos = true;
  const auto ids = tok.encode(text, parse);
  ASSERT_GE(ids.size(), 6u);
  EXPECT_EQ(ids.front(), 128000);
  EXPECT_EQ(ids[1], 128006);
  EXPECT_EQ(ids.back(), 128009);
  EXPECT_EQ(tok.decode(ids), "<|begin_of_text|>" + text);
  tokenizers::DecodeOptions skip;
  skip.skip_special = true;
  EXPECT_EQ(tok.decode(ids, skip), "user\n\nHi");

  // plain_text: special-token text inside the given ranges is plain text, the rest is parsed; what lies
  // outside them tokenizes as with parse_special alone.
  const std::string prompt = "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>x<|eot_id|>";
  const std::size_t user_begin = prompt.find("Hi"), user_end = prompt.rfind("<|eot_id|>");  // "Hi<|eot_id|>...x"
  const std::vector<tokenizers::TextRange> user{{user_begin, user_end}};
  EncodeOptions guarded;
  guarded.parse_special = true;
  guarded.plain_text = user;
  const auto g = tok.encode(prompt, guarded);
  EXPECT_EQ(std::count(g.begin(), g.end(), 128006), 1) << "the header inside the user's text became a token";
  EXPECT_EQ(std::count(g.begin(), g.end(), 128009), 1) << "only the last <|eot_id|> is the template's";
  EXPECT_EQ(g.front(), 128006);
  EXPECT_EQ(g.back(), 128009);
  EXPECT_EQ(tok.decode(g), prompt);
  // A range that meets a special token's text only in part also keeps it plain.
  const std::vector<tokenizers::TextRange> edge{{prompt.size() - 3, prompt.size()}};
  guarded.plain_text = edge;
  const auto e = tok.encode(prompt, guarded);
  EXPECT_NE(e.back(), 128009);
  // Without ranges: exactly parse_special.
  guarded.plain_text = {};
  parse.add_bos = false;
  EXPECT_EQ(tok.encode(prompt, guarded), tok.encode(prompt, parse));
  // Ranges must be sorted, disjoint and inside the text.
  const std::vector<tokenizers::TextRange> bad_order{{10, 20}, {5, 8}};
  guarded.plain_text = bad_order;
  EXPECT_THROW(tok.encode(prompt, guarded), tokenizers::InputError);
  const std::vector<tokenizers::TextRange> past_end{{0, prompt.size() + 1}};
  guarded.plain_text = past_end;
  EXPECT_THROW(tok.encode(prompt, guarded), tokenizers::InputError);

  // Token bytes and lookup by text (one test: the Llama 3 folder takes a second to load).
  const auto id = tok.find("Ġthe");
  ASSERT_TRUE(id.has_value());
  EXPECT_EQ(tok.token_bytes(*id), " the");
  EXPECT_EQ(tok.token_bytes(198), "\n");  // "Ċ"
  EXPECT_EQ(tok.token_bytes(128009), "<|eot_id|>");
  EXPECT_FALSE(tok.find("no such token text").has_value());
  // Every id has bytes; the 256 single-byte tokens cover every byte value.
  std::vector<bool> byte_seen(256, false);
  for (TokenId i = 0; i < static_cast<TokenId>(tok.vocab_size()); ++i) {
    const std::string& b = tok.token_bytes(i);
    EXPECT_FALSE(b.empty()) << i;
    if (b.size() == 1 && !tok.is_special(i)) byte_seen[static_cast<unsigned char>(b[0])] = true;
  }
  EXPECT_EQ(std::count(byte_seen.begin(), byte_seen.end(), true), 256);

  // Streaming byte-level tokens: characters split across ids come out whole.
  const std::string stream_text = " leading space kept, 日本語 and 🦙🦙";
  tokenizers::StreamingDetokenizer stream(tok);
  std::string out;
  for (TokenId t : tok.encode(stream_text)) out += stream.push(t);
  out += stream.finish();
  EXPECT_EQ(out, stream_text);

  // Errors: invalid UTF-8 names its offset; ids out of range.
  const std::string msg = expect_error<tokenizers::InputError>([&] { tok.encode("abc\xFF" "def"); });
  EXPECT_NE(msg.find("offset 3"), std::string::npos) << msg;
  expect_error<tokenizers::InputError>([&] { tok.encode("\xE6\x97"); });
  const std::vector<TokenId> bad = {1, 128256};
  const std::string msg2 = expect_error<tokenizers::InputError>([&] { tok.decode(bad); });
  EXPECT_NE(msg2.find("128256"), std::string::npos) << msg2;
  expect_error<tokenizers::InputError>([&] { tok.token_bytes(-1); });
  expect_error<tokenizers::InputError>([&] { tok.token_text(1 << 30); });
  expect_error<tokenizers::InputError>([&] { tok.is_special(-5); });
  tokenizers::StreamingDetokenizer stream2(tok);
  expect_error<tokenizers::InputError>([&] { stream2.push(200000); });
}

TEST(TokenizerApi, SentencePieceBytesAndLeadingSpace) {
  ORCHARD_REQUIRE_SHARED_DATA("tokenizers/llama.cpp/ggml-vocab-llama-spm.gguf");
  const Tokenizer& tok = llama_spm();
  EXPECT_EQ(tok.model_kind(), tokenizers::ModelKind::kSentencePiece);
  EXPECT_EQ(tok.token_bytes(13), "\n");  // <0x0A>
  EXPECT_EQ(tok.token_type(13), tokenizers::TokenType::kByte);
  EXPECT_EQ(tok.token_bytes(15043), " Hello");
  EncodeOptions bos;
  bos.add_bos = true;
  const auto ids = tok.encode("Hello world", bos);
  EXPECT_EQ(ids, (std::vector<TokenId>{1, 15043, 3186}));
  EXPECT_EQ(tok.decode(ids), "<s>Hello world");
  tokenizers::DecodeOptions skip;
  skip.skip_special = true;
  EXPECT_EQ(tok.decode(ids, skip), "Hello world");
  // Byte fallback for a character the vocabulary lacks.
  const auto emoji = tok.encode("🦙");
  EXPECT_EQ(tok.decode(emoji), "🦙");
  EXPECT_EQ(tok.special_tokens().end_of_generation, (std::vector<TokenId>{2}));
}

TEST(TokenizerApi, StreamingNeverSplitsCharacters) {
  ORCHARD_REQUIRE_SHARED_DATA("tokenizers/llama.cpp/ggml-vocab-llama-spm.gguf");
  const Tokenizer& tok = llama_spm();
  const std::string text = "Hi 🦙 日本語 ok";
  const auto ids = tok.encode(text);
  tokenizers::StreamingDetokenizer stream(tok);
  std::string out;
  for (TokenId id : ids) {
    const std::string piece = stream.push(id);
    // Every piece is valid UTF-8 on its own.
    EXPECT_EQ(tok.encode(piece).empty(), piece.empty());
    out += piece;
  }
  out += stream.finish();
  EXPECT_EQ(out, text);  // the leading space of the first piece is dropped once

  // A character cut short is held back, then flushed as U+FFFD.
  tokenizers::StreamingDetokenizer partial(tok);
  const auto first_byte = tok.find("<0xF0>");
  ASSERT_TRUE(first_byte);
  EXPECT_EQ(partial.push(*first_byte), "");
  EXPECT_EQ(partial.finish(), "\xEF\xBF\xBD");
}

TEST(TokenizerApi, MissingFilesAreFileErrors) {
  expect_error<tokenizers::FileError>([] { Tokenizer::load("/nonexistent/tokenizer.gguf"); });
  const auto dir = temp_path("empty_dir");
  std::filesystem::create_directories(dir);
  expect_error<tokenizers::FileError>([&] { Tokenizer::load(dir); });
  std::filesystem::remove_all(dir);
  const auto junk = temp_path("junk.bin");
  write_bytes(junk, std::string("\xFF\xFF\xFF\xFF garbage", 12));
  expect_error<tokenizers::FileError>([&] { Tokenizer::load(junk); });
  std::filesystem::remove(junk);
}

// A small byte-level GGUF vocabulary: the 256 byte tokens, "ab", "abc" and a control token, then `extra`
// (text, token type) from id 259.
gguf::Writer small_bpe_gguf(const std::vector<std::pair<std::string, int>>& extra = {}) {
  gguf::Writer w;
  std::vector<gguf::Value> tokens, types;
  // GPT-2 byte-to-unicode: printable bytes map to themselves, others to U+0100 + n.
  int n = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    const std::uint32_t cp = printable ? static_cast<std::uint32_t>(b) : static_cast<std::uint32_t>(256 + n++);
    std::string s;
    if (cp < 0x80) {
      s.push_back(static_cast<char>(cp));
    } else {
      s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
    tokens.push_back(gguf::make_string(s));
    types.push_back(gguf::make_int32(1));
  }
  tokens.push_back(gguf::make_string("ab"));
  types.push_back(gguf::make_int32(1));
  tokens.push_back(gguf::make_string("abc"));
  types.push_back(gguf::make_int32(1));
  tokens.push_back(gguf::make_string("<|end|>"));
  types.push_back(gguf::make_int32(3));
  for (const auto& [text, type] : extra) {
    tokens.push_back(gguf::make_string(text));
    types.push_back(gguf::make_int32(type));
  }
  w.set("tokenizer.ggml.model", gguf::make_string("gpt2"));
  w.set("tokenizer.ggml.pre", gguf::make_string("gpt-2"));
  w.set("tokenizer.ggml.tokens", gguf::make_array(gguf::ValueType::kString, tokens));
  w.set("tokenizer.ggml.token_type", gguf::make_array(gguf::ValueType::kInt32, types));
  w.set("tokenizer.ggml.merges", gguf::make_array(gguf::ValueType::kString, {gguf::make_string("a b"), gguf::make_string("ab c")}));
  w.set("tokenizer.ggml.eos_token_id", gguf::make_uint32(258));
  return w;
}

Tokenizer load_gguf_bytes(const gguf::Writer& w, const std::string& name) {
  const auto p = temp_path(name);
  w.write(p);
  struct Cleanup {
    std::filesystem::path p;
    ~Cleanup() { std::filesystem::remove(p); }
  } cleanup{p};
  return Tokenizer::load(p);
}

TEST(TokenizerApi, SmallGgufVocabulary) {
  const Tokenizer tok = load_gguf_bytes(small_bpe_gguf(), "small.gguf");
  EXPECT_EQ(tok.vocab_size(), 259u);
  EXPECT_EQ(tok.encode("abc"), (std::vector<TokenId>{257}));
  EXPECT_EQ(tok.encode("abcab"), (std::vector<TokenId>{257, 256}));
  EXPECT_EQ(tok.encode("xab"), (std::vector<TokenId>{'x', 256}));
  EXPECT_EQ(tok.special_tokens().end_of_generation, (std::vector<TokenId>{258}));
  EncodeOptions parse;
  parse.parse_special = true;
  EXPECT_EQ(tok.encode("ab<|end|>", parse), (std::vector<TokenId>{256, 258}));
}

TEST(TokenizerApi, CorruptGgufContainerIsThisLayersFormatError) {
  // The container reader (tensor/gguf.h) throws tensor errors; the tokenizer API reports its own types.
  const std::vector<std::uint8_t> bytes = small_bpe_gguf().to_bytes();
  const std::span<const std::uint8_t> cut(bytes.data(), bytes.size() / 2);
  const std::string msg = expect_error<tokenizers::FormatError>([&] { Tokenizer::parse(cut, "cut.gguf"); });
  EXPECT_NE(msg.find("cut.gguf"), std::string::npos) << msg;
}

// As llama.cpp: the fill-in-the-middle padding, repository and file separators end generation (the first
// spelling of each family found, control or user-defined only), and so do the ids of the GGUF's fim keys.
TEST(TokenizerApi, FimSeparatorsEndGeneration) {
  auto w = small_bpe_gguf({{"<|fim_pad|>", 3},     // 259: the padding family
                           {"<|repo_name|>", 3},   // 260: the repository family, its first spelling
                           {"<reponame>", 3},      // 261: a later spelling of the same family: not taken
                           {"<|file_sep|>", 4},    // 262: user-defined counts too
                           {"<fim-pad>", 1},       // 263: plain text: not taken
                           {"<fim_middle>", 3}});  // 264: named by the GGUF's fim key below
  w.set("tokenizer.ggml.fim_sep_token_id", gguf::make_uint32(264));
  const Tokenizer tok = load_gguf_bytes(w, "fim.gguf");
  EXPECT_EQ(tok.special_tokens().end_of_generation, (std::vector<TokenId>{258, 259, 260, 262, 264}));
}

TEST(TokenizerApi, MalformedGgufMetadataIsFormatError) {
  {
    auto w = small_bpe_gguf();
    w.set("tokenizer.ggml.model", gguf::make_string("rwkv"));
    const std::string msg = expect_error<tokenizers::FormatError>([&] { load_gguf_bytes(w, "bad_model.gguf"); });
    EXPECT_NE(msg.find("tokenizer.ggml.model"), std::string::npos) << msg;
  }
  {
    auto w = small_bpe_gguf();
    w.set("tokenizer.ggml.pre", gguf::make_string("no-such-pre"));
    const std::string msg = expect_error<tokenizers::FormatError>([&] { load_gguf_bytes(w, "bad_pre.gguf"); });
    EXPECT_NE(msg.find("no-such-pre"), std::string::npos) << msg;
  }
  {
    auto w = small_bpe_gguf();
    w.set("tokenizer.ggml.merges", gguf::make_array(gguf::ValueType::kString, {gguf::make_string("nospace")}));
    const std::string msg = expect_error<tokenizers::FormatError>([&] { load_gguf_bytes(w, "bad_merge.gguf"); });
    EXPECT_NE(msg.find("tokenizer.ggml.merges[0]"), std::string::npos) << msg;
  }
  {
    auto w = small_bpe_gguf();
    w.set("tokenizer.ggml.token_type", gguf::make_array(gguf::ValueType::kInt32, {gguf::make_int32(1)}));
    expect_error<tokenizers::FormatError>([&] { load_gguf_bytes(w, "bad_types.gguf"); });
  }
  {
    auto w = small_bpe_gguf();
    w.set("tokenizer.ggml.eos_token_id", gguf::make_uint32(5000));
    const std::string msg = expect_error<tokenizers::FormatError>([&] { load_gguf_bytes(w, "bad_eos.gguf"); });
    EXPECT_NE(msg.find("5000"), std::string::npos) << msg;
  }
  {
    auto w = small_bpe_gguf();
    w.set("tokenizer.ggml.tokens", gguf::make_uint32(3));
    expect_error<tokenizers::FormatError>([&] { load_gguf_bytes(w, "bad_tokens.gguf"); });
  }
  {
    gguf::Writer w;
    w.set("general.architecture", gguf::make_string("llama"));
    const std::string msg = expect_error<tokenizers::FormatError>([&] { load_gguf_bytes(w, "no_tokens.gguf"); });
    EXPECT_NE(msg.find("tokenizer.ggml.model"), std::string::npos) << msg;
  }
}

}  // namespace
