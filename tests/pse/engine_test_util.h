// Helpers for the engine tests: a tiny Grammar builder, small vocabularies, the brute-force mask (try
// every token on a fork) and random walks through reachable states.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "pse/compiler.h"
#include "pse/grammar.h"
#include "pse/matcher.h"
#include "pse/vocabulary.h"

namespace pse::testing {

// Builds grammars tersely: G g; auto r = g.rule("root"); g.define(r, g.seq({g.lit("a"), g.ref(r)})).
struct G {
  Grammar g;
  RuleId rule(const std::string& name) { return g.declare_rule(name); }
  void define(RuleId r, ExprId e) { g.define_rule(r, e); }
  ExprId lit(const std::string& s) { return g.add_bytes(s); }
  ExprId cls(std::uint32_t lo, std::uint32_t hi, bool negated = false) {
    return g.add_char_class({{lo, hi}}, negated);
  }
  ExprId cls(std::vector<CharRange> r, bool negated = false) { return g.add_char_class(std::move(r), negated); }
  ExprId seq(std::vector<ExprId> c) { return g.add_sequence(std::move(c)); }
  ExprId alt(std::vector<ExprId> c) { return g.add_choice(std::move(c)); }
  ExprId rep(ExprId c, std::uint32_t lo, std::uint32_t hi) { return g.add_repeat(c, lo, hi); }
  ExprId star(ExprId c) { return g.add_repeat(c, 0, kUnbounded); }
  ExprId plus(ExprId c) { return g.add_repeat(c, 1, kUnbounded); }
  ExprId opt(ExprId c) { return g.add_repeat(c, 0, 1); }
  ExprId ref(RuleId r) { return g.add_rule_ref(r); }
  ExprId empty() { return g.add_empty(); }
  Grammar done(RuleId root) {
    g.set_root(root);
    return g;
  }
};

inline Grammar arithmetic_grammar() {
  G g;
  RuleId expr = g.rule("root"), term = g.rule("term"), factor = g.rule("factor"), num = g.rule("num");
  g.define(expr, g.seq({g.ref(term), g.star(g.seq({g.alt({g.lit("+"), g.lit("-")}), g.ref(term)}))}));
  g.define(term, g.seq({g.ref(factor), g.star(g.seq({g.alt({g.lit("*"), g.lit("/")}), g.ref(factor)}))}));
  g.define(factor, g.alt({g.ref(num), g.seq({g.lit("("), g.ref(expr), g.lit(")")})}));
  g.define(num, g.plus(g.cls('0', '9')));
  return g.done(expr);
}

inline Grammar left_recursive_grammar() {
  G g;
  RuleId list = g.rule("root"), item = g.rule("item");
  g.define(list, g.alt({g.seq({g.ref(list), g.lit(","), g.ref(item)}), g.ref(item)}));
  g.define(item, g.alt({g.lit("a"), g.lit("bb"), g.seq({g.lit("["), g.ref(list), g.lit("]")})}));
  return g.done(list);
}

inline Grammar json_like_grammar() {
  G g;
  RuleId value = g.rule("root"), object = g.rule("object"), array = g.rule("array"),
         str = g.rule("string"), num = g.rule("number"), ws = g.rule("ws");
  g.define(ws, g.rep(g.cls({{' ', ' '}, {'\n', '\n'}}), 0, 2));
  ExprId ch = g.alt({g.cls({{'"', '"'}, {'\\', '\\'}, {0, 0x1F}}, true),
                     g.seq({g.lit("\\"), g.cls({{'"', '"'}, {'\\', '\\'}, {'n', 'n'}})})});
  g.define(str, g.seq({g.lit("\""), g.star(ch), g.lit("\"")}));
  g.define(num, g.seq({g.opt(g.lit("-")), g.plus(g.cls('0', '9')),
                       g.opt(g.seq({g.lit("."), g.plus(g.cls('0', '9'))}))}));
  ExprId member = g.seq({g.ref(ws), g.ref(str), g.ref(ws), g.lit(":"), g.ref(ws), g.ref(value), g.ref(ws)});
  g.define(object, g.seq({g.lit("{"), g.alt({g.ref(ws), g.seq({member, g.star(g.seq({g.lit(","), member}))})}),
                          g.lit("}")}));
  ExprId elem = g.seq({g.ref(ws), g.ref(value), g.ref(ws)});
  g.define(array, g.seq({g.lit("["), g.alt({g.ref(ws), g.seq({elem, g.star(g.seq({g.lit(","), elem}))})}),
                         g.lit("]")}));
  g.define(value, g.alt({g.ref(object), g.ref(array), g.ref(str), g.ref(num), g.lit("true"),
                         g.lit("false"), g.lit("null")}));
  return g.done(value);
}

inline Grammar ambiguous_nullable_grammar() {
  G g;
  RuleId s = g.rule("root"), a = g.rule("a"), e = g.rule("e");
  g.define(e, g.empty());
  g.define(a, g.alt({g.star(g.lit("a")), g.lit("ab"), g.seq({g.ref(e), g.lit("b"), g.ref(e)})}));
  g.define(s, g.seq({g.ref(a), g.ref(e), g.ref(a), g.lit("."), g.opt(g.ref(s))}));
  return g.done(s);
}

inline Grammar counted_grammar() {
  G g;
  RuleId r = g.rule("root"), w = g.rule("w");
  g.define(w, g.alt({g.lit("ab"), g.lit("c")}));
  g.define(r, g.seq({g.rep(g.cls('a', 'c'), 2, 5), g.lit("-"), g.rep(g.ref(w), 1, 4), g.rep(g.lit("x"), 0, 3)}));
  return g.done(r);
}

inline Grammar unicode_grammar() {
  G g;
  RuleId r = g.rule("root");
  // Greek lower case, CJK, an emoji range, then "!" or a negated class of one character.
  g.define(r, g.seq({g.plus(g.cls({{0x3B1, 0x3C9}, {0x4E00, 0x4E10}, {0x1F600, 0x1F60F}})),
                     g.alt({g.lit("!"), g.cls({{'a', 'z'}, {0x3B1, 0x3C9}}, true)})}));
  return g.done(r);
}

inline std::vector<std::pair<std::string, Grammar>> all_small_grammars() {
  return {{"arithmetic", arithmetic_grammar()},   {"left_recursive", left_recursive_grammar()},
          {"json_like", json_like_grammar()},     {"ambiguous_nullable", ambiguous_nullable_grammar()},
          {"counted", counted_grammar()},         {"unicode", unicode_grammar()}};
}

// Every string of 1 to max_length bytes taken from `bytes` (tokens for a vocabulary whose first-byte groups
// hold every continuation).
inline std::vector<std::string> every_string(const std::string& bytes, std::size_t max_length) {
  std::vector<std::string> out, last{""};
  for (std::size_t n = 1; n <= max_length; ++n) {
    std::vector<std::string> next;
    for (const std::string& prefix : last)
      for (const char c : bytes) next.push_back(prefix + c);
    out.insert(out.end(), next.begin(), next.end());
    last = std::move(next);
  }
  return out;
}

inline std::shared_ptr<const Vocabulary> small_vocabulary(TokenId* eos = nullptr, TokenId* control = nullptr) {
  std::vector<std::string> t;
  for (int b = 0; b < 256; ++b) t.push_back(std::string(1, static_cast<char>(b)));
  const std::string alpha = "ab,[]0129+-*/().\" :{}\\ntrufalsx!";
  for (char x : alpha)
    for (char y : alpha) t.push_back(std::string{x, y});
  for (const char* s : {"abc", "aab", "aaa", "bba", "ab.", "a.", ".a", "12", "123", "(1", "1)", "+(", "true",
                        "false", "null", "nul", "\":", "\",", "\"}", "{\"", "[\"", "\\n", "\\\"", " \"",
                        "\n ", "  ", "-1", "0.", ".5", "], ", "}]", "xx", "xxx", "-ab", "c-", "abab", "abc-",
                        "cx", "-c"}) {
    t.push_back(s);
  }
  // UTF-8: whole characters, a character plus ASCII, split characters.
  for (const char* s : {"\xCE\xB1", "\xCE\xB2\xCE\xB3", "\xCE", "\xB1", "\xE4\xB8\x80", "\xE4\xB8",
                        "\x80!", "\xF0\x9F\x98\x80", "\xF0\x9F", "\x98\x81", "\xCE\xB1!", "\xCF\x89x",
                        "\xE4\xB8\x81\xCE\xB1", "\xC3\xA9", "\xED\xA0\x80"}) {
    t.push_back(s);
  }
  t.push_back("");  // an empty non-special token: never allowed
  const TokenId eos_id = static_cast<TokenId>(t.size());
  t.push_back("<eos>");
  const TokenId control_id = static_cast<TokenId>(t.size());
  t.push_back("<ctl>");
  if (eos) *eos = eos_id;
  if (control) *control = control_id;
  const std::size_t rows = t.size() + 37;  // padded rows
  return std::make_shared<Vocabulary>(std::move(t), std::vector<TokenId>{control_id},
                                      std::vector<TokenId>{eos_id}, rows);
}

// Every string of `first` followed by 1 to max_len bytes of `alphabet` (large first-byte groups, as a
// real vocabulary has, for the walks' per-group mechanisms).
inline std::vector<std::string> strings_over(char first, const std::string& alphabet, int max_len) {
  std::vector<std::string> out = every_string(alphabet, static_cast<std::size_t>(max_len));
  for (std::string& s : out) s.insert(s.begin(), first);
  return out;
}

// A vocabulary for token terminals: the 256 single bytes, every pair of `alphabet`, the `text` tokens, then
// the `specials` (control tokens, named by their bytes) and the end-of-sequence token `eos`, and `padding`
// logits rows past them. The ids of the text tokens and of the specials, in order.
struct SpecialVocabulary {
  std::shared_ptr<const Vocabulary> vocab;
  std::vector<TokenId> text, special;
  TokenId eos = 0;
};

inline SpecialVocabulary special_vocabulary(const std::string& alphabet, const std::vector<std::string>& text,
                                            const std::vector<std::string>& specials, const std::string& eos,
                                            std::size_t padding = 0) {
  SpecialVocabulary v;
  std::vector<std::string> t;
  for (int b = 0; b < 256; ++b) t.push_back(std::string(1, static_cast<char>(b)));
  for (const char x : alphabet)
    for (const char y : alphabet) t.push_back(std::string{x, y});
  auto add = [&](const std::string& s) {
    t.push_back(s);
    return static_cast<TokenId>(t.size() - 1);
  };
  for (const std::string& s : text) v.text.push_back(add(s));
  for (const std::string& s : specials) v.special.push_back(add(s));
  v.eos = add(eos);
  const std::size_t rows = t.size() + padding;
  v.vocab = std::make_shared<Vocabulary>(std::move(t), v.special, std::vector<TokenId>{v.eos}, rows);
  return v;
}

inline bool mask_has(const std::vector<std::uint32_t>& mask, TokenId id) {
  return ((mask[static_cast<std::size_t>(id) >> 5] >> (id & 31)) & 1) != 0;
}

inline std::size_t mask_count(const std::vector<std::uint32_t>& mask) {
  std::size_t n = 0;
  for (const std::uint32_t w : mask) n += static_cast<std::size_t>(__builtin_popcount(w));
  return n;
}

inline std::vector<std::uint32_t> brute_force_mask(const Matcher& m) {
  const Vocabulary& v = m.grammar().vocabulary();
  std::vector<std::uint32_t> mask(v.n_mask_words(), 0);
  for (std::size_t id = 0; id < v.n_rows(); ++id) {
    Matcher f = m.fork();
    if (f.accept_token(static_cast<TokenId>(id))) mask[id >> 5] |= 1u << (id & 31);
  }
  return mask;
}

inline std::vector<std::uint32_t> fast_mask(Matcher& m) {
  std::vector<std::uint32_t> mask(m.mask_words(), 0xDEADBEEF);  // poisoned: unwritten words show
  m.fill_next_token_bitmask(mask);
  return mask;
}

// Random reachable states: walks from the start taking random allowed text tokens; restarts when
// stuck or at random. Calls visit(matcher, accepted bytes) at every state.
template <typename Visit>
void random_walk(const CompiledGrammar& cg, std::size_t n_states, std::uint32_t seed, Visit visit) {
  std::mt19937 rng(seed);
  Matcher m(cg);
  std::string text;
  const Vocabulary& v = cg.vocabulary();
  for (std::size_t i = 0; i < n_states; ++i) {
    visit(m, text);
    std::vector<std::uint32_t> mask = fast_mask(m);
    std::vector<TokenId> allowed;
    for (std::size_t id = 0; id < v.n_tokens(); ++id)
      if (((mask[id >> 5] >> (id & 31)) & 1) && !v.is_eos(static_cast<TokenId>(id)))
        allowed.push_back(static_cast<TokenId>(id));
    if (allowed.empty() || rng() % 40 == 0 || text.size() > 60) {
      m.reset();
      text.clear();
      continue;
    }
    TokenId t = allowed[rng() % allowed.size()];
    if (!m.accept_token(t)) throw std::logic_error("random_walk: an allowed token was rejected");
    text += v.token_bytes(t);
  }
}

// The fast mask equals the brute-force mask at n_states random reachable states.
inline void expect_masks_are_brute_force(const CompiledGrammar& cg, std::size_t n_states, std::uint32_t seed) {
  random_walk(cg, n_states, seed, [&](Matcher& walk, const std::string& text) {
    EXPECT_EQ(fast_mask(walk), brute_force_mask(walk)) << text;
  });
}

}  // namespace pse::testing
