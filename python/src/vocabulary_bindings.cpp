// Vocabulary (pse's plain vocabulary, built from Python token bytes or from a tokenizer file) and
// Tokenizer (encode / decode).
#include "vocabulary_bindings.h"

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <string>
#include <vector>

#include "bindings.h"
#include "pie/grammar_vocabulary.h"

namespace orchard::python {

namespace {

using nb::gil_scoped_release;

// A sequence of bytes or str items (str as UTF-8) -> the byte strings.
std::vector<std::string> byte_strings(nb::handle seq, const char* what) {
  if (!PySequence_Check(seq.ptr()) || nb::isinstance<nb::str>(seq) || nb::isinstance<nb::bytes>(seq)) {
    throw nb::type_error((std::string(what) + ": expected a sequence of bytes or str").c_str());
  }
  const Py_ssize_t n = PySequence_Size(seq.ptr());
  if (n < 0) throw nb::python_error();
  std::vector<std::string> out;
  out.reserve(static_cast<std::size_t>(n));
  for (Py_ssize_t i = 0; i < n; ++i) {
    nb::object item = nb::steal(PySequence_GetItem(seq.ptr(), i));
    if (!item.is_valid()) throw nb::python_error();
    if (nb::isinstance<nb::bytes>(item)) {
      nb::bytes b = nb::borrow<nb::bytes>(item);
      out.emplace_back(b.c_str(), b.size());
    } else if (nb::isinstance<nb::str>(item)) {
      Py_ssize_t size = 0;
      const char* data = PyUnicode_AsUTF8AndSize(item.ptr(), &size);
      if (data == nullptr) throw nb::python_error();
      out.emplace_back(data, static_cast<std::size_t>(size));
    } else {
      throw nb::type_error((std::string(what) + "[" + std::to_string(i) + "]: expected bytes or str, got " +
                            nb::type_name(item.type()).c_str())
                               .c_str());
    }
  }
  return out;
}

nb::bytes to_bytes(const std::string& s) { return nb::bytes(s.data(), s.size()); }

}  // namespace

void bind_vocabulary(nb::module_& m) {
  nb::class_<PyVocabulary>(m, "Vocabulary",
                           "What a grammar is compiled against: token id -> raw bytes, special ids, "
                           "end-of-sequence ids, and the logits rows (>= the tokens; padded rows are never "
                           "allowed). Immutable.")
      .def(
          "__init__",
          [](PyVocabulary* self, nb::handle token_bytes, std::vector<pse::TokenId> special_ids,
             std::vector<pse::TokenId> eos_ids, std::size_t n_rows) {
            std::vector<std::string> tokens = byte_strings(token_bytes, "token_bytes");
            std::shared_ptr<const pse::Vocabulary> v;
            {
              gil_scoped_release release;
              v = std::make_shared<const pse::Vocabulary>(std::move(tokens), std::move(special_ids),
                                                          std::move(eos_ids), n_rows);
            }
            new (self) PyVocabulary{std::move(v)};
          },
          nb::arg("token_bytes"), nb::arg("special_ids"), nb::arg("eos_ids"), nb::arg("n_rows") = 0,
          "token_bytes[i]: the bytes token i produces in the middle of a text (special tokens: their "
          "name). Raises ValueError on an id out of range or n_rows smaller than the tokens.")
      .def_static(
          "from_tokenizer",
          [](const PyTokenizer& tok, std::size_t n_rows) {
            gil_scoped_release release;
            return PyVocabulary{pie::grammar_vocabulary(*tok.tokenizer, n_rows)};
          },
          nb::arg("tokenizer"), nb::arg("n_rows") = 0,
          "The vocabulary of a tokenizer as the engine builds it (stop ids: the tokenizer's end-of-generation "
          "tokens). Raises ValueError when n_rows is smaller than the tokenizer.")
      .def_prop_ro("n_tokens", [](const PyVocabulary& v) { return v.vocab->n_tokens(); })
      .def_prop_ro("n_rows", [](const PyVocabulary& v) { return v.vocab->n_rows(); })
      .def_prop_ro("n_mask_words", [](const PyVocabulary& v) { return v.vocab->n_mask_words(); })
      .def_prop_ro("eos_ids", [](const PyVocabulary& v) { return v.vocab->eos_ids(); })
      .def_prop_ro("special_ids", [](const PyVocabulary& v) { return v.vocab->special_ids(); })
      .def_prop_ro("hash", [](const PyVocabulary& v) { return v.vocab->hash(); })
      .def("token_bytes", [](const PyVocabulary& v, pse::TokenId id) { return to_bytes(v.vocab->token_bytes(id)); },
           nb::arg("id"))
      .def("is_special", [](const PyVocabulary& v, pse::TokenId id) { return v.vocab->is_special(id); },
           nb::arg("id"));

  nb::class_<PyTokenizer>(m, "Tokenizer", "Text <-> token ids, exactly as the model was trained. Thread-safe.")
      .def_static(
          "load",
          [](const std::string& path) {
            gil_scoped_release release;
            return PyTokenizer{std::make_shared<const tokenizers::Tokenizer>(tokenizers::Tokenizer::load(path))};
          },
          nb::arg("path"),
          "Loads a .gguf (vocab-only or a whole model), a Hugging Face tokenizer.json, a llama2.c "
          "tokenizer.bin, or a folder with encoder.json + vocab.bpe (Llama 3). Raises TokenizerError.")
      .def(
          "encode",
          [](const PyTokenizer& t, const std::string& text, bool add_bos, bool add_eos, bool parse_special) {
            tokenizers::EncodeOptions o;
            o.add_bos = add_bos;
            o.add_eos = add_eos;
            o.parse_special = parse_special;
            return t.tokenizer->encode(text, o);
          },
          nb::arg("text"), nb::arg("add_bos") = false, nb::arg("add_eos") = false, nb::arg("parse_special") = false,
          nb::call_guard<gil_scoped_release>(),
          "Token ids of `text`. parse_special: special-token text ('<|eot_id|>') becomes the special token.")
      .def(
          "decode_bytes",
          [](const PyTokenizer& t, const std::vector<tokenizers::TokenId>& ids, bool skip_special) {
            std::string s;
            {
              gil_scoped_release release;
              s = t.tokenizer->decode(ids, {.skip_special = skip_special});
            }
            return to_bytes(s);
          },
          nb::arg("ids"), nb::arg("skip_special") = false,
          "The raw bytes of `ids` (possibly a split UTF-8 character). Raises TokenizerError on a bad id.")
      .def_prop_ro("vocab_size", [](const PyTokenizer& t) { return t.tokenizer->vocab_size(); })
      .def("token_bytes", [](const PyTokenizer& t, tokenizers::TokenId id) { return to_bytes(t.tokenizer->token_bytes(id)); },
           nb::arg("id"))
      .def("token_text", [](const PyTokenizer& t, tokenizers::TokenId id) { return t.tokenizer->token_text(id); },
           nb::arg("id"))
      .def("is_special", [](const PyTokenizer& t, tokenizers::TokenId id) { return t.tokenizer->is_special(id); },
           nb::arg("id"))
      .def("find", [](const PyTokenizer& t, const std::string& text) { return t.tokenizer->find(text); },
           nb::arg("token_text"))
      .def_prop_ro("add_bos_by_default", [](const PyTokenizer& t) { return t.tokenizer->add_bos_by_default(); })
      .def_prop_ro("special_tokens",
                   [](const PyTokenizer& t) {
                     const tokenizers::SpecialTokens& s = t.tokenizer->special_tokens();
                     nb::dict d;
                     auto put = [&](const char* name, const std::optional<tokenizers::TokenId>& id) {
                       d[name] = id ? nb::object(nb::int_(*id)) : nb::none();
                     };
                     put("bos", s.bos);
                     put("eos", s.eos);
                     put("eot", s.eot);
                     put("unk", s.unk);
                     put("pad", s.pad);
                     d["end_of_generation"] = nb::cast(s.end_of_generation);
                     return d;
                   });
}

}  // namespace orchard::python
