#include "token_syntax.h"

#include <string>
#include <vector>

namespace pse {

namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }

std::uint32_t read_token_id(TextCursor& in) {
  const std::size_t start = in.pos();
  if (!is_digit(in.peek())) in.expected("a token id (a decimal integer)");
  std::uint64_t v = 0;
  while (is_digit(in.peek())) {
    v = v * 10 + static_cast<std::uint64_t>(in.peek() - '0');
    if (v > kMaxTokenId) in.fail_at(start, "token id is too large (the largest is " + std::to_string(kMaxTokenId) + ")");
    in.advance();
  }
  return static_cast<std::uint32_t>(v);
}

}  // namespace

ExprId read_token_terminal(TextCursor& in, Grammar& g, bool negated) {
  const std::size_t open = in.pos();
  in.advance();  // '<'
  if (!in.eat('[')) {
    const std::size_t start = in.pos();
    while (!in.at_end() && in.peek() != '>' && in.peek() != '\n' && in.peek() != '\r') in.advance();
    if (in.peek() != '>') in.fail_at(open, "unterminated token: expected '>' before the end of the line");
    if (in.pos() == start) in.fail_at(open, "empty token name: write <name> or <[id]>");
    in.advance();  // '>'
    std::string name(in.text().substr(open, in.pos() - open));  // the brackets are the token's too
    return g.add_token_named(std::move(name), negated);
  }
  std::vector<TokenIdRange> ids;
  if (in.eat('*')) {
    if (negated) in.fail_at(open, "!<[*]> reads no token");
    negated = true;  // every token: none excluded
  } else {
    if (in.peek() == '^') {
      if (negated) in.fail("'^' inside a negated token (!<...>): write one negation");
      in.advance();
      negated = true;
    }
    while (true) {
      const std::size_t at = in.pos();
      TokenIdRange r;
      r.lo = r.hi = read_token_id(in);
      if (in.eat('-')) r.hi = read_token_id(in);
      if (r.hi < r.lo) {
        in.fail_at(at, "bad token id range " + std::to_string(r.lo) + "-" + std::to_string(r.hi) +
                           ": the first id is greater than the last");
      }
      ids.push_back(r);
      if (!in.eat(',')) break;
    }
  }
  if (!in.eat(']')) in.expected("',' or ']' in a token id list <[...]>");
  if (!in.eat('>')) in.expected("'>' to close the token <[...]>");
  return g.add_token(std::move(ids), negated);
}

}  // namespace pse
