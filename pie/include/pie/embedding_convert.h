// An encoder embedding model (pie/embedding.h) written as llama.cpp's "bert" GGUF: what `orchard convert`
// makes of a BERT folder, so that the model store keeps it as one blob (and llama.cpp loads it).
#pragma once

#include <filesystem>

#include "pie/embedding.h"
#include "pie/model.h"

namespace pie {

// Writes `model` (an encoder: a decoder embedder is refused) with llama.cpp's bert keys and tensor names,
// its WordPiece vocabulary as tokenizer.ggml.* ("bert") and its pooling as bert.pooling_type. Matrices
// (the token table too) are written as options.type, f16 (llama.cpp's default: half the size, vectors
// within cosine 0.9999 of the folder's) or f32 (the folder's values: the same vectors bit for bit); norms,
// biases and the position and token type tables as f32 (as llama.cpp has them). Throws ModelError naming what cannot be written (a decoder, another type, a cased
// vocabulary), pie::Error on I/O.
void write_gguf_embedding_model(const EmbeddingModel& model, const std::filesystem::path& path,
                                const ConvertOptions& options);

}  // namespace pie
