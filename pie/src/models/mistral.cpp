// Mistral: Llama's blocks with sliding-window attention (each query sees the last `sliding_window`
// positions; the config's window, 0 meaning full attention, as in Mistral 7B v0.2+ and Nemo), which the
// attention block reads from the config.
#include "models/decoder.h"

namespace pie::models {
namespace {

void check(const Model& model) { check_decoder_weights(model, {}); }

}  // namespace

const ArchitectureBuilder kMistral{"mistral", check, forward_llama_blocks};

}  // namespace pie::models
