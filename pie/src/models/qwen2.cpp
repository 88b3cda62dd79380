// Qwen2 / Qwen2.5: Llama's blocks with biases on the q, k and v projections, which the attention block
// adds when the layer has them.
#include "models/decoder.h"

namespace pie::models {
namespace {

void check(const Model& model) { check_decoder_weights(model, {.qkv_bias = true}); }

}  // namespace

const ArchitectureBuilder kQwen2{"qwen2", check, forward_llama_blocks};

}  // namespace pie::models
