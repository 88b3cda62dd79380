// `orchard cp SOURCE DESTINATION` and `orchard rm NAME...`: names in the model store (a copy shares
// the file; a blob goes when no name is left on it).
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "arg_parser.h"
#include "commands.h"
#include "store_commands.h"

namespace orchard::cli {

int run_cp(std::span<const std::string> args) {
  std::optional<std::string> from, to;
  ArgParser parser(
      "orchard cp SOURCE DESTINATION",
      std::string("Gives the stored model SOURCE the name DESTINATION too (its file is shared, not "
                  "copied).\n") +
          kStoreHelp);
  parser.positional("SOURCE", "a stored model (name[:tag])", true, &from)
      .positional("DESTINATION", "the new name", true, &to);
  if (!parser.parse(args)) return 0;
  command_store().copy(*from, *to);
  std::printf("copied '%s' to '%s'\n", from->c_str(), to->c_str());
  return 0;
}

int run_rm(std::span<const std::string> args) {
  std::optional<std::string> first;
  ArgParser parser(
      "orchard rm NAME [NAME...]",
      std::string("Removes stored models' names, and each file no other name uses.\n") +
          kStoreHelp);
  parser.positional("NAME", "a stored model (name[:tag]); more may follow", true, &first);
  // Every argument is a name: the parser sees the first, the rest are checked the same way.
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    if (!parser.parse(args)) return 0;
  }
  const pie::ModelStore store = command_store();
  for (const std::string& name : args) {
    if (name.starts_with("-")) throw UsageError("unknown option '" + name + "'");
  }
  for (const std::string& name : args) {
    store.remove(name);
    std::printf("deleted '%s'\n", name.c_str());
  }
  return 0;
}

}  // namespace orchard::cli
