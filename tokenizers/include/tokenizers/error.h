// Typed errors of the tokenizers layer. Every public entry point validates its input and throws one of
// these (never aborts); messages start with the operation and carry the offending value and where it is.
#pragma once

#include <stdexcept>
#include <string>

namespace tokenizers {

// Base of every error this layer throws.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A file that is missing, unreadable, or not of any recognised kind.
class FileError : public Error {
 public:
  using Error::Error;
};

// A file of a known kind whose content is malformed: bad magic, truncated, corrupt, malformed JSON,
// inconsistent tokenizer metadata. The message names the key, offset or JSON path at fault.
class FormatError : public Error {
 public:
  using Error::Error;
};

// Bad caller input: invalid UTF-8 in text to encode, token ids out of range, unknown options.
class InputError : public Error {
 public:
  using Error::Error;
};

}  // namespace tokenizers
