// Orchard's C++ errors as Python exceptions. The classes derive from the built-in ones a Python caller
// expects (bad input: ValueError; a file: OSError; a state or a bound: RuntimeError) and carry the place
// of the fault as attributes: GrammarError.line / .column, SchemaError.pointer / .keyword,
// RequestError.param.
#include <Python.h>

#include <stdexcept>
#include <string>

#include "bindings.h"
#include "pie/completions.h"
#include "pie/error.h"
#include "pie/model_store.h"
#include "pse/error.h"
#include "tensor/error.h"
#include "tokenizers/error.h"

namespace orchard::python {

namespace {

class MatcherTerminated : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct Classes {
  PyObject* orchard_error = nullptr;  // base of all: OrchardError(Exception)
  PyObject* grammar_error = nullptr;  // GrammarError(OrchardError, ValueError)
  PyObject* schema_error = nullptr;   // SchemaError(OrchardError, ValueError)
  PyObject* limit_error = nullptr;    // GrammarLimitError(OrchardError, RuntimeError)
  PyObject* terminated = nullptr;     // MatcherTerminatedError(OrchardError, RuntimeError)
  PyObject* request_error = nullptr;  // RequestError(OrchardError, ValueError)
  PyObject* capacity_error = nullptr; // CapacityError(OrchardError, RuntimeError)
  PyObject* model_error = nullptr;    // ModelError(OrchardError, RuntimeError)
  PyObject* model_not_found = nullptr;// ModelNotFoundError(ModelError, FileNotFoundError)
  PyObject* tokenizer_error = nullptr;// TokenizerError(OrchardError, ValueError)
};
Classes classes;

PyObject* make_class(nb::module_& m, const char* name, const char* doc, std::initializer_list<PyObject*> bases) {
  PyObject* tuple = PyTuple_New(static_cast<Py_ssize_t>(bases.size()));
  Py_ssize_t i = 0;
  for (PyObject* b : bases) {
    Py_INCREF(b);
    PyTuple_SET_ITEM(tuple, i++, b);
  }
  const std::string qualified = std::string("orchard.") + name;
  PyObject* cls = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, tuple, nullptr);
  Py_DECREF(tuple);
  if (cls == nullptr) throw nb::python_error();
  m.attr(name) = nb::handle(cls);
  return cls;  // kept for the module's lifetime (the module holds a reference too)
}

// Raises `cls(message)` with the attributes set on the instance.
void raise(PyObject* cls, const char* what, std::initializer_list<std::pair<const char*, nb::object>> attrs = {}) {
  const std::string message(what);
  nb::object text = nb::steal(PyUnicode_DecodeUTF8(message.data(), static_cast<Py_ssize_t>(message.size()),
                                                   "replace"));
  if (!text.is_valid()) return;  // the decode error is set
  nb::object exc = nb::steal(PyObject_CallOneArg(cls, text.ptr()));
  if (!exc.is_valid()) return;
  for (const auto& [name, value] : attrs) {
    if (PyObject_SetAttrString(exc.ptr(), name, value.ptr()) != 0) return;
  }
  PyErr_SetObject(cls, exc.ptr());
}

nb::object place(std::size_t v) { return v == 0 ? nb::object(nb::none()) : nb::object(nb::int_(v)); }

void translate(const std::exception_ptr& p, void*) {
  try {
    std::rethrow_exception(p);
  } catch (const MatcherTerminated& e) {
    raise(classes.terminated, e.what());
  } catch (const pse::GrammarError& e) {
    raise(classes.grammar_error, e.what(), {{"line", place(e.line())}, {"column", place(e.column())}});
  } catch (const pse::SchemaError& e) {
    raise(classes.schema_error, e.what(), {{"pointer", nb::str(e.pointer().c_str())},
                                            {"keyword", nb::str(e.keyword().c_str())}});
  } catch (const pse::LimitError& e) {
    raise(classes.limit_error, e.what());
  } catch (const pse::InputError& e) {
    PyErr_SetString(PyExc_ValueError, e.what());
  } catch (const pie::ModelNotFoundError& e) {
    raise(classes.model_not_found, e.what());
  } catch (const pie::ModelError& e) {
    raise(classes.model_error, e.what());
  } catch (const pie::RequestError& e) {
    raise(classes.request_error, e.what(), {{"param", nb::str(e.param().c_str())}});
  } catch (const pie::CapacityError& e) {
    raise(classes.capacity_error, e.what());
  } catch (const tokenizers::FileError& e) {
    raise(classes.tokenizer_error, e.what());
  } catch (const tokenizers::Error& e) {
    raise(classes.tokenizer_error, e.what());
  } catch (const pie::Error& e) {
    raise(classes.orchard_error, e.what());
  } catch (const pse::Error& e) {
    raise(classes.orchard_error, e.what());
  } catch (const tensor::Error& e) {
    raise(classes.orchard_error, e.what());
  }
}

}  // namespace

void throw_terminated(const char* operation) {
  throw MatcherTerminated(std::string("[matcher] ") + operation +
                         ": the matcher has terminated (it accepted an end-of-sequence token); "
                         "reset() or rollback() it first");
}

void bind_errors(nb::module_& m) {
  classes.orchard_error = make_class(m, "OrchardError", "Base class of Orchard's errors.", {PyExc_Exception});
  classes.grammar_error = make_class(
      m, "GrammarError",
      "Malformed grammar or regex text, or an ill-formed grammar. .line and .column (1-based) say where, "
      "or are None when the fault has no single place.",
      {classes.orchard_error, PyExc_ValueError});
  classes.schema_error = make_class(
      m, "SchemaError",
      "A JSON Schema that is malformed or uses a feature that cannot be enforced exactly. .pointer is the "
      "JSON pointer of the schema at fault, .keyword the keyword.",
      {classes.orchard_error, PyExc_ValueError});
  classes.limit_error = make_class(m, "GrammarLimitError",
                                   "Compilation hit a bound (time, memory, automaton states) or the input "
                                   "is over a size limit.",
                                   {classes.orchard_error, PyExc_RuntimeError});
  classes.terminated = make_class(m, "MatcherTerminatedError",
                                  "A GrammarMatcher used after it accepted an end-of-sequence token.",
                                  {classes.orchard_error, PyExc_RuntimeError});
  classes.request_error = make_class(m, "RequestError",
                                     "A generation request the engine cannot serve as asked. .param names "
                                     "the request field at fault (empty when none).",
                                     {classes.orchard_error, PyExc_ValueError});
  classes.capacity_error = make_class(m, "CapacityError", "The engine cannot take more requests now.",
                                      {classes.orchard_error, PyExc_RuntimeError});
  classes.model_error = make_class(m, "ModelError", "A model that cannot be loaded.",
                                   {classes.orchard_error, PyExc_RuntimeError});
  classes.model_not_found = make_class(m, "ModelNotFoundError",
                                       "A model name that is neither a file nor a stored model.",
                                       {classes.model_error, PyExc_FileNotFoundError});
  classes.tokenizer_error = make_class(m, "TokenizerError",
                                       "A tokenizer file that cannot be read, or text or ids it cannot take.",
                                       {classes.orchard_error, PyExc_ValueError});
  nb::register_exception_translator(translate);
}

}  // namespace orchard::python
