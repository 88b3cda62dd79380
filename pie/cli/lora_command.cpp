// `orchard lora merge`: a base model with LoRA adapters merged into its weights, written as GGUF; and the
// PEFT -> GGUF adapter conversion `orchard convert` hands adapters to.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "arg_parser.h"
#include "commands.h"
#include "lora_command.h"
#include "lora_flags.h"
#include "pie/lora.h"
#include "pie/model.h"
#include "pie/model_store.h"
#include "tensor/dtype.h"

namespace orchard::cli {
namespace {

int run_merge(std::span<const std::string> args) {
  std::optional<std::string> base, output, type_text;
  std::vector<std::string> adapters;
  ArgParser parser(
      "orchard lora merge BASE ADAPTER[:SCALE]... -o OUT.gguf [--type TYPE]",
      "Merges LoRA adapters into a base model's weights (W += sum of scale * alpha / rank * B A, each\n"
      "adapter a PEFT folder or a GGUF adapter) and writes the result as GGUF. The merged model gives the\n"
      "logits the base gives with the adapters applied at run time (--lora).\n\n"
      "TYPE: the weight type written, as orchard convert takes it (default f16).\n\n"
      "Exit status: 0 success; 2 bad arguments, or a model or adapter that cannot be read or does not fit.\n\n"
      "example: orchard lora merge base.gguf my-adapter:0.5 -o merged.gguf --type q8_0");
  parser.option("output", 'o', "OUT.gguf", "the GGUF file to write (required)", &output)
      .option("type", 0, "TYPE", "weight matrix type: f32, f16 (default), bf16, q8_0, q4_0, q4_K, q6_K", &type_text)
      .positional("BASE", "the base model: GGUF file, Hugging Face folder or stored name", true, &base);
  // BASE is the first positional, the adapters the ones after it (ArgParser takes one per name).
  std::vector<std::string> own;
  bool have_base = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if ((a == "-o" || a == "--output" || a == "--type") && i + 1 < args.size()) {
      own.push_back(a);
      own.push_back(args[++i]);
    } else if (!a.empty() && a[0] == '-' && a != "-") {
      own.push_back(a);
    } else if (!have_base) {
      own.push_back(a);
      have_base = true;
    } else {
      adapters.push_back(a);
    }
  }
  if (!parser.parse(own)) return 0;
  if (!output) throw UsageError("missing option --output/-o OUT.gguf");
  if (adapters.empty()) throw UsageError("give at least one ADAPTER[:SCALE] after BASE");
  pie::ConvertOptions convert;
  convert.type = type_text ? tensor::dtype_from_name(*type_text) : tensor::DType::f16;
  const std::shared_ptr<const pie::Model> model = pie::open_model(*base).model;
  std::vector<pie::ScaledLora> scaled;
  for (const std::string& a : adapters) {
    const LoraSpec spec = parse_lora_spec(a);
    scaled.push_back({pie::load_lora_adapter(spec.path, *model), spec.scale});
  }
  const std::shared_ptr<const pie::Model> merged = pie::merge_lora_adapters(model, scaled);
  convert.notice = [](const std::string& line) { std::fprintf(stderr, "orchard lora merge: note: %s\n", line.c_str()); };
  pie::write_gguf_model(*merged, *output, convert);
  std::printf("wrote %s: %s with %zu adapter(s) merged (%s)\n", output->c_str(), model->name.c_str(), scaled.size(),
              tensor::dtype_name(convert.type).data());
  return 0;
}

}  // namespace

bool is_peft_adapter(const std::filesystem::path& path) {
  return std::filesystem::is_directory(path) && std::filesystem::exists(path / "adapter_config.json");
}

int convert_lora_adapter(const std::filesystem::path& input, const std::filesystem::path& output,
                         const std::optional<std::string>& base) {
  if (!base) {
    throw UsageError("converting a PEFT adapter needs --base MODEL (its architecture and shapes, as "
                     "llama.cpp's convert_lora_to_gguf.py needs the base's config)");
  }
  const std::shared_ptr<const pie::Model> model = pie::open_model(*base).model;
  const std::shared_ptr<const pie::LoraAdapter> adapter = pie::load_lora_adapter(input, *model);
  pie::write_gguf_adapter(*adapter, *model, output);
  std::printf("wrote %s: LoRA adapter for %s (%s), %zu pairs, rank %lld, alpha %g\n", output.c_str(),
              model->name.c_str(), pie::architecture_name(model->config.arch), adapter->pairs.size(),
              static_cast<long long>(adapter->max_rank()), static_cast<double>(adapter->alpha));
  return 0;
}

int run_lora(std::span<const std::string> args) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::printf(
        "usage: orchard lora merge BASE ADAPTER[:SCALE]... -o OUT.gguf [--type TYPE]\n\n"
        "LoRA adapters: merge them into a base model (orchard lora merge --help). Adapters apply at run time\n"
        "with --lora on run, chat and serve; orchard convert ADAPTER --base MODEL -o OUT.gguf writes a PEFT\n"
        "adapter as a llama.cpp GGUF adapter.\n");
    if (args.empty()) throw UsageError("orchard lora: give a subcommand (merge)");
    return 0;
  }
  if (args[0] == "merge") return run_merge(args.subspan(1));
  throw UsageError(fmt::format("orchard lora: unknown subcommand '{}' (merge)", args[0]));
}

}  // namespace orchard::cli
