// What `orchard show`, `orchard list` and /api/show say of a model file, read from its GGUF
// metadata and tensor table alone (no weights loaded): family, parameter count, quantization,
// context length, template; an embedding model's pooling.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

namespace pie {

struct ModelDetails {
  std::string family;                 // general.architecture ("llama")
  std::string name;                   // general.name, may be empty
  std::uint64_t parameter_count = 0;  // elements of every tensor
  std::string parameter_size;         // "135.0M", as Ollama writes it
  std::string quantization;           // "Q4_1": general.file_type, else the most common matrix type
  std::uint64_t context_length = 0;   // <arch>.context_length (0: absent)
  std::uint64_t embedding_length = 0;
  std::uint64_t block_count = 0;
  std::uint64_t head_count = 0;
  std::uint64_t head_count_kv = 0;
  std::uint64_t vocab_size = 0;  // tokenizer.ggml.tokens
  std::string chat_template;     // tokenizer.chat_template, may be empty
  // An embedding model (general.architecture "bert": it embeds, never generates) and its pooling:
  // "mean", "cls", "last" from bert.pooling_type (llama.cpp's numbers, 1 when absent), or the number
  // of one Orchard does not run. Empty for a generative model.
  bool embedding = false;
  std::string pooling;
};

// Throws ModelError naming the file when it is not a readable GGUF file.
ModelDetails read_model_details(const std::filesystem::path& gguf);
// "135.0M", "1.5B", "260.0K".
std::string format_parameter_size(std::uint64_t count);

}  // namespace pie
