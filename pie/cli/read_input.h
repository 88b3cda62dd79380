// Reading a command's input: a file named on the command line, or standard input for "-" or no name.
#pragma once

#include <optional>
#include <string>

namespace orchard::cli {

// The whole content of `path` (standard input when absent or "-"), byte for byte. Throws
// std::runtime_error naming the file and the system's reason when it cannot be read.
std::string read_input(const std::optional<std::string>& path);

}  // namespace orchard::cli
