// The compiled-grammar holder shared by the grammar and engine bindings, and the bitmask checks.
#pragma once

#include <cstdint>
#include <span>

#include <nanobind/ndarray.h>

#include "pse/compiler.h"

namespace orchard::python {

namespace nb = nanobind;

// orchard._orchard.CompiledGrammar: immutable, thread-safe, shared by every matcher made from it.
struct PyCompiledGrammar {
  pse::CompiledGrammar grammar;
};

// A bitmask argument: an int32 (or uint32) array on the CPU, shape (words,) or (batch, words), the last
// axis contiguous. Rows are `words` 32-bit words, bit i % 32 of word i / 32 set when token i is allowed.
struct BitmaskView {
  std::uint32_t* data = nullptr;
  std::size_t rows = 0;        // 1 for a 1-D bitmask
  std::size_t words = 0;       // the last axis
  std::int64_t row_stride = 0; // in words
  std::span<std::uint32_t> row(std::size_t i) const { return {data + static_cast<std::int64_t>(i) * row_stride, words}; }
};

// Checks `array` (a numpy array, a torch tensor, anything with DLPack or the buffer protocol) and views it.
// Raises TypeError for a wrong dtype or a read-only or foreign-device array, ValueError for a wrong shape.
BitmaskView bitmask_view(nb::handle array, const char* what);

}  // namespace orchard::python
