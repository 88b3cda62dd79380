// A cursor over grammar text (GBNF, Lark) that knows its line and column, for errors of the form
//   [gbnf] line 3, column 14: expected ')' to close the group opened at line 3, column 5, got '|'
// Columns count Unicode characters (not bytes), 1-based.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>

#include "char_sets.h"
#include "pse/error.h"
#include "pse/grammar.h"

namespace pse {

struct TextPlace {
  std::size_t line = 1;
  std::size_t column = 1;
};

// The number of hex digits that follow the escape letter: 2 for \x, 4 for \u, 8 for \U, 0 for any
// other.
inline int hex_escape_digits(char e) { return e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0; }

// The code point of the one-character escape \e when `e` is in `known`: n t r f v 0 stand for their
// control characters, any other character for itself; nullopt when `e` is not in `known` (or is
// NUL).
inline std::optional<std::uint32_t> simple_escape(char e, std::string_view known) {
  if (e == '\0' || known.find(e) == std::string_view::npos) return std::nullopt;
  switch (e) {
    case 'n':
      return '\n';
    case 't':
      return '\t';
    case 'r':
      return '\r';
    case 'f':
      return '\f';
    case 'v':
      return '\v';
    case '0':
      return 0;
    default:
      return static_cast<std::uint32_t>(static_cast<unsigned char>(e));
  }
}

class TextCursor {
 public:
  static constexpr std::size_t kMaxTextBytes = 8u << 20;  // 8 MiB of grammar text

  TextCursor(std::string_view text, std::string tag) : text_(text), tag_(std::move(tag)) {
    if (text.size() > kMaxTextBytes) {
      throw LimitError("[" + tag_ + "] grammar text of " + std::to_string(text.size()) +
                       " bytes is over the limit of " + std::to_string(kMaxTextBytes) + " bytes");
    }
  }

  std::string_view text() const { return text_; }
  std::size_t pos() const { return pos_; }
  void set_pos(std::size_t pos) { pos_ = pos; }
  bool at_end() const { return pos_ >= text_.size(); }
  char peek(std::size_t ahead = 0) const {
    return pos_ + ahead < text_.size() ? text_[pos_ + ahead] : '\0';
  }
  bool starts_with(std::string_view s) const { return text_.substr(pos_).starts_with(s); }
  void advance(std::size_t n = 1) { pos_ = std::min(text_.size(), pos_ + n); }
  bool eat(char c) {
    if (!at_end() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }

  // Line and column (in characters) of a byte offset.
  TextPlace place(std::size_t offset) const {
    TextPlace p;
    std::size_t line_start = 0;
    offset = std::min(offset, text_.size());
    for (std::size_t i = 0; i < offset; ++i) {
      if (text_[i] == '\n') {
        ++p.line;
        line_start = i + 1;
      }
    }
    for (std::size_t i = line_start; i < offset; ++i) {
      if ((static_cast<unsigned char>(text_[i]) & 0xC0) != 0x80) ++p.column;
    }
    return p;
  }
  std::string where(std::size_t offset) const {
    TextPlace p = place(offset);
    return "line " + std::to_string(p.line) + ", column " + std::to_string(p.column);
  }

  // What is at `offset`, for "got ..." in messages.
  std::string describe_at(std::size_t offset) const {
    if (offset >= text_.size()) return "the end of the text";
    unsigned char c = static_cast<unsigned char>(text_[offset]);
    if (c == '\n' || c == '\r') return "a newline";
    if (c >= 0x20 && c < 0x7F) return std::string("'") + static_cast<char>(c) + "'";
    std::uint32_t cp = 0;
    std::size_t len = charset::decode_utf8(text_, offset, cp);
    if (len == 0) return "an invalid UTF-8 byte";
    if (cp < 0x20) {
      char buf[16];
      std::snprintf(buf, sizeof buf, "U+%04X", static_cast<unsigned>(cp));
      return buf;
    }
    std::string quoted(1, '\'');  // piecewise: GCC 12 misfires -Wrestrict on "'" + std::string
    quoted += text_.substr(offset, len);
    quoted.push_back('\'');
    return quoted;
  }

  [[noreturn]] void fail_at(std::size_t offset, const std::string& what) const {
    TextPlace p = place(offset);
    throw GrammarError("[" + tag_ + "] " + where(offset) + ": " + what, p.line, p.column);
  }
  [[noreturn]] void fail(const std::string& what) const { fail_at(pos_, what); }
  [[noreturn]] void expected(const std::string& what) const {
    fail_at(pos_, "expected " + what + ", got " + describe_at(pos_));
  }

  // Decodes one UTF-8 character at the cursor and advances; fails on malformed UTF-8.
  std::uint32_t next_code_point() {
    std::uint32_t cp = 0;
    std::size_t len = charset::decode_utf8(text_, pos_, cp);
    if (len == 0) fail("invalid UTF-8 in the grammar text");
    pos_ += len;
    return cp;
  }

  // Takes the run of characters accepted by `is_name_char` at the cursor; fails with
  // "expected <what>, got ..." when there is none.
  std::string read_name(bool (*is_name_char)(char), const std::string& what) {
    std::size_t start = pos_;
    while (is_name_char(peek())) ++pos_;
    if (pos_ == start) expected(what);
    return std::string(text_.substr(start, pos_ - start));
  }

  // Reads a decimal repetition count; fails with "expected <what>, got ..." when there is no digit,
  // and at its first digit when it reaches kUnbounded.
  std::uint32_t read_count(const std::string& what) {
    std::size_t start = pos_;
    if (!is_digit(peek())) expected(what);
    std::uint64_t v = 0;
    while (is_digit(peek())) {
      v = v * 10 + static_cast<std::uint64_t>(peek() - '0');
      if (v >= kUnbounded)
        fail_at(start, "repetition count is too large (the limit is 4294967294)");
      ++pos_;
    }
    return static_cast<std::uint32_t>(v);
  }

  // Reads exactly `n` hex digits into `value`; returns false, with the cursor on the first
  // character that is not a hex digit, when one is missing (the caller words the error).
  bool read_hex_digits(int n, std::uint64_t& value) {
    value = 0;
    for (int i = 0; i < n; ++i) {
      char h = peek();
      int d = (h >= '0' && h <= '9')   ? h - '0'
              : (h >= 'a' && h <= 'f') ? h - 'a' + 10
              : (h >= 'A' && h <= 'F') ? h - 'A' + 10
                                       : -1;
      if (d < 0) return false;
      value = value * 16 + static_cast<std::uint64_t>(d);
      ++pos_;
    }
    return true;
  }

 private:
  static bool is_digit(char c) { return c >= '0' && c <= '9'; }

  std::string_view text_;
  std::string tag_;
  std::size_t pos_ = 0;
};

}  // namespace pse
