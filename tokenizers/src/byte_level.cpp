// GPT-2's reversible byte <-> unicode mapping, "<0xXX>" byte tokens and file reading.
#include <fmt/format.h>

#include <fstream>
#include <sstream>

#include "tokenizer_impl.h"
#include "unicode.h"

namespace tokenizers::detail {

namespace {

struct ByteMaps {
  std::array<std::uint32_t, 256> to_unicode{};
  std::array<std::int16_t, 324> to_byte{};  // code points 0..323 cover the mapping
  ByteMaps() {
    to_byte.fill(-1);
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      to_unicode[b] = printable ? static_cast<std::uint32_t>(b) : static_cast<std::uint32_t>(256 + n++);
      to_byte[to_unicode[b]] = static_cast<std::int16_t>(b);
    }
  }
};
const ByteMaps kByteMaps;

}  // namespace

const std::array<std::uint32_t, 256>& byte_to_unicode() { return kByteMaps.to_unicode; }

int unicode_to_byte(std::uint32_t cp) { return cp < kByteMaps.to_byte.size() ? kByteMaps.to_byte[cp] : -1; }

bool decode_byte_level(std::string_view text, std::string& out) {
  out.clear();
  if (unicode::find_invalid_utf8(text) != std::string_view::npos) return false;
  std::size_t pos = 0;
  while (pos < text.size()) {
    const int b = unicode_to_byte(unicode::decode_valid(text, pos));
    if (b < 0) return false;
    out.push_back(static_cast<char>(b));
  }
  return true;
}

std::string encode_byte_level(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) unicode::append_utf8(out, kByteMaps.to_unicode[static_cast<unsigned char>(c)]);
  return out;
}

int parse_byte_token(std::string_view text) {
  if (text.size() != 6 || text.substr(0, 3) != "<0x" || text[5] != '>') return -1;
  int v = 0;
  for (int k = 3; k < 5; ++k) {
    const char c = text[static_cast<std::size_t>(k)];
    int d;
    if (c >= '0' && c <= '9') {
      d = c - '0';
    } else if (c >= 'A' && c <= 'F') {
      d = c - 'A' + 10;
    } else if (c >= 'a' && c <= 'f') {
      d = c - 'a' + 10;
    } else {
      return -1;
    }
    v = v * 16 + d;
  }
  return v;
}

std::string read_file(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    throw FileError(fmt::format("[tokenizer] {}: no such file", path.string()));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw FileError(fmt::format("[tokenizer] {}: cannot open for reading", path.string()));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw FileError(fmt::format("[tokenizer] {}: read error", path.string()));
  return std::move(ss).str();
}

}  // namespace tokenizers::detail
