// Qwen3: Llama's blocks with an RMSNorm over each head of q and k before RoPE (the attention block
// applies the layer's q_norm / k_norm), no q/k/v biases, and a head dim that need not be n_embd / n_head.
#include "models/decoder.h"

namespace pie::models {
namespace {

void check(const Model& model) { check_decoder_weights(model, {.qk_norm = true}); }

}  // namespace

const ArchitectureBuilder kQwen3{"qwen3", check, forward_llama_blocks};

}  // namespace pie::models
