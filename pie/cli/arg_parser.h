// A small, strict command-line parser for the `orchard` subcommands: long and short options with values,
// boolean flags, positionals, and a generated --help. Unknown options and missing values are UsageErrors
// (exit status 2), never silently ignored.
#pragma once

#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace orchard::cli {

// Bad command line: the message names the option or argument at fault.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class ArgParser {
 public:
  // `usage` is the synopsis line ("orchard tokenize -t TOKENIZER [FILE|-]"); `description` one paragraph.
  ArgParser(std::string usage, std::string description);

  // A boolean flag: --name (and -s when short_name is not 0). Sets *out to true when present.
  ArgParser& flag(std::string name, char short_name, std::string help, bool* out);
  // An option that takes a value: --name VALUE, --name=VALUE, -s VALUE. Repeated: the last one wins.
  ArgParser& option(std::string name, char short_name, std::string metavar, std::string help,
                    std::optional<std::string>* out);
  // A repeatable option whose every value is collected.
  ArgParser& multi_option(std::string name, char short_name, std::string metavar, std::string help,
                          std::vector<std::string>* out);
  // A positional argument; optional ones must come after the required ones.
  ArgParser& positional(std::string metavar, std::string help, bool required,
                        std::optional<std::string>* out);

  // Parses args (without the program and subcommand names). Returns false when --help/-h was given (the
  // help text is then printed to stdout). Throws UsageError on an unknown option, a missing value, a
  // missing required positional or an extra argument. "--" ends options; "-" alone is a positional.
  bool parse(std::span<const std::string> args);

  std::string help() const;

 private:
  struct Spec {
    std::string name;
    char short_name = 0;
    std::string metavar;  // empty for flags
    std::string help;
    bool* flag_out = nullptr;
    std::optional<std::string>* value_out = nullptr;
    std::vector<std::string>* multi_out = nullptr;
  };
  struct Positional {
    std::string metavar;
    std::string help;
    bool required = false;
    std::optional<std::string>* out = nullptr;
  };
  const Spec* find_long(const std::string& name) const;
  const Spec* find_short(char c) const;
  static void store(const Spec& spec, std::string value);

  std::string usage_;
  std::string description_;
  std::vector<Spec> specs_;
  std::vector<Positional> positionals_;
};

// Parses a whole decimal integer in [lo, hi] for option `what`; throws UsageError otherwise.
long long parse_int(const std::string& text, const std::string& what, long long lo, long long hi);
// Parses a finite decimal number for option `what`; throws UsageError otherwise.
double parse_double(const std::string& text, const std::string& what);

}  // namespace orchard::cli
