// `orchard show NAME`: a stored model's details from its GGUF metadata (family, parameters,
// quantization, context length) and what its Modelfile set, as `ollama show` prints them.
#include <fmt/format.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "arg_parser.h"
#include "commands.h"
#include "pie/model_details.h"
#include "pie/modelfile.h"
#include "store_commands.h"

namespace orchard::cli {

int run_show(std::span<const std::string> args) {
  std::optional<std::string> name;
  bool modelfile = false, template_only = false, system = false, parameters = false,
       license = false;
  ArgParser parser(
      "orchard show NAME [--modelfile | --template | --system | --parameters | --license]",
      std::string(
          "Shows a stored model: architecture, parameter count, context length, embedding length,\n"
          "quantization (from the GGUF file), then its parameters, system prompt and license; or "
          "one\n"
          "of them alone.\n") +
          kStoreHelp);
  parser.flag("modelfile", 0, "print its Modelfile", &modelfile)
      .flag("template", 0, "print its chat template (the Modelfile's, else the file's)",
            &template_only)
      .flag("system", 0, "print its system prompt", &system)
      .flag("parameters", 0, "print its parameters", &parameters)
      .flag("license", 0, "print its license", &license)
      .positional("NAME", "a stored model (name[:tag])", true, &name);
  if (!parser.parse(args)) return 0;
  if (modelfile + template_only + system + parameters + license > 1) {
    throw UsageError(
        "give at most one of --modelfile, --template, --system, --parameters, --license");
  }
  const pie::StoredModel model = command_store().find(*name);
  const pie::ModelDetails details = pie::read_model_details(model.file);
  std::string params;
  if (!model.parameters.empty()) {
    const nlohmann::json parsed = nlohmann::json::parse(model.parameters);
    for (const auto& [key, value] : parsed.items()) {
      if (value.is_array()) {
        for (const auto& v : value) params += fmt::format("    {:<20} {}\n", key, v.dump());
      } else {
        params += fmt::format("    {:<20} {}\n", key, value.dump());
      }
    }
  }
  std::string licenses;
  for (const std::string& l : model.licenses) licenses += l + "\n";
  std::string out;
  if (modelfile) {
    out = pie::modelfile_text(model);
  } else if (template_only) {
    out = (model.chat_template.empty() ? details.chat_template : model.chat_template) + "\n";
  } else if (system) {
    out = model.system + "\n";
  } else if (parameters) {
    out = params;
  } else if (license) {
    out = licenses;
  } else {
    out = "  Model\n";
    out += fmt::format("    {:<20} {}\n", "architecture", details.family);
    out += fmt::format("    {:<20} {}\n", "parameters", details.parameter_size);
    out += fmt::format("    {:<20} {}\n", "context length", details.context_length);
    out += fmt::format("    {:<20} {}\n", "embedding length", details.embedding_length);
    out += fmt::format("    {:<20} {}\n", "quantization", details.quantization);
    if (details.embedding) out += fmt::format("    {:<20} {}\n", "pooling", details.pooling);
    if (!params.empty()) out += "\n  Parameters\n" + params;
    if (!model.system.empty()) out += fmt::format("\n  System\n    {}\n", model.system);
    if (!model.adapters.empty())
      out += fmt::format("\n  Adapters\n    {}\n", model.adapters.size());
    if (!licenses.empty()) out += "\n  License\n    " + licenses;
  }
  std::fputs(out.c_str(), stdout);
  return 0;
}

}  // namespace orchard::cli
