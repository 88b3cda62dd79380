// Embedding models: text -> one vector per input. Two kinds share the API:
//   - BERT-family encoders (absolute positions, token types, bidirectional attention, post-LN
//     LayerNorm, GELU) from a Hugging Face folder (config.json model_type "bert", safetensors) or a
//     GGUF file of llama.cpp's "bert" architecture;
//   - decoder models (any architecture pie runs) used as embedders: the last hidden state (after the
//     final norm) of every token, run through the decoder's own forward pass.
// The token vectors are pooled (mean, cls or last: from 1_Pooling/config.json, <arch>.pooling_type
// or the caller) and L2-normalized when the model says so (sentence-transformers' Normalize module;
// always for GGUF, as llama.cpp's embedding example does). An encoder's f32 matrices are kept as
// f16 (the CPU's fast product path; within cosine 0.9999 of sentence-transformers, tested).
// Immutable after loading and safe to share across threads.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "pie/model.h"
#include "tensor/tensor.h"
#include "tokenizers/tokenizer.h"

namespace tensor {
class ThreadPool;
}

namespace pie {

enum class Pooling : std::uint8_t { mean, cls, last };
const char* pooling_name(Pooling pooling);  // "mean", "cls", "last"
// Throws RequestError (param "pooling") on any other name.
Pooling pooling_from_name(const std::string& name);

struct EncoderConfig {
  std::int32_t n_vocab = 0;
  std::int32_t n_embd = 0;
  std::int32_t n_layer = 0;
  std::int32_t n_head = 0;
  std::int32_t n_ff = 0;
  std::int32_t n_positions = 0;    // rows of the absolute position table (max_position_embeddings)
  std::int32_t n_token_types = 0;  // rows of the token type table (0: none)
  float norm_eps = 1e-12f;         // LayerNorm epsilon
};

// A weight as in pie/model.h: [n_out, n_in] of any dtype, or an f32 [n] vector.
struct EncoderLayerWeights {
  Weight wq, wk, wv, wo;          // [n_embd, n_embd]
  Weight bq, bk, bv, bo;          // f32 [n_embd]
  Weight attn_norm, attn_norm_b;  // f32 [n_embd]: LayerNorm after attention + residual
  Weight w_up, b_up;              // [n_ff, n_embd], f32 [n_ff]
  Weight w_down, b_down;          // [n_embd, n_ff], f32 [n_embd]
  Weight ffn_norm, ffn_norm_b;    // f32 [n_embd]: LayerNorm after the feed-forward + residual
};

struct EncoderWeights {
  Weight token_embd;              // [n_vocab, n_embd]
  Weight position_embd;           // [n_positions, n_embd]
  Weight token_type_embd;         // [n_token_types, n_embd] or absent
  Weight embd_norm, embd_norm_b;  // f32 [n_embd]
  std::vector<EncoderLayerWeights> layers;
};

struct EmbeddingModel {
  std::string name;
  std::filesystem::path path;
  // Exactly one of the two: an encoder's config and weights, or a decoder model.
  std::optional<EncoderConfig> encoder;
  EncoderWeights encoder_weights;
  std::shared_ptr<const Model> decoder;
  // Null for a decoder without one (token ids only).
  std::shared_ptr<const tokenizers::Tokenizer> tokenizer;
  Pooling pooling = Pooling::mean;
  bool normalize = true;
  std::int32_t max_tokens = 0;  // the most tokens one input may have (specials included)
  std::int32_t n_dims = 0;      // the embedding's length (n_embd)
  std::vector<std::shared_ptr<const void>> storage;  // keeps what the weights view alive
  // "bert", or the decoder's architecture name.
  std::string architecture() const;
};

struct EmbeddingLoadOptions {
  std::optional<Pooling> pooling;  // overrides the model's own
  std::optional<bool> normalize;   // overrides the model's own
};

// Whether `path` holds an encoder that only embeds: a folder whose config.json has model_type
// "bert", or a GGUF file whose general.architecture is "bert". False for anything else, unreadable
// files included.
bool is_embedding_model_path(const std::filesystem::path& path);

// Loads an encoder (as above) or wraps a decoder model (any file load_model takes) as an embedder;
// pooling and normalization from 1_Pooling/config.json and modules.json beside a folder,
// <arch>.pooling_type in a GGUF, else mean for encoders and last for decoders, normalized. Throws
// ModelError naming the file and the field or tensor at fault.
std::shared_ptr<const EmbeddingModel> load_embedding_model(
    const std::filesystem::path& path, const EmbeddingLoadOptions& options = {});
// What a user names (-m, a request's model): a file or folder (as load_embedding_model), a stored
// model's name (its blob loaded the same way), or orchard-random (as a decoder embedder). Throws
// ModelNotFoundError (pie/model_store.h) for a name that is neither, ModelError as above.
std::shared_ptr<const EmbeddingModel> open_embedding_model(
    const std::string& given, const EmbeddingLoadOptions& options = {});
// A decoder model already loaded, as an embedder (pooling last unless told; normalized unless
// told).
std::shared_ptr<const EmbeddingModel> embedding_model_from_decoder(
    std::shared_ptr<const Model> model, const EmbeddingLoadOptions& options = {});

struct EmbedOptions {
  // Inputs longer than the model's max_tokens: cut to it when true, else a RequestError.
  bool truncate = false;
  // Keep only the first `dimensions` values (then renormalize when the model normalizes); 0: all.
  std::int32_t dimensions = 0;
};

struct EmbedResult {
  std::vector<std::vector<float>> embeddings;  // [n_inputs][dimensions]
  std::int64_t n_tokens = 0;                   // tokens run, specials included (usage)
  std::int32_t n_truncated = 0;                // inputs that were cut
};

class EncoderRunner;

// Runs an EmbeddingModel. Many inputs go through in as few forward passes as a token budget allows,
// with no padding (each input attends to its own tokens only). Thread-safe: calls from several
// threads are served one after the other; independent of any Engine generating with another model.
class Embedder {
 public:
  // n_threads: 0 for every core. Throws pie::Error on a negative count, ModelError when the weights
  // do not fit the config (naming the weight).
  explicit Embedder(std::shared_ptr<const EmbeddingModel> model, std::int32_t n_threads = 0);
  ~Embedder();
  Embedder(const Embedder&) = delete;
  Embedder& operator=(const Embedder&) = delete;

  // Tokenizes each text (the model's own specials added: [CLS] .. [SEP], or BOS/EOS as the
  // tokenizer says) and embeds it. Throws RequestError (param "input", or "input[i]", or
  // "dimensions") on no inputs, an empty text, invalid UTF-8, a text over max_tokens without
  // truncate, dimensions outside [0, n_dims]. Nothing is computed when any input is bad.
  EmbedResult embed(std::span<const std::string> texts, const EmbedOptions& options = {});
  // The same from token ids, used as given (no specials added). Throws RequestError on an id
  // outside the vocabulary as well.
  EmbedResult embed_tokens(std::span<const std::vector<std::int32_t>> inputs,
                           const EmbedOptions& options = {});

  const EmbeddingModel& model() const { return *model_; }
  std::shared_ptr<const EmbeddingModel> model_ptr() const { return model_; }

 private:
  EmbedResult run(std::vector<std::vector<std::int32_t>> inputs, const EmbedOptions& options);

  std::shared_ptr<const EmbeddingModel> model_;
  std::unique_ptr<tensor::ThreadPool> pool_;
  std::unique_ptr<EncoderRunner> runner_;
  std::mutex mutex_;
};

}  // namespace pie
