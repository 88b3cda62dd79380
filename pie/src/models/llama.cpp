// Llama 2 / 3 (and the llama-architecture GGUF files of other families): pre-norm decoder blocks, RMSNorm,
// RoPE (with llama3 frequency scaling), grouped-query attention, SwiGLU, tied or separate output head.
#include "models/decoder.h"

namespace pie::models {

void forward_llama_blocks(const ForwardContext& f) {
  Decoder d(f);
  d.embed();
  for (std::int32_t layer = 0; layer < f.model.config.n_layer; ++layer) {
    d.attention_block(layer);
    d.swiglu_block(layer);
  }
  d.output();
}

namespace {

void check(const Model& model) { check_decoder_weights(model, {}); }

}  // namespace

const ArchitectureBuilder kLlama{"llama", check, forward_llama_blocks};

}  // namespace pie::models
