// orchard._orchard: the native half of the `orchard` Python package. Every call that computes (compiles,
// masks, tokenizes, generates) releases the GIL.
#include "bindings.h"

NB_MODULE(_orchard, m) {
  m.doc() = "Orchard's native module: pse (grammar masks) and pie (the engine). Use the `orchard` package.";
  orchard::python::bind_errors(m);
  orchard::python::bind_vocabulary(m);
  orchard::python::bind_grammar(m);
  orchard::python::bind_bitmask(m);
  orchard::python::bind_engine(m);
}
