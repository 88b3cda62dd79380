// `orchard create NAME -f Modelfile`: a stored model from a Modelfile (FROM, PARAMETER, TEMPLATE,
// SYSTEM, ADAPTER, LICENSE, MESSAGE), as `ollama create` makes one.
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>

#include "arg_parser.h"
#include "commands.h"
#include "pie/modelfile.h"
#include "read_input.h"
#include "store_commands.h"

namespace orchard::cli {

int run_create(std::span<const std::string> args) {
  std::optional<std::string> name, file;
  ArgParser parser(
      "orchard create NAME [-f Modelfile]",
      "Creates the stored model NAME from a Modelfile (default: ./Modelfile; '-' for standard "
      "input):\n"
      "  FROM <path or stored name>   PARAMETER <name> <value>   TEMPLATE <Jinja chat template>\n"
      "  SYSTEM <text>   ADAPTER <path>   LICENSE <text>   MESSAGE <role> <text>\n"
      "Values are the rest of the line, \"quoted\" or \"\"\"triple quoted\"\"\" (several lines). A "
      "path is\n"
      "relative to the Modelfile's folder. The parameters (temperature, top_k, top_p, min_p, "
      "seed,\n"
      "num_predict, stop, repeat_penalty, ...), template and system prompt apply when the model "
      "runs.\n\n"
      "Exit status: 0 success; 2 bad arguments, a Modelfile error (its line and column), a FROM "
      "that\n"
      "names nothing, or a store that cannot be written.");
  parser.option("file", 'f', "Modelfile", "the Modelfile (default ./Modelfile)", &file)
      .positional("NAME", "the model's name (name[:tag])", true, &name);
  if (!parser.parse(args)) return 0;
  const std::string path = file.value_or("Modelfile");
  const std::string text = read_input(path);
  const pie::Modelfile modelfile = pie::parse_modelfile(text, path == "-" ? "<stdin>" : path);
  const std::filesystem::path base =
      path == "-" ? std::filesystem::current_path() : std::filesystem::absolute(path).parent_path();
  const pie::StoredModel model = pie::create_model(command_store(), *name, modelfile, base);
  std::printf("%s %s\n", model.name.str().c_str(), model.digest.c_str());
  return 0;
}

}  // namespace orchard::cli
