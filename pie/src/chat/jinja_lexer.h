// The Jinja lexer: template text -> data and tag tokens, applying whitespace control as jinja2's lexer does
// under trim_blocks=True, lstrip_blocks=True and keep_trailing_newline=False (newlines normalized to "\n",
// one trailing newline dropped, comments removed).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace pie::jinja {

enum class TokenType : std::uint8_t {
  data,         // literal template text (text)
  var_begin,    // {{
  var_end,      // }}
  block_begin,  // {%
  block_end,    // %}
  name,         // identifier (text)
  string,       // string literal, escapes decoded (text)
  integer,      // (i)
  floating,     // (f)
  op,           // operator or punctuation (text)
  eof,
};

struct Token {
  TokenType type = TokenType::eof;
  std::string text;
  std::int64_t i = 0;
  double f = 0.0;
  int line = 0;
  int column = 0;
};

// Throws TemplateError with the place of the first lexical error.
std::vector<Token> tokenize(const std::string& source);

}  // namespace pie::jinja
