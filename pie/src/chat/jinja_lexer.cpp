#include "chat/jinja_lexer.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>

#include "chat/jinja_value.h"
#include "pie/chat_template.h"

namespace pie::jinja {
namespace {

// Python's str.splitlines() boundaries, all of which jinja2 turns into "\n" before lexing.
std::string normalize_newlines(const std::string& src) {
  std::string out;
  out.reserve(src.size());
  bool ended_with_newline = false;
  for (std::size_t k = 0; k < src.size();) {
    const auto c = static_cast<unsigned char>(src[k]);
    std::size_t len = 0;
    if (c == '\r') len = (k + 1 < src.size() && src[k + 1] == '\n') ? 2 : 1;
    else if (c == '\n' || c == 0x0b || c == 0x0c || c == 0x1c || c == 0x1d || c == 0x1e) len = 1;
    else if (c == 0xc2 && k + 1 < src.size() && static_cast<unsigned char>(src[k + 1]) == 0x85) len = 2;
    else if (c == 0xe2 && k + 2 < src.size() && static_cast<unsigned char>(src[k + 1]) == 0x80 &&
             (static_cast<unsigned char>(src[k + 2]) == 0xa8 || static_cast<unsigned char>(src[k + 2]) == 0xa9))
      len = 3;
    if (len) {
      out += '\n';
      k += len;
      ended_with_newline = true;
    } else {
      out += src[k];
      ++k;
      ended_with_newline = false;
    }
  }
  if (ended_with_newline) out.pop_back();  // keep_trailing_newline=False
  return out;
}

// Length in bytes of the Python whitespace code point at s[k], 0 when there is none.
std::size_t space_at(const std::string& s, std::size_t k) {
  const auto c = static_cast<unsigned char>(s[k]);
  if (c < 0x80) return is_py_space(c) ? 1 : 0;
  std::size_t n = (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
  if (k + n > s.size()) return 0;
  const auto cps = utf8_decode(std::string_view(s).substr(k, n));
  return cps.size() == 1 && is_py_space(cps[0]) ? n : 0;
}

std::string rstrip_py(const std::string& s) {
  std::size_t end = s.size();
  while (end > 0) {
    std::size_t start = end - 1;
    while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xc0) == 0x80) --start;
    if (space_at(s, start) != end - start) break;
    end = start;
  }
  return s.substr(0, end);
}

class Lexer {
 public:
  explicit Lexer(std::string source) : src_(normalize_newlines(source)) {
    line_starts_.push_back(0);
    for (std::size_t k = 0; k < src_.size(); ++k) {
      if (src_[k] == '\n') line_starts_.push_back(k + 1);
    }
  }

  std::vector<Token> run() {
    bool line_starting = true;
    while (pos_ < src_.size()) {
      std::size_t open = pos_;
      for (;;) {
        open = src_.find('{', open);
        if (open == std::string::npos || open + 1 >= src_.size()) { open = std::string::npos; break; }
        const char c = src_[open + 1];
        if (c == '{' || c == '%' || c == '#') break;
        ++open;
      }
      if (open == std::string::npos) {
        push_data(src_.substr(pos_), pos_);
        pos_ = src_.size();
        break;
      }
      const char kind = src_[open + 1];
      const char sign = open + 2 < src_.size() ? src_[open + 2] : '\0';
      std::string text = src_.substr(pos_, open - pos_);
      if (sign == '-') {
        text = rstrip_py(text);
      } else if (sign != '+' && kind != '{') {  // lstrip_blocks
        const std::size_t l_pos = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
        if ((l_pos > 0 || line_starting) && l_pos < text.size()) {
          bool all_space = true;
          for (std::size_t k = l_pos; k < text.size();) {
            const std::size_t n = space_at(text, k);
            if (n == 0) { all_space = false; break; }
            k += n;
          }
          if (all_space) text.resize(l_pos);
        }
      }
      push_data(std::move(text), pos_);
      pos_ = open + 2 + ((sign == '-' || sign == '+') ? 1 : 0);
      if (kind == '#') {
        line_starting = lex_comment(open);
      } else if (kind == '%' && lex_raw(open, line_starting)) {
        // raw block emitted as data
      } else {
        line_starting = lex_tag(kind, open);
      }
    }
    Token eof;
    eof.type = TokenType::eof;
    place(eof, src_.size());
    tokens_.push_back(eof);
    return std::move(tokens_);
  }

 private:
  [[noreturn]] void fail(const std::string& message, std::size_t at) const {
    int line = 0, column = 0;
    where(at, line, column);
    throw TemplateError(message, line, column);
  }

  void where(std::size_t at, int& line, int& column) const {
    const auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), at);
    const auto index = static_cast<std::size_t>(it - line_starts_.begin()) - 1;
    line = static_cast<int>(index) + 1;
    column = static_cast<int>(utf8_length(std::string_view(src_).substr(line_starts_[index],
                                                                         at - line_starts_[index]))) + 1;
  }

  void place(Token& t, std::size_t at) const { where(at, t.line, t.column); }

  void push_data(std::string text, std::size_t at) {
    if (text.empty()) return;
    Token t;
    t.type = TokenType::data;
    t.text = std::move(text);
    place(t, at);
    tokens_.push_back(std::move(t));
  }

  // Skips whitespace after a "-" end marker; true when the skipped text ended a line.
  bool skip_space_after() {
    bool newline = false;
    while (pos_ < src_.size()) {
      const std::size_t n = space_at(src_, pos_);
      if (n == 0) break;
      newline = src_[pos_] == '\n';
      pos_ += n;
    }
    return newline;
  }

  bool lex_comment(std::size_t open) {
    const std::size_t close = src_.find("#}", pos_);
    if (close == std::string::npos) fail("missing end of comment tag", open);
    const bool strip = close > pos_ && src_[close - 1] == '-';
    pos_ = close + 2;
    if (strip) return skip_space_after();
    if (pos_ < src_.size() && src_[pos_] == '\n') {  // trim_blocks
      ++pos_;
      return true;
    }
    return false;
  }

  // {% raw %}...{% endraw %}: the body is data, untouched.
  bool lex_raw(std::size_t open, bool& line_starting) {
    std::size_t k = pos_;
    while (k < src_.size() && space_at(src_, k)) k += space_at(src_, k);
    if (src_.compare(k, 3, "raw") != 0) return false;
    k += 3;
    while (k < src_.size() && space_at(src_, k)) k += space_at(src_, k);
    bool strip_after = false;
    if (k < src_.size() && (src_[k] == '-' || src_[k] == '+')) { strip_after = src_[k] == '-'; ++k; }
    if (src_.compare(k, 2, "%}") != 0) return false;
    pos_ = k + 2;
    if (strip_after) skip_space_after();
    // Find {%[-+]? endraw [-+]?%}
    std::size_t search = pos_;
    for (;;) {
      const std::size_t tag = src_.find("{%", search);
      if (tag == std::string::npos) fail("missing end of raw directive", open);
      std::size_t j = tag + 2;
      const bool strip_before = j < src_.size() && src_[j] == '-';
      if (j < src_.size() && (src_[j] == '-' || src_[j] == '+')) ++j;
      while (j < src_.size() && space_at(src_, j)) j += space_at(src_, j);
      if (src_.compare(j, 6, "endraw") != 0) { search = tag + 2; continue; }
      j += 6;
      while (j < src_.size() && space_at(src_, j)) j += space_at(src_, j);
      char end_sign = '\0';
      if (j < src_.size() && (src_[j] == '-' || src_[j] == '+')) end_sign = src_[j++];
      if (src_.compare(j, 2, "%}") != 0) { search = tag + 2; continue; }
      std::string body = src_.substr(pos_, tag - pos_);
      if (strip_before) body = rstrip_py(body);
      push_data(std::move(body), pos_);
      pos_ = j + 2;
      if (end_sign == '-') {
        line_starting = skip_space_after();
      } else if (end_sign != '+' && pos_ < src_.size() && src_[pos_] == '\n') {
        ++pos_;
        line_starting = true;
      } else {
        line_starting = false;
      }
      return true;
    }
  }

  // Tokens of one {{ }} or {% %} tag; returns whether its end consumed a newline.
  bool lex_tag(char kind, std::size_t open) {
    Token begin;
    begin.type = kind == '{' ? TokenType::var_begin : TokenType::block_begin;
    place(begin, open);
    tokens_.push_back(begin);
    std::vector<char> stack;
    for (;;) {
      while (pos_ < src_.size() && space_at(src_, pos_)) pos_ += space_at(src_, pos_);
      if (pos_ >= src_.size()) fail(kind == '{' ? "unexpected end of template, expected '}}'"
                                                : "unexpected end of template, expected '%}'", open);
      const char close0 = kind == '{' ? '}' : '%';
      if (stack.empty()) {
        const std::size_t at = pos_;
        bool matched = false, strip = false, plus = false;
        if (src_[pos_] == '-' && src_.compare(pos_ + 1, 2, std::string{close0, '}'}) == 0) {
          matched = strip = true;
          pos_ += 3;
        } else if (kind == '%' && src_[pos_] == '+' && src_.compare(pos_ + 1, 2, "%}") == 0) {
          matched = plus = true;
          pos_ += 3;
        } else if (src_.compare(pos_, 2, std::string{close0, '}'}) == 0) {
          matched = true;
          pos_ += 2;
        }
        if (matched) {
          Token end;
          end.type = kind == '{' ? TokenType::var_end : TokenType::block_end;
          place(end, at);
          tokens_.push_back(end);
          if (strip) return skip_space_after();
          if (kind == '%' && !plus && pos_ < src_.size() && src_[pos_] == '\n') {  // trim_blocks
            ++pos_;
            return true;
          }
          return false;
        }
      }
      lex_token(stack);
    }
  }

  void lex_token(std::vector<char>& stack) {
    const std::size_t at = pos_;
    const char c = src_[pos_];
    Token t;
    place(t, at);
    if (std::isdigit(static_cast<unsigned char>(c))) {
      lex_number(t);
    } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      std::size_t end = pos_;
      while (end < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[end])) || src_[end] == '_')) ++end;
      t.type = TokenType::name;
      t.text = src_.substr(pos_, end - pos_);
      pos_ = end;
    } else if (c == '\'' || c == '"') {
      lex_string(t);
    } else {
      static const char* const kOps[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~",
                                         "[", "]", "(", ")", "{", "}", ">", "<", "=", ".", ":", "|", ",", ";"};
      const char* found = nullptr;
      for (const char* op : kOps) {
        if (src_.compare(pos_, std::char_traits<char>::length(op), op) == 0) { found = op; break; }
      }
      if (found == nullptr) fail(std::string("unexpected char '") + c + "'", at);
      t.type = TokenType::op;
      t.text = found;
      pos_ += t.text.size();
      if (t.text == "(" || t.text == "[" || t.text == "{") {
        stack.push_back(t.text[0]);
      } else if (t.text == ")" || t.text == "]" || t.text == "}") {
        const char want = t.text == ")" ? '(' : t.text == "]" ? '[' : '{';
        if (stack.empty()) fail("unexpected '" + t.text + "'", at);
        if (stack.back() != want) fail("unexpected '" + t.text + "', expected the close of '" + stack.back() + "'", at);
        stack.pop_back();
      }
    }
    tokens_.push_back(std::move(t));
  }

  void lex_number(Token& t) {
    const std::size_t at = pos_;
    auto digits = [&](std::size_t k) {
      while (k < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[k])) ||
                                 (src_[k] == '_' && k + 1 < src_.size() &&
                                  std::isdigit(static_cast<unsigned char>(src_[k + 1])))))
        ++k;
      return k;
    };
    std::size_t end = digits(pos_);
    const bool after_dot = at > 0 && src_[at - 1] == '.';
    bool is_float = false;
    if (!after_dot) {
      if (end + 1 < src_.size() && src_[end] == '.' && std::isdigit(static_cast<unsigned char>(src_[end + 1]))) {
        end = digits(end + 1);
        is_float = true;
      }
      if (end < src_.size() && (src_[end] == 'e' || src_[end] == 'E')) {
        std::size_t k = end + 1;
        if (k < src_.size() && (src_[k] == '+' || src_[k] == '-')) ++k;
        if (k < src_.size() && std::isdigit(static_cast<unsigned char>(src_[k]))) {
          end = digits(k);
          is_float = true;
        }
      }
    }
    std::string text;
    for (std::size_t k = at; k < end; ++k) {
      if (src_[k] != '_') text += src_[k];
    }
    pos_ = end;
    if (is_float) {
      t.type = TokenType::floating;
      t.f = std::strtod(text.c_str(), nullptr);
    } else {
      t.type = TokenType::integer;
      errno = 0;
      const long long v = std::strtoll(text.c_str(), nullptr, 10);
      if (errno == ERANGE) fail("integer literal out of range: " + text, at);
      t.i = v;
    }
  }

  void lex_string(Token& t) {
    const std::size_t at = pos_;
    const char quote = src_[pos_++];
    std::string raw;
    for (;;) {
      if (pos_ >= src_.size()) fail("unterminated string literal", at);
      const char c = src_[pos_];
      if (c == quote) { ++pos_; break; }
      if (c == '\\' && pos_ + 1 < src_.size()) {
        raw += c;
        raw += src_[pos_ + 1];
        pos_ += 2;
        continue;
      }
      raw += c;
      ++pos_;
    }
    t.type = TokenType::string;
    t.text = unescape(raw, at);
  }

  // Python's unicode-escape decoding, which jinja2 applies to string literals.
  std::string unescape(const std::string& raw, std::size_t at) const {
    std::string out;
    for (std::size_t k = 0; k < raw.size(); ++k) {
      if (raw[k] != '\\' || k + 1 >= raw.size()) {
        out += raw[k];
        continue;
      }
      const char e = raw[++k];
      auto hex = [&](int n) -> std::uint32_t {
        std::uint32_t v = 0;
        for (int d = 1; d <= n; ++d) {
          if (k + d >= raw.size()) fail("truncated escape in string literal", at);
          const char h = raw[k + d];
          if (!std::isxdigit(static_cast<unsigned char>(h))) fail("truncated escape in string literal", at);
          v = v * 16 + static_cast<std::uint32_t>(std::isdigit(static_cast<unsigned char>(h)) ? h - '0'
                                                   : (std::tolower(static_cast<unsigned char>(h)) - 'a' + 10));
        }
        k += n;
        return v;
      };
      switch (e) {
        case '\n': break;
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case 'a': out += '\a'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'v': out += '\v'; break;
        case 'x': utf8_append(out, hex(2)); break;
        case 'u': utf8_append(out, hex(4)); break;
        case 'U': {
          const std::uint32_t cp = hex(8);
          if (cp > 0x10ffff) fail("illegal Unicode character in string literal", at);
          utf8_append(out, cp);
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            std::uint32_t v = static_cast<std::uint32_t>(e - '0');
            for (int d = 0; d < 2 && k + 1 < raw.size() && raw[k + 1] >= '0' && raw[k + 1] <= '7'; ++d) {
              v = v * 8 + static_cast<std::uint32_t>(raw[++k] - '0');
            }
            utf8_append(out, v);
          } else {
            out += '\\';
            out += e;
          }
      }
    }
    return out;
  }

  std::string src_;
  std::size_t pos_ = 0;
  std::vector<std::size_t> line_starts_;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(const std::string& source) { return Lexer(source).run(); }

}  // namespace pie::jinja
