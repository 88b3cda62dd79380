// `orchard list`: the stored models, as `ollama list` prints them (NAME, ID, SIZE, MODIFIED).
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "arg_parser.h"
#include "commands.h"
#include "human_units.h"
#include "store_commands.h"

namespace orchard::cli {

int run_list(std::span<const std::string> args) {
  ArgParser parser(
      "orchard list",
      std::string(
          "Lists the stored models: name, ID (the first 12 digits of the manifest's sha256),\n"
          "size of the model file and when the name was last written.\n") +
          kStoreHelp);
  if (!parser.parse(args)) return 0;
  std::string out = fmt::format("{:<40} {:<14} {:<10} {}\n", "NAME", "ID", "SIZE", "MODIFIED");
  for (const pie::StoredModel& m : command_store().list()) {
    const auto modified = std::chrono::file_clock::to_sys(m.modified);
    out += fmt::format(
        "{:<40} {:<14} {:<10} {}\n", m.name.str(), m.manifest_digest.substr(0, 12),
        human_bytes(m.size),
        time_ago(std::chrono::time_point_cast<std::chrono::system_clock::duration>(modified)));
  }
  std::fputs(out.c_str(), stdout);
  return 0;
}

}  // namespace orchard::cli
