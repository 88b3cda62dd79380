// Compiler (the front-ends, a compile cache), CompiledGrammar and GrammarMatcher, with XGrammar's method
// names and shapes (orchard.grammar re-exports GrammarMatcher as it is: no Python layer on the hot path).
#include "grammar_bindings.h"

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <atomic>
#include <memory>
#include <optional>
#include <string>

#include "bindings.h"
#include "pse/gbnf.h"
#include "pse/json_schema.h"
#include "pse/lark.h"
#include "pse/matcher.h"
#include "pse/regex.h"
#include "vocabulary_bindings.h"

namespace orchard::python {

namespace {

using nb::gil_scoped_release;

pse::TableBuild table_build(const std::string& s) {
  if (s == "compile") return pse::TableBuild::kInCompile;
  if (s == "background") return pse::TableBuild::kInBackground;
  if (s == "first_use") return pse::TableBuild::kAtFirstUse;
  throw nb::value_error(("table_build: expected 'compile', 'background' or 'first_use', got '" + s + "'").c_str());
}

pse::JsonLayout json_layout(const std::string& s) {
  if (s == "flexible") return pse::JsonLayout::kFlexible;
  if (s == "compact") return pse::JsonLayout::kCompact;
  if (s == "indented") return pse::JsonLayout::kIndented;
  throw nb::value_error(("layout: expected 'flexible', 'compact' or 'indented', got '" + s + "'").c_str());
}

// A compile cache over one vocabulary (pse::Compiler), or none.
struct PyCompiler {
  std::shared_ptr<const pse::Vocabulary> vocab;
  pse::CompileOptions options;
  std::unique_ptr<pse::Compiler> cache;  // null: every compile is fresh

  PyCompiledGrammar compile(const pse::Grammar& g) const {
    return {cache ? cache->compile(g) : pse::compile_grammar(g, vocab, options)};
  }
};

// A matcher and a guard against two threads using it at once (the calls release the GIL; a Matcher is
// one sequence's cursor and not thread-safe).
struct PyMatcher {
  PyMatcher(pse::Matcher m, bool terminate_without_stop) : matcher(std::move(m)), terminate_without_stop_token(terminate_without_stop) {}
  PyMatcher(PyMatcher&& o) noexcept : matcher(std::move(o.matcher)), terminate_without_stop_token(o.terminate_without_stop_token) {}

  pse::Matcher matcher;
  bool terminate_without_stop_token = false;
  std::atomic<bool> busy{false};

  bool terminated() const {
    return matcher.is_terminated() || (terminate_without_stop_token && matcher.must_stop());
  }
};

class Busy {
 public:
  explicit Busy(PyMatcher& m) : m_(m) {
    if (m_.busy.exchange(true, std::memory_order_acquire)) {
      throw std::runtime_error(
          "[matcher] used from two threads at once: a GrammarMatcher is one sequence's cursor (fork() one per "
          "thread)");
    }
  }
  ~Busy() { m_.busy.store(false, std::memory_order_release); }

 private:
  PyMatcher& m_;
};

pse::TokenId token_id(const PyMatcher& m, std::int64_t id) {
  const std::size_t rows = m.matcher.grammar().vocabulary().n_rows();
  if (id < 0 || static_cast<std::uint64_t>(id) >= rows) {
    throw nb::value_error(
        ("[matcher] accept_token: token id " + std::to_string(id) + " is outside [0, " + std::to_string(rows) + ")")
            .c_str());
  }
  return static_cast<pse::TokenId>(id);
}

// The longest prefix of `s` that ends on a whole UTF-8 character.
std::size_t whole_characters(const std::string& s) {
  std::size_t end = s.size();
  std::size_t back = 0;
  while (back < 4 && back < end && (static_cast<unsigned char>(s[end - 1 - back]) & 0xC0) == 0x80) ++back;
  if (back < end) {
    const unsigned char lead = static_cast<unsigned char>(s[end - 1 - back]);
    const std::size_t need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
    if (need > back + 1) return end - 1 - back;
  }
  return end;
}

nb::dict stats_dict(const pse::CompileStats& s) {
  nb::dict d;
  d["rules"] = s.n_rules;
  d["states"] = s.n_states;
  d["scan_states"] = s.n_scan_states;
  d["tables"] = s.n_tables;
  d["shared_tables"] = s.n_shared_tables;
  d["uncertain_tokens"] = s.n_uncertain;
  d["memory_bytes"] = s.memory_bytes;
  d["automaton_ms"] = s.automaton_ms;
  d["classes_ms"] = s.classes_ms;
  d["closures_ms"] = s.closures_ms;
  d["tables_ms"] = s.tables_ms;
  return d;
}

}  // namespace

void bind_grammar(nb::module_& m) {
  nb::class_<PyCompiledGrammar>(m, "CompiledGrammar",
                                "A grammar compiled against a vocabulary: immutable, thread-safe, shared by every "
                                "GrammarMatcher made from it.")
      .def_prop_ro("vocab_size", [](const PyCompiledGrammar& g) { return g.grammar.vocabulary().n_rows(); })
      .def_prop_ro("memory_size_bytes", [](const PyCompiledGrammar& g) { return g.grammar.stats().memory_bytes; })
      .def_prop_ro("stats", [](const PyCompiledGrammar& g) { return stats_dict(g.grammar.stats()); },
                   "Compile statistics (automaton states, token tables, times in ms).")
      .def(
          "wait_for_tables",
          [](const PyCompiledGrammar& g) {
            pse::CompileStats s;
            {
              gil_scoped_release release;
              s = g.grammar.wait_for_tables();
            }
            return stats_dict(s);
          },
          "Blocks until the token tables built in the background are done; returns the statistics.");

  nb::class_<PyCompiler>(m, "Compiler", "Grammar front-ends and a compile cache over one vocabulary.")
      .def(
          "__init__",
          [](PyCompiler* self, const PyVocabulary& vocab, std::size_t threads, bool cache_enabled,
             std::size_t cache_capacity, const std::string& tables, double max_compile_ms) {
            pse::CompileOptions o;
            o.threads = threads;
            o.tables = table_build(tables);
            if (!(max_compile_ms > 0)) throw nb::value_error("max_compile_ms must be positive");
            o.max_compile_ms = max_compile_ms;
            if (cache_enabled && cache_capacity == 0) throw nb::value_error("cache_capacity must be at least 1");
            new (self) PyCompiler{vocab.vocab, o,
                                  cache_enabled ? std::make_unique<pse::Compiler>(vocab.vocab, o, cache_capacity)
                                                : nullptr};
          },
          nb::arg("vocabulary"), nb::arg("threads") = 0, nb::arg("cache_enabled") = true,
          nb::arg("cache_capacity") = 64, nb::arg("table_build") = "background", nb::arg("max_compile_ms") = 10000.0)
      .def(
          "compile_json_schema",
          [](const PyCompiler& c, const std::string& schema, const std::string& layout, std::uint32_t indent,
             std::uint32_t max_whitespace, bool any_order, bool strict_keywords, const std::string& item_separator,
             const std::string& key_separator) {
            pse::JsonSchemaOptions o;
            o.layout = json_layout(layout);
            o.item_separator = item_separator;
            o.key_separator = key_separator;
            o.indent_width = indent;
            o.max_whitespace_run = max_whitespace;
            if (any_order) o.property_order = pse::JsonPropertyOrder::kAnyOrder;
            if (strict_keywords) o.unknown_keywords = pse::JsonSchemaOptions::UnknownKeywords::kError;
            gil_scoped_release release;
            return c.compile(pse::json_schema_to_grammar(std::string_view(schema), o));
          },
          nb::arg("schema"), nb::arg("layout") = "flexible", nb::arg("indent") = 2, nb::arg("max_whitespace") = 4,
          nb::arg("any_order") = false, nb::arg("strict_keywords") = false, nb::arg("item_separator") = ",",
          nb::arg("key_separator") = ":",
          "Compiles JSON Schema text (property order kept). Raises SchemaError (.pointer, .keyword), "
          "GrammarLimitError; ValueError for a separator that is not its punctuation with whitespace around it.")
      .def(
          "compile_gbnf",
          [](const PyCompiler& c, const std::string& text, const std::string& root) {
            gil_scoped_release release;
            return c.compile(pse::parse_gbnf(text, root));
          },
          nb::arg("text"), nb::arg("root_rule_name") = "root")
      .def(
          "compile_lark",
          [](const PyCompiler& c, const std::string& text, const std::string& start) {
            gil_scoped_release release;
            return c.compile(pse::parse_lark(text, start));
          },
          nb::arg("text"), nb::arg("start_rule_name") = "start")
      .def(
          "compile_regex",
          [](const PyCompiler& c, const std::string& pattern) {
            gil_scoped_release release;
            return c.compile(pse::parse_regex(pattern));
          },
          nb::arg("pattern"))
      .def_prop_ro("cache_size", [](const PyCompiler& c) { return c.cache ? c.cache->cache_size() : 0; })
      .def_prop_ro("cache_hits", [](const PyCompiler& c) { return c.cache ? c.cache->cache_hits() : 0; })
      .def_prop_ro("vocab_size", [](const PyCompiler& c) { return c.vocab->n_rows(); });

  nb::class_<PyMatcher>(m, "GrammarMatcher",
                        "One sequence's cursor over a CompiledGrammar: the next-token bitmask, accepting tokens "
                        "or strings, rollback, fork, the forced continuation. Not shared between threads "
                        "(fork() one per thread); many matchers of one grammar may run at once.")
      .def(
          "__init__",
          [](PyMatcher* self, const PyCompiledGrammar& g, bool terminate_without_stop_token) {
            new (self) PyMatcher(pse::Matcher(g.grammar), terminate_without_stop_token);
          },
          nb::arg("compiled_grammar"), nb::kw_only(), nb::arg("terminate_without_stop_token") = false,
          "terminate_without_stop_token: is_terminated() once the output is complete and nothing can extend it, "
          "without an end-of-sequence token.")
      .def(
          "accept_token",
          [](PyMatcher& self, std::int64_t id) {
            Busy busy(self);
            if (self.terminated()) throw_terminated("accept_token");
            const pse::TokenId t = token_id(self, id);
            gil_scoped_release release;
            return self.matcher.accept_token(t);
          },
          nb::arg("token_id"),
          "True and advanced when the grammar allows the token, False and unchanged otherwise. Raises "
          "ValueError for an id outside the vocabulary, MatcherTerminatedError after termination.")
      .def(
          "accept_string",
          [](PyMatcher& self, nb::handle input) {
            std::string bytes;
            if (nb::isinstance<nb::bytes>(input)) {
              nb::bytes b = nb::borrow<nb::bytes>(input);
              bytes.assign(b.c_str(), b.size());
            } else if (nb::isinstance<nb::str>(input)) {
              Py_ssize_t size = 0;
              const char* data = PyUnicode_AsUTF8AndSize(input.ptr(), &size);
              if (data == nullptr) throw nb::python_error();
              bytes.assign(data, static_cast<std::size_t>(size));
            } else {
              throw nb::type_error(
                  ("accept_string: expected str or bytes, got " + std::string(nb::type_name(input.type()).c_str())).c_str());
            }
            Busy busy(self);
            if (self.terminated()) throw_terminated("accept_string");
            gil_scoped_release release;
            return self.matcher.accept_bytes(bytes);
          },
          nb::arg("input_str"),
          "Accepts text (str as UTF-8, or bytes): True and advanced when the grammar allows all of it, False and "
          "unchanged otherwise. One step for rollback.")
      .def(
          "fill_next_token_bitmask",
          [](PyMatcher& self, nb::handle bitmask, std::int64_t index) {
            const BitmaskView view = bitmask_view(bitmask, "fill_next_token_bitmask");
            Busy busy(self);
            if (self.terminated()) throw_terminated("fill_next_token_bitmask");
            const std::size_t words = self.matcher.mask_words();
            if (view.words != words) {
              throw nb::value_error(("fill_next_token_bitmask: the bitmask's last axis has " + std::to_string(view.words) +
                                     " words; this grammar's vocabulary (" +
                                     std::to_string(self.matcher.grammar().vocabulary().n_rows()) + " tokens) needs " +
                                     std::to_string(words))
                                        .c_str());
            }
            if (index < 0 || static_cast<std::uint64_t>(index) >= view.rows) {
              throw nb::index_error(("fill_next_token_bitmask: index " + std::to_string(index) +
                                     " is outside the bitmask's " + std::to_string(view.rows) + " rows")
                                        .c_str());
            }
            const std::span<std::uint32_t> row = view.row(static_cast<std::size_t>(index));
            gil_scoped_release release;
            self.matcher.fill_next_token_bitmask(row);
            // Whether applying it changes anything (some token is not allowed), as XGrammar returns.
            const std::size_t rows = self.matcher.grammar().vocabulary().n_rows();
            for (std::size_t w = 0; w < rows / 32; ++w) {
              if (row[w] != 0xFFFFFFFFu) return true;
            }
            return rows % 32 != 0 && row[rows / 32] != (1u << (rows % 32)) - 1;
          },
          nb::arg("bitmask"), nb::arg("index") = 0,
          "Writes the allowed next tokens into row `index` of `bitmask` (int32, shape (words,) or (batch, words), "
          "words = ceil(vocab_size / 32); numpy array or CPU torch tensor, written in place). Returns whether some "
          "token is not allowed. Raises TypeError / ValueError / IndexError for a wrong bitmask or index, "
          "MatcherTerminatedError after termination.")
      .def(
          "rollback",
          [](PyMatcher& self, std::int64_t n) {
            Busy busy(self);
            if (n < 0) throw nb::value_error(("rollback: num_tokens must be >= 0, got " + std::to_string(n)).c_str());
            gil_scoped_release release;
            self.matcher.rollback(static_cast<std::size_t>(n));
          },
          nb::arg("num_tokens") = 1,
          "Undoes the last num_tokens steps (tokens or accept_string calls). Raises ValueError when fewer were "
          "accepted.")
      .def(
          "fork",
          [](PyMatcher& self) {
            Busy busy(self);
            gil_scoped_release release;
            return PyMatcher(self.matcher.fork(), self.terminate_without_stop_token);
          },
          "An independent copy: what one accepts never shows in the other.")
      .def(
          "reset",
          [](PyMatcher& self) {
            Busy busy(self);
            gil_scoped_release release;
            self.matcher.reset();
          },
          "Back to the start of the grammar.")
      .def("is_terminated", [](const PyMatcher& self) { return self.terminated(); },
           "True once an end-of-sequence token was accepted (or, with terminate_without_stop_token, once nothing "
           "can extend the output).")
      .def("is_completed", [](PyMatcher& self) { Busy busy(self); return self.matcher.can_stop(); },
           "The output so far is complete: an end-of-sequence token is allowed now.")
      .def("must_stop", [](PyMatcher& self) { Busy busy(self); return self.matcher.must_stop(); },
           "Complete, and no byte or token can extend the output.")
      .def(
          "find_jump_forward_string",
          [](PyMatcher& self) {
            Busy busy(self);
            std::string s;
            {
              gil_scoped_release release;
              s = self.matcher.forced_continuation();
            }
            s.resize(whole_characters(s));
            return nb::str(s.data(), s.size());
          },
          "The longest text every valid continuation starts with (whole characters; empty when none). The state is "
          "unchanged.")
      .def_prop_ro("num_accepted_steps", [](const PyMatcher& self) { return self.matcher.n_steps(); })
      .def_prop_ro("stop_token_ids", [](const PyMatcher& self) { return self.matcher.grammar().vocabulary().eos_ids(); })
      .def_prop_ro("vocab_size", [](const PyMatcher& self) { return self.matcher.grammar().vocabulary().n_rows(); });
}

}  // namespace orchard::python
