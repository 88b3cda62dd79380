// Bitmask arguments (numpy arrays, CPU torch tensors: anything with DLPack or the buffer protocol, used
// in place, never copied) and apply_token_bitmask_inplace on CPU float32 logits.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/vector.h>

#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "bindings.h"
#include "grammar_bindings.h"

namespace orchard::python {

namespace {

using Array = nb::ndarray<nb::device::cpu>;

std::string type_of(nb::handle h) { return nb::type_name(h.type()).c_str(); }

// `h` as a writable CPU array, or a TypeError that says what was expected.
Array writable_cpu_array(nb::handle h, const char* what, const char* expected) {
  Array a;
  if (!nb::try_cast<Array>(h, a, false)) {
    throw nb::type_error((std::string(what) + ": expected " + expected + ", got " + type_of(h) +
                          " (a read-only array, or one on another device, is not accepted)")
                             .c_str());
  }
  return a;
}

}  // namespace

BitmaskView bitmask_view(nb::handle array, const char* what) {
  const Array a = writable_cpu_array(array, what, "an int32 numpy array or CPU torch tensor");
  const nb::dlpack::dtype dt = a.dtype();
  if (!(dt == nb::dtype<std::int32_t>() || dt == nb::dtype<std::uint32_t>())) {
    throw nb::type_error((std::string(what) + ": the bitmask must be int32 (or uint32), got a dtype of " +
                          std::to_string(dt.bits) + "-bit code " + std::to_string(dt.code))
                             .c_str());
  }
  if (a.ndim() != 1 && a.ndim() != 2) {
    throw nb::value_error((std::string(what) + ": the bitmask must have shape (words,) or (batch, words), got " +
                           std::to_string(a.ndim()) + " dimensions")
                              .c_str());
  }
  BitmaskView v;
  v.data = static_cast<std::uint32_t*>(a.data());
  v.words = a.shape(a.ndim() - 1);
  v.rows = a.ndim() == 2 ? a.shape(0) : 1;
  v.row_stride = a.ndim() == 2 ? a.stride(0) : static_cast<std::int64_t>(v.words);
  if (v.words > 1 && a.stride(a.ndim() - 1) != 1) {
    throw nb::value_error((std::string(what) + ": the bitmask's last axis must be contiguous").c_str());
  }
  return v;
}

void bind_bitmask(nb::module_& m) {
  m.def(
      "apply_token_bitmask_inplace_cpu",
      [](nb::handle logits_arg, nb::handle bitmask_arg, std::optional<std::int64_t> vocab_size,
         std::optional<std::vector<std::int64_t>> indices) {
        const Array logits = writable_cpu_array(logits_arg, "apply_token_bitmask_inplace",
                                                "a float32 numpy array or CPU torch tensor of logits");
        if (logits.dtype() != nb::dtype<float>()) {
          throw nb::type_error("apply_token_bitmask_inplace: the logits must be float32 here");
        }
        if (logits.ndim() != 1 && logits.ndim() != 2) {
          throw nb::value_error(("apply_token_bitmask_inplace: the logits must have shape (vocab,) or (batch, vocab), "
                                 "got " + std::to_string(logits.ndim()) + " dimensions")
                                    .c_str());
        }
        const BitmaskView mask = bitmask_view(bitmask_arg, "apply_token_bitmask_inplace");
        const std::size_t n_cols = logits.shape(logits.ndim() - 1);
        const std::size_t rows = logits.ndim() == 2 ? logits.shape(0) : 1;
        const std::int64_t row_stride = logits.ndim() == 2 ? logits.stride(0) : static_cast<std::int64_t>(n_cols);
        if (n_cols > 1 && logits.stride(logits.ndim() - 1) != 1) {
          throw nb::value_error("apply_token_bitmask_inplace: the logits' last axis must be contiguous");
        }
        std::size_t vocab = std::min(n_cols, mask.words * 32);
        if (vocab_size) {
          if (*vocab_size < 0 || static_cast<std::size_t>(*vocab_size) > vocab) {
            throw nb::value_error(("apply_token_bitmask_inplace: vocab_size " + std::to_string(*vocab_size) +
                                   " is outside [0, " + std::to_string(vocab) +
                                   "] (the logits' columns and the bitmask's bits)")
                                      .c_str());
          }
          vocab = static_cast<std::size_t>(*vocab_size);
        }
        std::vector<std::size_t> which;
        if (indices) {
          for (std::int64_t i : *indices) {
            if (i < 0 || static_cast<std::size_t>(i) >= rows || static_cast<std::size_t>(i) >= mask.rows) {
              throw nb::index_error(("apply_token_bitmask_inplace: index " + std::to_string(i) + " is outside the " +
                                     std::to_string(std::min(rows, mask.rows)) + " rows of the logits and the bitmask")
                                        .c_str());
            }
            which.push_back(static_cast<std::size_t>(i));
          }
        } else {
          if (mask.rows != rows) {
            throw nb::value_error(("apply_token_bitmask_inplace: " + std::to_string(rows) + " rows of logits but " +
                                   std::to_string(mask.rows) + " rows of bitmask (pass indices= to pick rows)")
                                      .c_str());
          }
          for (std::size_t i = 0; i < rows; ++i) which.push_back(i);
        }
        float* base = static_cast<float*>(logits.data());
        nb::gil_scoped_release release;
        const float neg_inf = -std::numeric_limits<float>::infinity();
        for (std::size_t r : which) {
          float* row = base + static_cast<std::int64_t>(r) * row_stride;
          const std::span<std::uint32_t> bits = mask.row(r);
          for (std::size_t w = 0; w * 32 < vocab; ++w) {
            const std::uint32_t word = bits[w];
            if (word == 0xFFFFFFFFu) continue;
            const std::size_t end = std::min<std::size_t>(32, vocab - w * 32);
            for (std::size_t b = 0; b < end; ++b) {
              if (!((word >> b) & 1u)) row[w * 32 + b] = neg_inf;
            }
          }
        }
      },
      nb::arg("logits"), nb::arg("bitmask"), nb::arg("vocab_size") = nb::none(), nb::arg("indices") = nb::none(),
      "Sets logits[i, t] to -inf where bit t of bitmask[i] is clear, for t < vocab_size (default: the logits' "
      "columns or the bitmask's bits, whichever is fewer), for each row i (or each i in indices). float32 CPU "
      "logits, in place.");
}

}  // namespace orchard::python
