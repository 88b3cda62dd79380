// `orchard convert`: any model Orchard loads (GGUF, Hugging Face folder, llama2.c checkpoint) -> a GGUF v3
// file llama.cpp loads, with weights of the chosen type.
#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>

#include "arg_parser.h"
#include "commands.h"
#include "lora_command.h"
#include "pie/embedding.h"
#include "pie/embedding_convert.h"
#include "pie/model.h"
#include "pie/model_store.h"
#include "tensor/dtype.h"

namespace orchard::cli {

namespace {

constexpr const char* kTypes[] = {"f32", "f16", "bf16", "q8_0", "q4_0", "q4_K", "q6_K", "nf4"};

tensor::DType parse_type(const std::string& text) {
  for (const char* t : kTypes) {
    if (text == t) return tensor::dtype_from_name(t);
  }
  throw UsageError(fmt::format("--type: '{}' is not one of f32, f16, bf16, q8_0, q4_0, q4_K, q6_K, nf4", text));
}

// One "\r" status line on stderr, only when stderr is a terminal.
class Progress {
 public:
  explicit Progress(const char* what) : what_(what), tty_(::isatty(STDERR_FILENO) == 1) {}
  void operator()(std::uint64_t done, std::uint64_t total) {
    if (!tty_ || total == 0) return;
    const int percent = static_cast<int>(done * 100 / total);
    if (percent == last_ && done != total) return;
    last_ = percent;
    std::fprintf(stderr, "\r%s: %3d%% (%llu/%llu)", what_, percent, static_cast<unsigned long long>(done),
                 static_cast<unsigned long long>(total));
    std::fflush(stderr);
    shown_ = true;
  }
  void finish() {
    if (shown_) std::fputs("\r\033[K", stderr);
    shown_ = false;
    last_ = -1;
  }
  ~Progress() { finish(); }

 private:
  const char* what_;
  bool tty_;
  bool shown_ = false;
  int last_ = -1;
};

// A BERT folder or GGUF, or a stored one: what load_embedding_model reads as an encoder.
bool is_encoder(const std::string& input) {
  if (pie::is_embedding_model_path(input)) return true;
  std::error_code ec;
  if (std::filesystem::exists(input, ec) || !pie::ModelName::valid(input)) return false;
  const pie::ModelStore store;
  if (!store.contains(input)) return false;
  return pie::is_embedding_model_path(store.find(input).file);
}

// An encoder embedding model -> llama.cpp's bert GGUF (pie/embedding_convert.h).
int convert_encoder(const std::string& input, const std::string& output, pie::ConvertOptions convert) {
  const std::shared_ptr<const pie::EmbeddingModel> model = pie::open_embedding_model(input);
  Progress write_progress("converting");
  convert.progress = [&](std::uint64_t done, std::uint64_t total) { write_progress(done, total); };
  convert.notice = [&](const std::string& line) {
    write_progress.finish();
    std::fprintf(stderr, "orchard convert: note: %s\n", line.c_str());
  };
  pie::write_gguf_embedding_model(*model, output, convert);
  write_progress.finish();
  // Reading the file back checks it and gives the summary.
  const std::shared_ptr<const pie::EmbeddingModel> written = pie::load_embedding_model(output);
  std::error_code ec;
  const auto bytes = std::filesystem::file_size(output, ec);
  const pie::EncoderConfig& c = *written->encoder;
  std::printf("wrote %s: bert, %d layers, n_embd %d, vocab %d, pooling %s, %.1f MiB (%s)\n", output.c_str(),
              c.n_layer, c.n_embd, c.n_vocab, pie::pooling_name(written->pooling),
              static_cast<double>(bytes) / (1024.0 * 1024.0), std::string(tensor::dtype_name(convert.type)).c_str());
  return 0;
}

}  // namespace

int run_convert(std::span<const std::string> args) {
  std::optional<std::string> input, output, type_text, tokenizer, base;
  ArgParser parser(
      "orchard convert INPUT -o OUT.gguf [--type TYPE] [--tokenizer PATH]",
      "Converts a model to a GGUF v3 file that llama.cpp and Orchard load: llama.cpp's key and tensor\n"
      "names, the tokenizer (tokenizer.ggml.*) and chat template. INPUT is a GGUF file, a Hugging Face\n"
      "folder (config.json, *.safetensors, tokenizer.json) or a llama2.c checkpoint (its tokenizer .bin\n"
      "beside it, or given with --tokenizer), a stored model's name, or orchard-random.\n\n"
      "A BERT embedding model (a Hugging Face folder of model_type bert, such as all-MiniLM-L6-v2) is\n"
      "written as llama.cpp's bert GGUF (matrices f16, or f32 with --type f32; its WordPiece vocabulary\n"
      "and pooling), which\n"
      "`orchard pull` / `create` store as one blob and the server embeds with by name.\n\n"
      "TYPE is the type of the weight matrices: f32, f16 (default), bf16, q8_0, q4_0, q4_K or q6_K\n"
      "(quantized exactly as ggml does), or nf4 (bitsandbytes' NF4, QLoRA's base type, quantized exactly as\n"
      "bitsandbytes does; an Orchard type id that llama.cpp does not read: docs/nf4.md). Norms and biases\n"
      "stay f32; with q4_K/q6_K the output projection is q6_K. Matrices whose rows the type cannot hold fall\n"
      "back as llama.cpp does (q4_K -> q5_0, q6_K -> q8_0, then f16), and a note on stderr says which.\n\n"
      "Exit status: 0 success; 2 bad arguments or a model that cannot be loaded or written (one line\n"
      "on stderr says why).\n\n"
      "A PEFT LoRA adapter folder (adapter_config.json, adapter_model.safetensors) is written as a\n"
      "llama.cpp GGUF adapter; --base names the model it was trained on.\n\n"
      "example: orchard convert stories260K.bin -o stories260K-q8_0.gguf --type q8_0");
  parser.option("output", 'o', "OUT.gguf", "the GGUF file to write (required)", &output)
      .option("type", 0, "TYPE", "weight matrix type: f32, f16 (default), bf16, q8_0, q4_0, q4_K, q6_K, nf4",
              &type_text)
      .option("tokenizer", 't', "PATH", "llama2.c checkpoints: the tokenizer .bin", &tokenizer)
      .option("base", 0, "MODEL", "PEFT adapters: the base model they fit", &base)
      .positional("INPUT", "the model: GGUF file, Hugging Face folder, llama2.c checkpoint or stored name", true,
                  &input);
  if (!parser.parse(args)) return 0;
  if (!output) throw UsageError("missing option --output/-o OUT.gguf");
  if (is_peft_adapter(*input)) return convert_lora_adapter(*input, *output, base);
  if (base) throw UsageError("--base is for PEFT adapters; INPUT is not one (no adapter_config.json)");
  pie::ConvertOptions convert;
  convert.type = type_text ? parse_type(*type_text) : tensor::DType::f16;
  if (is_encoder(*input)) return convert_encoder(*input, *output, convert);

  pie::LoadOptions load;
  if (tokenizer) load.tokenizer_path = *tokenizer;
  Progress load_progress("loading");
  load.progress = [&](std::uint64_t done, std::uint64_t total) { load_progress(done, total); };
  const std::shared_ptr<const pie::Model> model = pie::open_model(*input, pie::ModelStore(), load).model;
  load_progress.finish();

  Progress write_progress("converting");
  convert.progress = [&](std::uint64_t done, std::uint64_t total) { write_progress(done, total); };
  convert.notice = [&](const std::string& line) {
    write_progress.finish();
    std::fprintf(stderr, "orchard convert: note: %s\n", line.c_str());
  };
  pie::write_gguf_model(*model, *output, convert);
  write_progress.finish();

  // Reading the file back checks it and gives the summary.
  const std::shared_ptr<const pie::Model> written = pie::load_gguf_model(*output);
  std::error_code ec;
  const auto bytes = std::filesystem::file_size(*output, ec);
  const pie::ModelConfig& c = written->config;
  std::printf("wrote %s: %s, %d layers, n_embd %d, vocab %d, %.1f MiB (%s)\n", output->c_str(),
              pie::architecture_name(c.arch), c.n_layer, c.n_embd, c.n_vocab,
              static_cast<double>(bytes) / (1024.0 * 1024.0), written->describe().c_str());
  return 0;
}

}  // namespace orchard::cli
