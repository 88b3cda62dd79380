// A cursor over grammar text (GBNF, Lark) that knows its line and column, for errors of the form
//   [gbnf] line 3, column 14: expected ')' to close the group opened at line 3, column 5, got '|'
// Columns count Unicode characters (not bytes), 1-based.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "char_sets.h"
#include "pse/error.h"

namespace pse {

struct TextPlace {
  std::size_t line = 1;
  std::size_t column = 1;
};

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

 private:
  std::string_view text_;
  std::string tag_;
  std::size_t pos_ = 0;
};

}  // namespace pse
