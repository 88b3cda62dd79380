// A tokenizer as GGUF tokenizer.ggml.* metadata, in the form llama.cpp's llama_vocab::load reads (and
// convert_hf_to_gguf.py writes): "llama" for SentencePiece-style vocabularies (tokens with U+2581 for
// spaces, scores, token types), "gpt2" for byte-level BPE (tokens, merges, pre-tokenizer name), "bert"
// for WordPiece (tokens in llama.cpp's phantom-space form, the [CLS]/[SEP]/[MASK] ids).
#pragma once

#include <cstddef>

#include "tensor/gguf.h"
#include "tokenizers/tokenizer.h"

namespace tokenizers {

// Sets tokenizer.ggml.{model, pre, tokens, scores, token_type, merges, bos/eos/unk/pad/eot ids,
// add_bos_token, add_eos_token, add_space_prefix} on `writer`. A vocabulary smaller than n_vocab (the
// model's padded embedding rows) is padded with "[PAD<id>]" tokens of type unused, as
// convert_hf_to_gguf.py does. Throws InputError for a cased WordPiece vocabulary (llama.cpp lowercases
// every bert text) and when n_vocab is non-zero and smaller than the vocabulary; the writer is unchanged
// then.
void add_gguf_metadata(const Tokenizer& tokenizer, tensor::gguf::Writer& writer, std::size_t n_vocab = 0);

}  // namespace tokenizers
