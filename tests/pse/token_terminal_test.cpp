// Token terminals (Expr::kToken): whole tokens read by id or by name (`<[5]>`, `<think>`, `!<...>`), the
// syntax GBNF shares with llama.cpp, their resolution against a vocabulary, and the matcher: masks equal
// the brute-force mask (every token tried on a fork) in every table mode, text tokens read both as bytes
// and as a token, end-of-sequence ids named by a grammar, rollback, fork, must_stop and the forced
// continuation.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine_test_util.h"
#include "pse/gbnf.h"
#include "vocabulary_index.h"

namespace pse::testing {
namespace {

// Single bytes, pairs over a small alphabet, a few longer text tokens, the text token "<call>" (the
// special <call>'s bytes: a name finds the special one), then the specials <think>, </think>, <call> and
// <eos> (end of sequence), then padded rows.
struct TokenVocabulary {
  std::shared_ptr<const Vocabulary> vocab;
  TokenId think = 0, end_think = 0, call = 0, eos = 0, xy = 0, call_text = 0;
};

TokenVocabulary token_vocabulary() {
  const SpecialVocabulary s =
      special_vocabulary("abxyz!,<>", {"abab", "xyz", "xyz!", "ab,", "<call>"}, {"<think>", "</think>", "<call>"},
                         "<eos>", 20);
  TokenVocabulary v;
  v.vocab = s.vocab;
  v.think = s.special[0], v.end_think = s.special[1], v.call = s.special[2], v.eos = s.eos;
  v.call_text = s.text[4];
  v.xy = *s.vocab->find_token("xy");
  return v;
}

std::vector<std::string> brute_force_grammars(const TokenVocabulary& v) {
  const std::string xy = std::to_string(v.xy), eos = std::to_string(v.eos);
  return {
      // A reasoning section: any token but </think>, then an answer.
      "root ::= <think> body </think> answer\nbody ::= !</think>*\nanswer ::= \"a\" [ab]* \",\"?\n",
      // A text token read as a token and, in another parse, as bytes.
      "root ::= (<[" + xy + "]> | \"x\" \"y\" \"z\") \"!\" [ab]*\n",
      // Tokens at rule ends, in repetitions, after and before nullable rules.
      "root ::= item+\nitem ::= x <call> x \"b\" | \"(\" inner \")\"\ninner ::= <call>* x\nx ::= \"\" | \"a\"\n",
      // The end-of-sequence id named: read as a token, then the output may end.
      "root ::= \"a\"+ <[" + eos + "]> \"b\"?\n",
      // Every token but end of sequence; every token but single bytes and the specials.
      "root ::= \"a\" <[*]> \"b\" | \"x\" <[^0-255," + std::to_string(v.think) + "-" + std::to_string(v.call) +
          "]>{1,3} \"z\"\n",
      // A named text token and a text literal of the same bytes.
      "root ::= (<[" + std::to_string(v.call_text) + "]> | \"<call>\") \"a\"\n",
  };
}

TEST(TokenTerminals, MasksEqualBruteForceInEveryTableMode) {
  const TokenVocabulary v = token_vocabulary();
  const std::vector<std::string> grammars = brute_force_grammars(v);
  for (std::size_t k = 0; k < grammars.size(); ++k) {
    const Grammar g = parse_gbnf(grammars[k]);
    for (const TableBuild build : {TableBuild::kInCompile, TableBuild::kInBackground, TableBuild::kAtFirstUse}) {
      CompileOptions options;
      options.tables = build;
      const CompiledGrammar cg = compile_grammar(g, v.vocab, options);
      std::size_t n = 0, with_specials = 0;
      random_walk(cg, 120, 11 + static_cast<std::uint32_t>(k), [&](Matcher& m, const std::string& text) {
        const std::vector<std::uint32_t> mask = fast_mask(m);
        ASSERT_EQ(mask, brute_force_mask(m)) << "grammar " << k << " after \"" << text << "\"";
        // Sound: every allowed token leads where the output can still end.
        for (std::size_t id = 0; id < v.vocab->n_rows(); ++id) {
          if (!mask_has(mask, static_cast<TokenId>(id)) || v.vocab->is_eos(static_cast<TokenId>(id))) continue;
          Matcher f = m.fork();
          ASSERT_TRUE(f.accept_token(static_cast<TokenId>(id)));
          ASSERT_TRUE(f.can_stop() || mask_count(fast_mask(f)) > 0) << "grammar " << k << " dead after " << id;
        }
        with_specials += mask_has(mask, v.think) || mask_has(mask, v.end_think) || mask_has(mask, v.call) ||
                         (mask_has(mask, v.eos) && !m.can_stop());
        ++n;
      });
      EXPECT_EQ(n, 120u);
      if (k != 1 && k != 5) {
        EXPECT_GT(with_specials, 0u) << "grammar " << k << " never reached a named special";
      }
    }
  }
}

TEST(TokenTerminals, ReasoningSection) {
  const TokenVocabulary v = token_vocabulary();
  Matcher m(compile_grammar(parse_gbnf(brute_force_grammars(v)[0]), v.vocab));
  std::vector<std::uint32_t> mask = fast_mask(m);
  EXPECT_EQ(mask_count(mask), 1u);
  EXPECT_TRUE(mask_has(mask, v.think));
  EXPECT_FALSE(m.accept_token(v.end_think));
  EXPECT_TRUE(m.forced_continuation().empty());  // a token comes next, not bytes
  ASSERT_TRUE(m.accept_token(v.think));
  mask = fast_mask(m);
  // Every text token, <think> and <call> inside; </think> to close; never end of sequence or padding.
  EXPECT_EQ(mask_count(mask), v.vocab->index().text_tokens().size() + 3);
  EXPECT_FALSE(mask_has(mask, v.eos));
  EXPECT_FALSE(m.must_stop());
  for (const TokenId t : {v.xy, v.call, v.think, static_cast<TokenId>('q')}) ASSERT_TRUE(m.accept_token(t));
  ASSERT_TRUE(m.accept_token(v.end_think));
  mask = fast_mask(m);
  EXPECT_TRUE(mask_has(mask, static_cast<TokenId>('a')));
  EXPECT_FALSE(mask_has(mask, v.call));
  EXPECT_FALSE(mask_has(mask, static_cast<TokenId>('q')));
  EXPECT_EQ(m.forced_continuation(), "a");
  ASSERT_TRUE(m.accept_token(static_cast<TokenId>('a')));
  EXPECT_TRUE(m.can_stop());
  // Rollback across the token steps, then the same masks again.
  const std::vector<std::uint32_t> at_end = fast_mask(m);
  m.rollback(2);
  EXPECT_TRUE(mask_has(fast_mask(m), v.end_think));
  ASSERT_TRUE(m.accept_token(v.end_think));
  ASSERT_TRUE(m.accept_token(static_cast<TokenId>('a')));
  EXPECT_EQ(fast_mask(m), at_end);
  // A fork is independent.
  Matcher f = m.fork();
  ASSERT_TRUE(f.accept_token(static_cast<TokenId>(',')));
  EXPECT_TRUE(f.must_stop());
  EXPECT_FALSE(m.must_stop());
  EXPECT_TRUE(m.accept_token(v.eos));
  EXPECT_TRUE(m.is_terminated());
}

TEST(TokenTerminals, TextTokenReadAsTokenAndAsBytes) {
  const TokenVocabulary v = token_vocabulary();
  Matcher m(compile_grammar(parse_gbnf(brute_force_grammars(v)[1]), v.vocab));
  ASSERT_TRUE(m.accept_token(v.xy));
  const std::vector<std::uint32_t> mask = fast_mask(m);
  EXPECT_TRUE(mask_has(mask, static_cast<TokenId>('!')));  // after the token <[xy]>
  EXPECT_TRUE(mask_has(mask, static_cast<TokenId>('z')));  // after the bytes "xy"
  EXPECT_FALSE(mask_has(mask, static_cast<TokenId>('a')));
  // "x" then "y" as bytes is not the token: only the literal's parse goes on.
  Matcher b(m.grammar());
  ASSERT_TRUE(b.accept_token(static_cast<TokenId>('x')));
  ASSERT_TRUE(b.accept_token(static_cast<TokenId>('y')));
  EXPECT_FALSE(mask_has(fast_mask(b), static_cast<TokenId>('!')));
}

TEST(TokenTerminals, NamedEndOfSequenceIsReadAsAToken) {
  const TokenVocabulary v = token_vocabulary();
  Matcher m(compile_grammar(parse_gbnf(brute_force_grammars(v)[3]), v.vocab));
  ASSERT_TRUE(m.accept_token(static_cast<TokenId>('a')));
  EXPECT_FALSE(m.can_stop());
  EXPECT_TRUE(mask_has(fast_mask(m), v.eos));  // the grammar names it
  ASSERT_TRUE(m.accept_token(v.eos));
  EXPECT_FALSE(m.is_terminated());
  EXPECT_TRUE(m.can_stop());
  ASSERT_TRUE(m.accept_token(v.eos));  // now the end of the output
  EXPECT_TRUE(m.is_terminated());
}

TEST(TokenTerminals, NamesResolveSpecialTokensFirst) {
  const TokenVocabulary v = token_vocabulary();
  EXPECT_EQ(v.vocab->find_token("<call>"), v.call);
  EXPECT_EQ(v.vocab->find_token("<think>"), v.think);
  for (const std::string text : {"ab", "xyz!", "a", "\xff"}) {
    ASSERT_TRUE(v.vocab->find_token(text).has_value()) << text;
    EXPECT_EQ(v.vocab->token_bytes(*v.vocab->find_token(text)), text);
  }
  EXPECT_FALSE(v.vocab->find_token("abx").has_value());
  EXPECT_FALSE(v.vocab->find_token("").has_value());
  Matcher m(compile_grammar(parse_gbnf("root ::= <call> \"!\"\n"), v.vocab));
  EXPECT_FALSE(m.accept_token(v.call_text));  // the text token with the special's bytes
  ASSERT_TRUE(m.accept_token(v.call));
  // <ab> is not a token name (its bytes are "<ab>", a pair "<a" "b>" at most): a compile error.
  EXPECT_THROW(compile_grammar(parse_gbnf("root ::= <ab>\n"), v.vocab), GrammarError);
}

void expect_compile_error(const TokenVocabulary& v, const std::string& text, std::string_view fragment) {
  try {
    compile_grammar(parse_gbnf(text), v.vocab);
    ADD_FAILURE() << "should not compile:\n" << text;
  } catch (const GrammarError& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).rfind("[compile] token ", 0), 0u) << e.what();
  }
}

TEST(TokenTerminals, CompileErrorsNameTheToken) {
  const TokenVocabulary v = token_vocabulary();
  const std::string n_tokens = std::to_string(v.vocab->n_tokens());
  expect_compile_error(v, "root ::= <nope>\n", "<nope>: no token of the vocabulary has exactly these bytes");
  expect_compile_error(v, "root ::= <[" + n_tokens + "]>\n", "outside the vocabulary's " + n_tokens + " tokens");
  expect_compile_error(v, "root ::= \"a\" | <[5-99999]>\n", "<[5-99999]>: id 99999 is outside");
  // Every token excluded (end of sequence is never read by a negated set).
  expect_compile_error(v, "root ::= <[^0-" + std::to_string(v.eos - 1) + "]>\n", "reads no token");
}

TEST(TokenTerminals, BuildersValidate) {
  Grammar g;
  EXPECT_THROW(g.add_token({}), GrammarError);
  EXPECT_THROW(g.add_token({{5, 3}}), GrammarError);
  EXPECT_THROW(g.add_token({{0, kMaxTokenId + 1u}}), GrammarError);
  EXPECT_THROW(g.add_token_named(""), GrammarError);
  const ExprId e = g.add_token({{9, 9}, {3, 4}, {5, 6}});
  EXPECT_EQ(g.expr(e).token_ids, (std::vector<TokenIdRange>{{3, 6}, {9, 9}}));
}

TEST(TokenTerminals, EmbedKeepsTokensAndRenamesRules) {
  const Grammar inner = parse_gbnf("root ::= <call> x\nx ::= \"a\" | <[3]>\n");
  Grammar outer;
  const ExprId copy = outer.embed(inner, "in_");
  outer.set_root(outer.add_rule("root", outer.add_sequence({outer.add_bytes("!"), copy})));
  // (GBNF declares a rule's references before the rule: x is rule 0.)
  EXPECT_EQ(outer.to_string(), "root ::= \"!\" in_root\nin_x ::= \"a\" | <[3]>\nin_root ::= <call> in_x\n");
  EXPECT_THROW(outer.embed(inner, "in_"), GrammarError);  // its rules are defined already
  Grammar undefined;
  undefined.set_root(undefined.declare_rule("r"));
  EXPECT_THROW(outer.embed(undefined, "u_"), GrammarError);
}

}  // namespace
}  // namespace pse::testing
