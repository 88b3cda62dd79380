// A loaded model: its configuration, its tokenizer and chat template, and its weights as tensors
// (tensor::Tensor: dtype, shape, device) viewing storage the Model owns (a memory-mapped file, or buffers
// it converted), in host memory; a backend keeps them resident on its device (Backend::upload). Immutable
// after loading and safe to share across threads. Weight matrices are [n_out, n_in] (rows of n_in) in
// row-major order, the layout of kernels::MatmulParams (PyTorch's Linear.weight; GGUF's dims reversed),
// of any tensor::DType; vectors are [n].
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "pal/rope.h"
#include "tensor/dtype.h"
#include "tensor/tensor.h"
#include "tokenizers/tokenizer.h"

namespace pie {

// The architectures with a forward pass (pie/src/models/). Others (gemma2, phi3, ...) are refused by name
// when a model is loaded.
enum class Architecture : std::uint8_t { llama, mistral, qwen2, qwen3 };
// "llama", "mistral", ... (GGUF general.architecture spelling).
const char* architecture_name(Architecture arch);
// Throws ModelError naming the architecture when it is not one of the above.
Architecture architecture_from_name(const std::string& name);

struct ModelConfig {
  Architecture arch = Architecture::llama;
  std::int32_t n_vocab = 0;      // logits rows (may exceed the tokenizer's size: padded vocabularies)
  std::int32_t n_embd = 0;       // hidden size
  std::int32_t n_layer = 0;
  std::int32_t n_head = 0;       // query heads
  std::int32_t n_kv_head = 0;    // key/value heads (GQA when < n_head)
  std::int32_t head_dim = 0;     // usually n_embd / n_head (Qwen3's may differ)
  std::int32_t n_ff = 0;         // feed-forward hidden size
  std::int32_t context_length = 0;  // the trained context (max_position_embeddings)
  float norm_eps = 1e-5f;        // RMSNorm epsilon
  pal::RopeConfig rope;          // head_dim, rotary_dim, theta, layout, scaling
  std::int32_t sliding_window = 0;  // 0: full attention (Mistral: the window)
  bool attention_bias = false;   // q/k/v projections have biases (Qwen2)
  bool qk_norm = false;          // RMSNorm over each head of q and k before RoPE (Qwen3)
  bool tied_embeddings = false;  // the output projection is the token embedding
  float attn_logit_softcap = 0;  // 0: off; else attention logits = cap * tanh(logits / cap)
  float final_logit_softcap = 0; // 0: off; the same on the output logits
  float attention_scale = 0;     // 0: 1 / sqrt(head_dim)

  // Checks the sizes against each other; throws ModelError naming the field.
  void validate() const;
};

// A weight: a [n_out, n_in] matrix or an [n] vector; an empty (default) tensor is an absent optional one.
using Weight = tensor::Tensor;
// A weight's rows (1 for a vector), elements per row, and bytes per row.
inline std::int64_t n_out(const Weight& w) { return w.rank() == 2 ? w.dim(0) : 1; }
inline std::int64_t n_in(const Weight& w) { return w.rank() == 0 ? 0 : w.dim(w.rank() - 1); }
inline std::size_t row_bytes(const Weight& w) { return tensor::row_bytes(w.dtype(), n_in(w)); }

struct LayerWeights {
  Weight attn_norm;                      // f32 [n_embd]
  Weight wq, wk, wv, wo;                 // [n_head*head_dim, n_embd] ... [n_embd, n_head*head_dim]
  Weight bq, bk, bv;                     // f32 biases (attention_bias) or absent
  Weight q_norm, k_norm;                 // f32 [head_dim] (qk_norm) or absent
  Weight ffn_norm;                       // f32 [n_embd]
  Weight w_gate, w_up, w_down;           // [n_ff, n_embd], [n_ff, n_embd], [n_embd, n_ff]
};

struct ModelWeights {
  Weight token_embd;                     // [n_vocab, n_embd]
  Weight output_norm;                    // f32 [n_embd]
  Weight output;                         // [n_vocab, n_embd] (the same tensor as token_embd when tied)
  std::vector<LayerWeights> layers;
  // Bytes and elements of every weight, a tied output counted once.
  std::size_t bytes() const;
  std::int64_t n_parameters() const;
};

struct Model {
  std::string name;                      // from the file's metadata, or the file name
  std::filesystem::path path;            // where it was loaded from
  ModelConfig config;
  std::shared_ptr<const tokenizers::Tokenizer> tokenizer;
  std::string chat_template;             // Jinja source; empty when the model has none
  ModelWeights weights;                  // in host memory
  // Keeps every buffer and mapping the weights view alive.
  std::vector<std::shared_ptr<const void>> storage;
  // Tensor type counts for display ("q8_0: 154, f32: 65").
  std::string describe() const;
};

// A weight viewing `bytes` at `data`, which the model's storage keeps alive: [n_out, n_in] of `type`, or
// [n_in] when n_out is 0. Throws tensor::ShapeError when the bytes do not hold it.
Weight weight_view(const void* data, std::size_t bytes, tensor::DType type, std::int64_t n_out, std::int64_t n_in);

struct LoadOptions {
  // llama2.c checkpoints: the tokenizer .bin (default: tokenizer.bin or tok*.bin beside the checkpoint).
  std::optional<std::filesystem::path> tokenizer_path;
  // Called with (bytes done, bytes total) while loading; may be empty.
  std::function<void(std::uint64_t, std::uint64_t)> progress;
};

// Loads a GGUF file, a Hugging Face folder (config.json, *.safetensors (sharded or not), tokenizer.json,
// tokenizer_config.json) or a llama2.c checkpoint, recognised from the content. Throws ModelError.
std::shared_ptr<const Model> load_model(const std::filesystem::path& path, const LoadOptions& options = {});
std::shared_ptr<const Model> load_gguf_model(const std::filesystem::path& path, const LoadOptions& options = {});
std::shared_ptr<const Model> load_hf_model(const std::filesystem::path& folder, const LoadOptions& options = {});
std::shared_ptr<const Model> load_llama2c_model(const std::filesystem::path& checkpoint,
                                                const LoadOptions& options = {});

struct ConvertOptions {
  // Type of the 2-D weight matrices (norms and biases stay f32; token_embd/output follow llama.cpp's rules:
  // q6_K for output with the K types, otherwise the requested type where the row size allows).
  tensor::DType type = tensor::DType::f16;
  std::function<void(std::uint64_t, std::uint64_t)> progress;  // (tensors done, total)
  // Called with one line per type fallback ("q4_K cannot hold rows of 172 elements: ... written as q5_0");
  // may be empty.
  std::function<void(const std::string&)> notice;
};

// Writes `model` as a GGUF v3 file llama.cpp loads (llama.cpp key and tensor names, its tokenizer
// metadata, chat template). Throws ModelError (e.g. a row size the type cannot hold), pie::Error on I/O.
void write_gguf_model(const Model& model, const std::filesystem::path& path, const ConvertOptions& options);

}  // namespace pie
