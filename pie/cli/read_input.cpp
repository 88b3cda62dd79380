#include "read_input.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>

namespace orchard::cli {

namespace {

std::string read_stream(std::FILE* f, const std::string& shown) {
  std::string out;
  char buffer[1 << 16];
  for (;;) {
    const std::size_t n = std::fread(buffer, 1, sizeof(buffer), f);
    out.append(buffer, n);
    if (n < sizeof(buffer)) break;
  }
  if (std::ferror(f)) throw std::runtime_error(fmt::format("cannot read {}: {}", shown, std::strerror(errno)));
  return out;
}

}  // namespace

std::string read_input(const std::optional<std::string>& path) {
  if (!path || *path == "-") return read_stream(stdin, "standard input");
  std::error_code ec;
  if (std::filesystem::is_directory(*path, ec)) {
    throw std::runtime_error(fmt::format("cannot read {}: it is a directory", *path));
  }
  std::FILE* f = std::fopen(path->c_str(), "rb");
  if (f == nullptr) throw std::runtime_error(fmt::format("cannot open {}: {}", *path, std::strerror(errno)));
  try {
    std::string out = read_stream(f, *path);
    std::fclose(f);
    return out;
  } catch (...) {
    std::fclose(f);
    throw;
  }
}

}  // namespace orchard::cli
