// Typed errors of the kernels layer: a shape or dtype a kernel does not support. They derive from
// tensor::Error so a caller may catch either. Messages start with the kernel in brackets.
#pragma once

#include "tensor/error.h"

namespace kernels {

class Error : public tensor::Error {
 public:
  using tensor::Error::Error;
};

// A dtype (or dtype pair) the kernel has no implementation for.
class UnsupportedError : public Error {
 public:
  using Error::Error;
};

// Sizes that do not fit (a row length not a multiple of the block size, mismatched lengths, ...).
class ShapeError : public Error {
 public:
  using Error::Error;
};

}  // namespace kernels
