// Typed errors of pse. Messages start with the operation and carry the offending value and its place:
//   [gbnf] line 3, column 14: expected ')' to close the group opened at column 5, got '|'
//   [json_schema] /properties/age: "minimum" must be a number, got "ten"
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>

namespace pse {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Malformed grammar text (GBNF, Lark, regex) or an ill-formed grammar (undefined rule, empty language).
// line and column are 1-based; 0 when the error has no single place (e.g. an undefined rule).
class GrammarError : public Error {
 public:
  GrammarError(const std::string& message, std::size_t line = 0, std::size_t column = 0)
      : Error(message), line_(line), column_(column) {}
  std::size_t line() const { return line_; }
  std::size_t column() const { return column_; }

 private:
  std::size_t line_;
  std::size_t column_;
};

// A JSON Schema that is malformed, or uses a feature that cannot be enforced exactly.
class SchemaError : public Error {
 public:
  SchemaError(const std::string& message, std::string pointer, std::string keyword)
      : Error(message), pointer_(std::move(pointer)), keyword_(std::move(keyword)) {}
  const std::string& pointer() const { return pointer_; }  // JSON pointer of the schema at fault
  const std::string& keyword() const { return keyword_; }

 private:
  std::string pointer_;
  std::string keyword_;
};

// Compilation hit a bound (time, memory, states) or the input is over a size limit.
class LimitError : public Error {
 public:
  using Error::Error;
};

// Bad caller input at run time: a token id out of range, rollback of more tokens than accepted, ...
class InputError : public Error {
 public:
  using Error::Error;
};

}  // namespace pse
