#include "arg_parser.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <cstdio>

namespace orchard::cli {

ArgParser::ArgParser(std::string usage, std::string description)
    : usage_(std::move(usage)), description_(std::move(description)) {}

ArgParser& ArgParser::flag(std::string name, char short_name, std::string help, bool* out) {
  specs_.push_back({std::move(name), short_name, "", std::move(help), out, nullptr, nullptr});
  return *this;
}

ArgParser& ArgParser::option(std::string name, char short_name, std::string metavar,
                             std::string help, std::optional<std::string>* out) {
  specs_.push_back(
      {std::move(name), short_name, std::move(metavar), std::move(help), nullptr, out, nullptr});
  return *this;
}

ArgParser& ArgParser::multi_option(std::string name, char short_name, std::string metavar,
                                   std::string help, std::vector<std::string>* out) {
  specs_.push_back(
      {std::move(name), short_name, std::move(metavar), std::move(help), nullptr, nullptr, out});
  return *this;
}

ArgParser& ArgParser::positional(std::string metavar, std::string help, bool required,
                                 std::optional<std::string>* out) {
  positionals_.push_back({std::move(metavar), std::move(help), required, out});
  return *this;
}

const ArgParser::Spec* ArgParser::find_long(const std::string& name) const {
  for (const Spec& s : specs_) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

const ArgParser::Spec* ArgParser::find_short(char c) const {
  for (const Spec& s : specs_) {
    if (s.short_name != 0 && s.short_name == c) return &s;
  }
  return nullptr;
}

void ArgParser::store(const Spec& spec, std::string value) {
  if (spec.value_out != nullptr) *spec.value_out = std::move(value);
  if (spec.multi_out != nullptr) spec.multi_out->push_back(std::move(value));
}

bool ArgParser::parse(std::span<const std::string> args) {
  std::vector<std::string> rest;
  bool options_done = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (options_done || a == "-" || a.empty() || a[0] != '-') {
      rest.push_back(a);
      continue;
    }
    if (a == "--") {
      options_done = true;
      continue;
    }
    if (a == "--help" || a == "-h") {
      std::fputs(help().c_str(), stdout);
      return false;
    }
    const Spec* spec = nullptr;
    std::optional<std::string> inline_value;
    std::string shown = a;
    if (a.starts_with("--")) {
      std::string name = a.substr(2);
      if (auto eq = name.find('='); eq != std::string::npos) {
        inline_value = name.substr(eq + 1);
        name.resize(eq);
        shown = "--" + name;
      }
      spec = find_long(name);
    } else if (a.size() >= 2) {
      spec = find_short(a[1]);
      shown = a.substr(0, 2);
      if (a.size() > 2) inline_value = a.substr(2);  // -n16
    }
    if (spec == nullptr) throw UsageError(fmt::format("unknown option '{}'", shown));
    if (spec->flag_out != nullptr) {
      if (inline_value) throw UsageError(fmt::format("option '{}' takes no value", shown));
      *spec->flag_out = true;
      continue;
    }
    if (!inline_value) {
      if (i + 1 >= args.size()) {
        throw UsageError(fmt::format("option '{}' needs a value ({})", shown, spec->metavar));
      }
      inline_value = args[++i];
    }
    store(*spec, std::move(*inline_value));
  }
  if (rest.size() > positionals_.size()) {
    throw UsageError(fmt::format("unexpected argument '{}'", rest[positionals_.size()]));
  }
  for (size_t i = 0; i < positionals_.size(); ++i) {
    if (i < rest.size()) {
      *positionals_[i].out = rest[i];
    } else if (positionals_[i].required) {
      throw UsageError(fmt::format("missing argument {}", positionals_[i].metavar));
    }
  }
  return true;
}

std::string ArgParser::help() const {
  std::string out = fmt::format("usage: {}\n\n{}\n", usage_, description_);
  if (!positionals_.empty()) {
    out += "\narguments:\n";
    for (const Positional& p : positionals_) {
      out += fmt::format("  {:<24} {}\n", p.metavar, p.help);
    }
  }
  out += "\noptions:\n";
  for (const Spec& s : specs_) {
    std::string left = s.short_name != 0 ? fmt::format("-{}, --{}", s.short_name, s.name)
                                         : fmt::format("    --{}", s.name);
    if (!s.metavar.empty()) left += " " + s.metavar;
    out += fmt::format("  {:<24} {}\n", left, s.help);
  }
  out += fmt::format("  {:<24} {}\n", "-h, --help", "show this help and exit");
  return out;
}

long long parse_int(const std::string& text, const std::string& what, long long lo, long long hi) {
  long long v = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || ptr != text.data() + text.size() || text.empty()) {
    throw UsageError(fmt::format("{}: expected an integer, got '{}'", what, text));
  }
  if (v < lo || v > hi) {
    throw UsageError(fmt::format("{}: {} is out of range [{}, {}]", what, v, lo, hi));
  }
  return v;
}

double parse_double(const std::string& text, const std::string& what) {
  double v = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || ptr != text.data() + text.size() || text.empty() || !std::isfinite(v)) {
    throw UsageError(fmt::format("{}: expected a number, got '{}'", what, text));
  }
  return v;
}

}  // namespace orchard::cli
