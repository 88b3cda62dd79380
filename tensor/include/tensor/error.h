// Typed errors of the tensor layer. Messages start with the operation in brackets and carry the offending
// value, e.g. `[tensor::row_bytes] q4_K: row length 100 is not a multiple of the block size 256`.
#pragma once

#include <stdexcept>
#include <string>

namespace tensor {

// Base of every error thrown by tensor/ (and of the kernels layer's errors).
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A shape, stride, index or size that does not fit the operation.
class ShapeError : public Error {
 public:
  using Error::Error;
};

// A data type the operation does not support, or an unknown type id / name.
class DTypeError : public Error {
 public:
  using Error::Error;
};

// A file that cannot be opened or mapped, an allocation that fails, a device that is not built in.
class IoError : public Error {
 public:
  using Error::Error;
};

// A file of a known kind (GGUF) whose content is malformed: bad magic, truncated, lengths beyond the
// file, a metadata value of the wrong type. The message names the file and the offset or key at fault.
class FormatError : public Error {
 public:
  using Error::Error;
};

// Bad caller input to a writer: a metadata value that does not fit its type, a tensor whose bytes do
// not match its shape.
class InputError : public Error {
 public:
  using Error::Error;
};

}  // namespace tensor
